"""Final evaluation on fresh samples: test error of F and the label-noise rate of f*."""

import jax
import jax.numpy as jnp

from posattn import compile_options
from posattn import mesh as mesh_lib
from posattn.errors import ConfigError
from posattn.metrics import classification_error
from posattn.theory.config import FINAL_TEST_CHUNK, TheoryConfig
from posattn.theory.data import Task, dataset, labelling_function, sample
from posattn.theory.model import forward

# f* is a sum of per-set sums that are exact integers in the math (orthogonal noise): a spurious set
# that cancels the signal set gives f* = 0 exactly, and the rounding of <w*, X_i> (~1e-7) must not
# decide such ties. Real non-ties are at least 0.9 C away from 0.
TIE_TOLERANCE = 1e-3


def label_disagrees(X, y, cfg: TheoryConfig, task: Task) -> jax.Array:
    """bool (n,): y f*(X) <= 0, the label disagrees with f* (ties f* = 0 included, up to rounding).
    A real-valued f* (Figure 2's CNN) has no ties to round, so no tolerance."""
    tolerance = TIE_TOLERANCE if dataset(cfg).integer_labelling(cfg) else 0.0
    return y * labelling_function(X, cfg, task) <= tolerance


def f_star_is_not_yC(X, y, cfg: TheoryConfig, task: Task) -> jax.Array:
    """bool (n,): f*(X) != y C, the event the run summary reports (some set besides the signal set is
    all +1 or all -1, about 2 (L - 1) (q/2)^C). It includes the label noise y f* <= 0 (a set all -y)
    and the harmless case of a set all +y."""
    return jnp.abs(labelling_function(X, cfg, task) - y * cfg.C) > TIE_TOLERANCE


def test_errors(
    key, params, cfg: TheoryConfig, task: Task, n: int = 100_000, chunk: int = FINAL_TEST_CHUNK
):
    """Errors on n fresh samples, drawn `chunk` at a time to bound memory (n <= chunk, or a multiple).

    Returns {"test_error": P[y F(X) <= 0], "label_noise_rate": P[y f*(X) <= 0], "f_star_not_yC_rate":
    P[f*(X) != y C]}: the second is the share of samples whose label disagrees with the labelling
    function (its floor for a model that learns f*); the third is for integer-valued f* only (NaN
    otherwise: isotropic noise, or Figure 2's data, whose f* is a CNN).
    """
    chunk = min(chunk, n)
    if n % chunk:
        raise ConfigError(f"test_errors: n={n} is not a multiple of the chunk of {chunk} samples")
    # Compiled once per (cfg, n, chunk) as a program that runs once per run.
    return compile_options.jit_run_once(_errors, cfg=cfg, n=n, chunk=chunk)(key, params, task)


def _errors(key, params, task: Task, *, cfg: TheoryConfig, n: int, chunk: int):
    def one(k, params, task):
        X, y = sample(k, cfg, task, chunk)
        not_yC = (
            f_star_is_not_yC(X, y, cfg, task).mean()
            if dataset(cfg).integer_labelling(cfg)
            else jnp.float32(jnp.nan)
        )
        return jnp.stack(
            [
                classification_error(forward(params, X, cfg), y),
                label_disagrees(X, y, cfg, task).mean(),
                not_yC,
            ]
        )

    # The chunks are split over the devices when they divide evenly (`map_runs`): the same draws.
    errors = mesh_lib.map_runs(one, jax.random.split(key, n // chunk), params, task).mean(0)
    return {"test_error": errors[0], "label_noise_rate": errors[1], "f_star_not_yC_rate": errors[2]}
