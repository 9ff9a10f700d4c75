"""The counter-example of JSL22's Figure 2: Gaussian patches labelled by a cubic CNN over the blocks.

Every patch is i.i.d. N(0, I_d); y = sign(f*(X)) with f*(X) = sum_l sum_r a_r (sum_k <w_{r,k}, X_{S_l[k]}>)^3,
a one-hidden-layer CNN with cubic activation over the C patches of each block of the grid partition.
Widths, weights and the shared-filter option are decisions of docs/decisions.md (the paper gives none).
"""

import math

import jax
import jax.numpy as jnp

from posattn.errors import ConfigError
from posattn.theory.task import Task


def integer_labelling(cfg) -> bool:
    """f* is real-valued: no ties to round, no value yC to report."""
    return False


def check(cfg) -> None:
    if cfg.partition != "grid":
        raise ConfigError(
            "dataset='gaussian_cnn' is the Figure-2 dataset: it needs partition='grid'"
        )


def make_labeller(key, cfg) -> dict:
    """The CNN's filters w_{r,k} (cnn_width, C, d) and output weights a_r (cnn_width,) in {-1, +1}.

    Filters are scaled so each pre-activation sum_k <w_{r,k}, X_{S_l[k]}> has unit variance.
    """
    _, _, k_cnn, k_out = jax.random.split(
        key, 4
    )  # the task key's last two streams (data.make_task)
    filters = jax.random.normal(k_cnn, (cfg.cnn_width, cfg.C, cfg.d)) / math.sqrt(cfg.C * cfg.d)
    if cfg.cnn_shared_filter:  # one filter for the whole block: w_{r,k} = w_{r,0} for every k
        filters = jnp.repeat(filters[:, :1], cfg.C, axis=1)
    out = jnp.where(jax.random.bernoulli(k_out, 0.5, (cfg.cnn_width,)), 1.0, -1.0)
    return {"filters": filters, "out": out}


def labelling_function(X: jax.Array, cfg, task: Task) -> jax.Array:
    """f*(X) = sum_l sum_r a_r (sum_k <w_{r,k}, X_{S_l[k]}>)^3 (JSL22, Figure 2)."""
    X_blocks = X[:, task.sets, :]  # (n, L, C, d)
    h = jnp.einsum("nlkd,rkd->nlr", X_blocks, task.labeller["filters"])
    return jnp.einsum("nlr,r->n", h**3, task.labeller["out"])


def sample(key: jax.Array, cfg, task: Task, n: int):
    """n data points: X ~ N(0, I) patch by patch, y = sign(f*(X)) (0 counts as +1)."""
    _, k_noise = jax.random.split(key)  # the same stream as Assumption 1's noise
    X = jax.random.normal(k_noise, (n, cfg.D, cfg.d))
    return X, jnp.where(labelling_function(X, cfg, task) >= 0, 1.0, -1.0)
