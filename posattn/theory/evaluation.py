"""Final evaluation on fresh samples: test error of F and the label-noise rate of f*."""
import functools

import jax
import jax.numpy as jnp

from posattn.theory.config import TheoryConfig
from posattn.theory.data import Task, labelling_function, sample
from posattn.theory.model import forward


# f* is a sum of per-set sums that are exact integers in the math (orthogonal noise): a spurious set
# that cancels the signal set gives f* = 0 exactly, and the rounding of <w*, X_i> (~1e-7) must not
# decide such ties. Real non-ties are at least 0.9 C away from 0.
TIE_TOLERANCE = 1e-3


def label_disagrees(X, y, cfg: TheoryConfig, task: Task) -> jax.Array:
    """bool (n,): y f*(X) <= 0, the label disagrees with f* (ties f* = 0 included, up to rounding)."""
    return y * labelling_function(X, cfg, task) <= TIE_TOLERANCE


@functools.partial(jax.jit, static_argnames=("cfg", "n", "chunk"))
def test_errors(key, params, cfg: TheoryConfig, task: Task, n: int = 100_000, chunk: int = 10_000):
    """Errors on n fresh samples, drawn `chunk` at a time to bound memory.

    Returns {"test_error": P[y F(X) <= 0], "label_noise_rate": P[y f*(X) <= 0]}: the second is the
    share of samples whose label disagrees with the labelling function of Assumption 1 (its floor for a
    model that learns f*).
    """
    def one(k):
        X, y = sample(k, cfg, task, chunk)
        return jnp.stack([(~(y * forward(params, X, cfg) > 0)).mean(),
                          label_disagrees(X, y, cfg, task).mean()])

    errors = jax.lax.map(one, jax.random.split(key, max(1, n // chunk))).mean(0)
    return {"test_error": errors[0], "label_noise_rate": errors[1]}
