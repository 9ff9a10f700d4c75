"""Mini-batch SGD with a constant step on the hinge loss (Theorem 1 of LWLC23).

The paper's algorithm: one step size eta for W_Q, W_K, W_V and W_O (`SGDConfig.eta_attention` gives
the attention its own, an option), T = ceil(t_scale / (alpha_* eta)) iterations (Theorem 1's
T = Theta(1 / (alpha_* eta))), each on a mini-batch of `sgd.batch` of the N training samples drawn
uniformly with replacement. T, N and the number of tokens removed at training time may be traced
values, so runs with different knobs vmap together (`posattn.shallow.grid`); a vmapped loop runs to its
largest T and leaves each finished run unchanged (so cells of one T are best batched together). The
per-token output weights a_(l) stay fixed.

Mini-batches come from a `batches(key) -> Tokens` function, e.g. `drawn_batches`, which draws training
sample i from its own key when it is used (`posattn.shallow.data.sample_at`), so a training set of
thousands of samples costs no memory.
"""

import math

import jax
import jax.numpy as jnp

from posattn.shallow import metrics, removal
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig
from posattn.shallow.data import Tokens, sample_at
from posattn.shallow.model import TRAINED, hinge_loss


def iterations(sgd: SGDConfig, alpha_star):
    """T: sgd.steps, or ceil(t_scale / (alpha_* eta)) (alpha_star may be traced: an int32 array then)."""
    if sgd.steps is not None:
        return sgd.steps
    ceil = (
        math.ceil
        if isinstance(alpha_star, (int, float))
        else lambda v: jnp.ceil(v).astype(jnp.int32)
    )
    return ceil(
        sgd.t_scale / (alpha_star * sgd.eta) - 1e-4
    )  # the 1e-4: 12 / 0.06 is 200.00000000000003


def uniform_indices(key: jax.Array, N, batch: int) -> jax.Array:
    """`batch` indices uniform on 0..N-1 (N may be traced)."""
    return jnp.floor(jax.random.uniform(key, (batch,)) * N).astype(jnp.int32)


def drawn_batches(data_key: jax.Array, N, batch: int, tokens: TokenConfig, **knobs):
    """Mini-batches drawn with replacement from the N training samples of `data_key` (sample i from
    fold_in(data_key, i)); `knobs` as `posattn.shallow.data.sample`'s."""
    return lambda key: sample_at(data_key, uniform_indices(key, N, batch), tokens, **knobs)


def step_size(name: str, sgd: SGDConfig) -> float:
    """eta, or eta_attention for W_Q and W_K when it is set."""
    if name in ("W_Q", "W_K") and sgd.eta_attention is not None:
        return sgd.eta_attention
    return sgd.eta


def sgd_step(
    params: dict, key: jax.Array, batches, cfg: ModelConfig, sgd: SGDConfig, remove=None
) -> dict:
    """theta <- theta - eta grad of the hinge loss on one mini-batch, after removing `remove` tokens
    (None = sgd.train_remove; may be traced) of each of its samples by sgd.train_policy (token
    sparsification at training time; 0 = none)."""
    k_batch, k_remove = jax.random.split(key)
    batch = batches(k_batch)
    remove = sgd.train_remove if remove is None else remove
    keep_BxL = None
    if not (isinstance(remove, int) and remove == 0):  # a traced count, or a fixed one > 0
        score_BxL = removal.removal_scores(k_remove, sgd.train_policy, batch, params, cfg)
        keep_BxL = removal.keep_mask(score_BxL, remove)
    trained = {name: params[name] for name in TRAINED}
    loss = lambda w: hinge_loss({**params, **w}, batch.x_BxLxd, batch.y_B, cfg, keep_BxL)
    grads = jax.grad(loss)(trained)
    return {
        **params,
        **{name: trained[name] - step_size(name, sgd) * grads[name] for name in TRAINED},
    }


def run_steps(
    params: dict,
    key: jax.Array,
    batches,
    start,
    stop,
    cfg: ModelConfig,
    sgd: SGDConfig,
    remove=None,
) -> dict:
    """SGD steps start..stop-1 (both may be traced); the step-t batch comes from fold_in(key, t)."""
    body = lambda t, p: sgd_step(p, jax.random.fold_in(key, t), batches, cfg, sgd, remove)
    return jax.lax.fori_loop(start, stop, body, params)


def train(
    params: dict, key: jax.Array, batches, T, cfg: ModelConfig, sgd: SGDConfig, remove=None
) -> dict:
    """T SGD steps from `params` (T may be traced)."""
    return run_steps(params, key, batches, 0, T, cfg, sgd, remove)


def train_with_history(
    params: dict, key: jax.Array, batches, T: int, test: Tokens, cfg: ModelConfig, sgd: SGDConfig
):
    """`train` with `metrics.evaluate` on `test` at step 0, every `sgd.eval_every` steps and at T.

    Returns (params, history): history maps "step", "test_hinge", "test_error", "attention_mass" to
    arrays over the ceil(T / eval_every) + 1 evaluations (one `lax.scan`, one compiled call).
    """

    def chunk(params, start):
        params = run_steps(
            params, key, batches, start, jnp.minimum(start + sgd.eval_every, T), cfg, sgd
        )
        return params, {
            **metrics.evaluate(params, test, cfg),
            "step": jnp.minimum(start + sgd.eval_every, T),
        }

    first = {**metrics.evaluate(params, test, cfg), "step": jnp.int32(0)}
    params, rest = jax.lax.scan(chunk, params, jnp.arange(0, T, sgd.eval_every))
    return params, jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
