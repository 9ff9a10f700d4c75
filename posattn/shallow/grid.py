"""Whole training runs vmapped over seeds and over grid cells, as one compiled computation.

A cell fixes the knobs a phase map varies: n_* (so alpha_* = n_*/L), the number of training samples N,
the token noise tau, the initial-model errors sigma, delta, the confusion tokens n_#, the noisy tokens'
count and bound, the SGD iterations T (by default ceil(t_scale / (alpha_* eta)) at the cell's alpha_*)
and (as a grid axis) the tokens removed from each training sample. Each (cell, seed) run draws its own initial model,
training samples (sample i from its own key, drawn when used: the first N of one set for every N), a
test set and SGD batches, all from its seed key, so two cells of one seed differ only by their knobs.
Seeds are a `jax.vmap`; cells are a `lax.map` in batches of `cells_per_batch` (vmapped inside), which
bounds the memory of the test sets.
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
    n_conf: jax.Array
    noisy_tokens: jax.Array
    noisy_tau: jax.Array
    noisy_irrelevant: jax.Array
    T: jax.Array
    remove: jax.Array | None  # None (unless a grid axis) = sgd.train_remove, a static count

    def token_knobs(self) -> dict:
        """The knobs `posattn.shallow.data.sample` takes."""
        return {
            "n_star": self.n_star,
            "tau": self.tau,
            "n_conf": self.n_conf,
            "noisy_tokens": self.noisy_tokens,
            "noisy_tau": self.noisy_tau,
            "noisy_irrelevant": self.noisy_irrelevant,
        }


INT_KNOBS = ("n_star", "N", "n_conf", "noisy_tokens", "noisy_irrelevant", "T", "remove")


def _base(tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig) -> dict:
    return {
        "n_star": tokens.n_star,
        "N": sgd.N,
        "tau": tokens.tau,
        "sigma": model.sigma,
        "delta": model.delta,
        "n_conf": tokens.n_conf,
        "noisy_tokens": tokens.noisy_tokens,
        "noisy_tau": tokens.noisy_tau,
        "noisy_irrelevant": int(tokens.noisy_kind == "irrelevant"),
        "T": None,
        "remove": sgd.train_remove,
    }


def product_cells(
    tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig, **axes
) -> tuple[Cell, tuple]:
    """Every combination of the values in `axes` (names of Cell's fields), the other knobs from the
    configs, T (unless an axis) from each cell's alpha_* = n_*/L (`train.iterations`); returns (Cell of
    flat vectors in row-major order of `axes`, the grid's shape)."""
    base = _base(tokens, model, sgd)
    unknown = set(axes) - set(base)
    if unknown:
        raise ValueError(f"unknown grid axes {sorted(unknown)}; choose from {sorted(base)}")
    combos = list(itertools.product(*axes.values()))
    columns = {name: [base[name]] * len(combos) for name in base}
    for i, name in enumerate(axes):
        columns[name] = [c[i] for c in combos]
    if columns["T"][0] is None:
        columns["T"] = [train.iterations(sgd, n / tokens.L) for n in columns["n_star"]]
    if (
        "remove" not in axes
    ):  # a static count: a step that removes none skips the removal (`train.sgd_step`)
        columns["remove"] = None
    cell = Cell(
        **{
            k: None
            if v is None
            else jnp.asarray(np.asarray(v, np.int32 if k in INT_KNOBS else np.float32))
            for k, v in columns.items()
        }
    )
    return cell, tuple(len(v) for v in axes.values())


def base_cell(tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig) -> Cell:
    """The cell of the configs themselves (no knob changed)."""
    return jax.tree.map(lambda a: a[0], product_cells(tokens, model, sgd)[0])


def draw_run(key: jax.Array, cell: Cell, tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig):
    """What a run draws from its key: (initial params, its mini-batches `batches(key)`, test set, SGD key).
    Training sample i comes from fold_in(k_data, i) (`train.drawn_batches`)."""
    k_init, k_data, k_test, k_sgd = jax.random.split(key, 4)
    params = init_params(k_init, tokens, model, sigma=cell.sigma, delta=cell.delta)
    batches = train.drawn_batches(k_data, cell.N, sgd.batch, tokens, **cell.token_knobs())
    test = sample(k_test, tokens, sgd.n_test, **cell.token_knobs())
    return params, batches, test, k_sgd


def run_cell(
    key: jax.Array, cell: Cell, *, tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig
) -> dict:
    """One training run at `cell` from `key`; its final evaluation plus "success"."""
    params, batches, test, k_sgd = draw_run(key, cell, tokens, model, sgd)
    params = train.train(params, k_sgd, batches, cell.T, model, sgd, cell.remove)
    entry = metrics.evaluate(params, test, model)
    return {**entry, "success": metrics.succeeded(entry, sgd)}


@functools.partial(jax.jit, static_argnames=("tokens", "model", "sgd", "cells_per_batch"))
def run_cells(
    keys_R: jax.Array,
    cells: Cell,
    *,
    tokens: TokenConfig,
    model: ModelConfig,
    sgd: SGDConfig,
    cells_per_batch: int = 8,
) -> dict:
    """`run_cell` for every cell and every seed key: a dict of arrays of shape (cells, seeds).

    The cells go in equal batches of at most `cells_per_batch`, the last one padded with copies of the
    last cell (dropped from the result): `lax.map` compiles a second copy of the whole run for a
    remainder batch, which costs more compile time than the few padded runs cost to compute. A batch runs
    to its largest T, so cells of one T (one alpha_* row) batched together waste no steps.
    """
    one = functools.partial(run_cell, tokens=tokens, model=model, sgd=sgd)
    over_seeds = lambda cell: jax.vmap(one, in_axes=(0, None))(keys_R, cell)
    n = cells.N.shape[0]
    batches = -(-n // cells_per_batch)
    size = -(-n // batches)
    padded = jax.tree.map(
        lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], batches * size - n)]), cells
    )
    out = jax.lax.map(over_seeds, padded, batch_size=size)
    return jax.tree.map(lambda a: a[:n], out)


def seed_keys(seed: int, R: int) -> jax.Array:
    """R independent run keys from one integer seed (ConfigError for one JAX cannot take)."""
    return jax.random.split(jax.random.PRNGKey(check_seed(seed)), R)
