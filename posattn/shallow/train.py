"""Mini-batch SGD with a constant step on the hinge loss (Theorem 1 of LWLC23), in one `lax.scan`.

Each step draws `sgd.batch` of the first N training samples uniformly with replacement; N may be a
traced value, so runs on nested subsets of one drawn training set (N <= the drawn size) vmap together
(`posattn.shallow.grid`). All four matrices W_Q, W_K, W_V, W_O are trained; a stays fixed.
"""
import jax
import jax.numpy as jnp

from posattn.shallow import metrics
from posattn.shallow.config import ModelConfig, SGDConfig
from posattn.shallow.data import Tokens
from posattn.shallow.model import hinge_loss


def sgd_step(params: dict, key: jax.Array, train: Tokens, N, cfg: ModelConfig, sgd: SGDConfig) -> dict:
    """theta <- theta - eta grad of the hinge loss on a mini-batch of the first N training samples."""
    idx_B = jnp.floor(jax.random.uniform(key, (sgd.batch,)) * N).astype(jnp.int32)  # uniform on 0..N-1
    grads = jax.grad(hinge_loss)(params, train.x_BxLxd[idx_B], train.y_B[idx_B], cfg)
    steps = {name: step_size(name, sgd) for name in params}
    return {name: params[name] - steps[name] * grads[name] for name in params}


def step_size(name: str, sgd: SGDConfig) -> float:
    """eta, or eta_attention for W_Q and W_K when it is set."""
    if name in ("W_Q", "W_K") and sgd.eta_attention is not None:
        return sgd.eta_attention
    return sgd.eta


def run_steps(params: dict, key: jax.Array, train: Tokens, N, start, num_steps: int, cfg: ModelConfig,
              sgd: SGDConfig) -> dict:
    """`num_steps` SGD steps from step `start`; the step-t batch comes from fold_in(key, t)."""

    def one(params, t):
        return sgd_step(params, jax.random.fold_in(key, t), train, N, cfg, sgd), None

    return jax.lax.scan(one, params, start + jnp.arange(num_steps))[0]


def train(params: dict, key: jax.Array, train_set: Tokens, N, cfg: ModelConfig, sgd: SGDConfig) -> dict:
    """`sgd.steps` SGD steps from `params`."""
    return run_steps(params, key, train_set, N, 0, sgd.steps, cfg, sgd)


def train_with_history(params: dict, key: jax.Array, train_set: Tokens, N, test: Tokens, cfg: ModelConfig,
                       sgd: SGDConfig):
    """`train` with `metrics.evaluate` on `test` at step 0 and every `sgd.eval_every` steps.

    Returns (params, history): history maps "step", "test_hinge", "test_error", "attention_mass" to
    arrays over the steps/eval_every + 1 evaluations (one nested `lax.scan`, one compiled call).
    """

    def chunk(params, start):
        params = run_steps(params, key, train_set, N, start, sgd.eval_every, cfg, sgd)
        return params, metrics.evaluate(params, test, cfg)

    first = metrics.evaluate(params, test, cfg)
    starts = jnp.arange(0, sgd.steps, sgd.eval_every)
    params, rest = jax.lax.scan(chunk, params, starts)
    history = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, rest)
    history["step"] = jnp.arange(0, sgd.steps + 1, sgd.eval_every)
    return params, history
