"""Attention concentration over SGD iterations (Proposition 2 of LWLC23), over many seeds at once.

Proposition 2: for a label-relevant query, the attention mass on label-relevant tokens converges to
1 - eta^C at rate O(1/t). The paper's figure: 0.54 at iteration 0, 0.91 by iteration 50, then flat.
"""

import functools

import jax
import numpy as np

from posattn.shallow import grid, train
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig


@functools.partial(jax.jit, static_argnames=("tokens", "model", "sgd"))
def seed_histories(keys_R: jax.Array, *, tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig):
    """`train.train_with_history` for every seed key (vmapped): (final params, history of (R, T) arrays)."""
    cell = grid.base_cell(tokens, model, sgd)
    T = train.iterations(sgd, tokens.n_star / tokens.L)

    def one(key):
        params, batches, test, k_sgd = grid.draw_run(key, cell, tokens, model, sgd)
        return train.train_with_history(params, k_sgd, batches, T, test, model, sgd)

    return jax.vmap(one)(keys_R)


def band(history: dict, name: str = "attention_mass") -> dict:
    """Mean, min, max and 10%/90% quantiles over seeds of `name`, at every evaluation step."""
    v = np.asarray(history[name])
    return {
        "step": np.asarray(history["step"])[0].tolist(),
        "mean": v.mean(0).tolist(),
        "min": v.min(0).tolist(),
        "max": v.max(0).tolist(),
        "q10": np.quantile(v, 0.1, axis=0).tolist(),
        "q90": np.quantile(v, 0.9, axis=0).tolist(),
    }
