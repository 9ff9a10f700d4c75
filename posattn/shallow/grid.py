"""Whole training runs vmapped over seeds and over grid cells, as one compiled computation.

A cell fixes the knobs a phase map varies: n_* (so alpha_* = n_*/L), the number of training samples N,
the token noise tau and the initial-model errors sigma, delta. Each (cell, seed) run draws its own
initial model, N_max training samples (it trains on the first N), a test set and SGD batches, all from
its seed key, so two cells of one seed differ only by their knobs. Seeds are a `jax.vmap`; cells are a
`lax.map` in batches of `cells_per_batch` (vmapped inside), which bounds the memory of the test sets.
"""
import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import check_seed
from posattn.shallow import metrics, train
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig
from posattn.shallow.data import sample
from posattn.shallow.init import init_params


class Cell(NamedTuple):
    """The knobs of one grid cell (each a scalar, or a vector over cells)."""

    n_star: jax.Array
    N: jax.Array
    tau: jax.Array
    sigma: jax.Array
    delta: jax.Array


def product_cells(tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig, **axes) -> tuple[Cell, tuple]:
    """Every combination of the values in `axes` (names of Cell's fields), the other knobs from the
    configs; returns (Cell of flat vectors in row-major order of `axes`, the grid's shape)."""
    base = {"n_star": tokens.n_star, "N": sgd.N, "tau": tokens.tau, "sigma": model.sigma, "delta": model.delta}
    unknown = set(axes) - set(base)
    if unknown:
        raise ValueError(f"unknown grid axes {sorted(unknown)}; choose from {sorted(base)}")
    combos = list(itertools.product(*axes.values()))
    columns = {name: [base[name]] * len(combos) for name in base}
    for i, name in enumerate(axes):
        columns[name] = [c[i] for c in combos]
    dtypes = {"n_star": np.int32, "N": np.int32}
    cell = Cell(**{k: jnp.asarray(np.asarray(v, dtypes.get(k, np.float32))) for k, v in columns.items()})
    return cell, tuple(len(v) for v in axes.values())


def base_cell(tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig) -> Cell:
    """The cell of the configs themselves (no knob changed)."""
    return Cell(jnp.int32(tokens.n_star), jnp.int32(sgd.N), jnp.float32(tokens.tau), jnp.float32(model.sigma),
                jnp.float32(model.delta))


def draw_run(key: jax.Array, cell: Cell, tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig, n_max: int):
    """What a run draws from its key: (initial params, n_max training samples, test set, SGD key)."""
    k_init, k_data, k_sgd = jax.random.split(key, 3)
    params = init_params(k_init, tokens, model, sigma=cell.sigma, delta=cell.delta)
    both = sample(k_data, tokens, n_max + sgd.n_test, n_star=cell.n_star, tau=cell.tau)  # one draw compiles faster
    train_set = jax.tree.map(lambda a: a[:n_max], both)
    test = jax.tree.map(lambda a: a[n_max:], both)
    return params, train_set, test, k_sgd


def run_cell(key: jax.Array, cell: Cell, *, tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig,
             n_max: int) -> dict:
    """One training run at `cell` from `key`; its final evaluation plus "success"."""
    params, train_set, test, k_sgd = draw_run(key, cell, tokens, model, sgd, n_max)
    params = train.train(params, k_sgd, train_set, cell.N, model, sgd)
    entry = metrics.evaluate(params, test, model)
    return {**entry, "success": metrics.succeeded(entry, sgd)}


@functools.partial(jax.jit, static_argnames=("tokens", "model", "sgd", "n_max", "cells_per_batch"))
def run_cells(keys_R: jax.Array, cells: Cell, *, tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig,
              n_max: int, cells_per_batch: int = 8) -> dict:
    """`run_cell` for every cell and every seed key: a dict of arrays of shape (cells, seeds).

    The cells go in equal batches of at most `cells_per_batch`, the last one padded with copies of the
    last cell (dropped from the result): `lax.map` compiles a second copy of the whole run for a
    remainder batch, which costs more compile time than the few padded runs cost to compute.
    """
    one = functools.partial(run_cell, tokens=tokens, model=model, sgd=sgd, n_max=n_max)
    over_seeds = lambda cell: jax.vmap(one, in_axes=(0, None))(keys_R, cell)
    n = cells.N.shape[0]
    batches = -(-n // cells_per_batch)
    size = -(-n // batches)
    padded = jax.tree.map(lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], batches * size - n)]), cells)
    out = jax.lax.map(over_seeds, padded, batch_size=size)
    return jax.tree.map(lambda a: a[:n], out)


def seed_keys(seed: int, R: int) -> jax.Array:
    """R independent run keys from one integer seed (ConfigError for one JAX cannot take)."""
    return jax.random.split(jax.random.PRNGKey(check_seed(seed)), R)
