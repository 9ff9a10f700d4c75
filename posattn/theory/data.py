"""What every synthetic dataset of JSL22 shares (the partition, w*, `Task` of `posattn.theory.task`),
and the dispatch to its module.

The datasets themselves (Assumption 1, Figure 2's Gaussian data) live in `posattn.theory.datasets`,
one module each, chosen by `TheoryConfig.dataset`. The randomness is kept in three places: `make_task`
draws what is fixed for a learning problem (the partition S_1..S_L, the feature w* and whatever the
dataset's labelling function needs), `sample` draws data points, and model initialisation takes its own
key. `sample` is a pure function of its key, compiled with `cfg` and `n` static: called from Python it
runs as one program (op by op, a draw compiled dozens of small ones), and inside `jit` or `vmap` it is
traced inline like any other function.
"""

import functools
import numbers

import jax
import jax.numpy as jnp

from posattn.errors import ConfigError
from posattn.theory.config import TheoryConfig
from posattn.theory.datasets import REGISTRY
from posattn.theory.task import Task, grid_sets, same_set_mask, set_index, unit_vector  # noqa: F401 (public)


def make_task(key: jax.Array, cfg: TheoryConfig) -> Task:
    """Draw the partition S_1..S_L (Definition 2.1), the unit feature w* (Assumption 1) and the labeller
    of `cfg.dataset`."""
    k_sets, k_w, _, _ = jax.random.split(key, 4)  # the last two are the labeller's (see its module)
    if cfg.partition == "grid":
        sets = grid_sets(cfg.D, cfg.C)
    else:
        sets = jnp.sort(jax.random.permutation(k_sets, cfg.D).reshape(cfg.L, cfg.C), axis=1)
    return Task(sets, unit_vector(k_w, cfg.d), dataset(cfg).make_labeller(key, cfg))


def dataset(cfg: TheoryConfig):
    """The module of `cfg.dataset` (`posattn.theory.datasets.REGISTRY`)."""
    return REGISTRY[cfg.dataset]


def check_patches(X, cfg: TheoryConfig) -> None:
    """ConfigError unless X is (..., D, d), samples of `cfg`'s D patches of dimension d (shape only)."""
    if jnp.ndim(X) < 2 or tuple(jnp.shape(X)[-2:]) != (cfg.D, cfg.d):
        raise ConfigError(
            f"X has shape {jnp.shape(X)}: samples of this config are (n, D, d) = "
            f"(n, {cfg.D}, {cfg.d})"
        )


def labelling_function(X: jax.Array, cfg: TheoryConfig, task: Task) -> jax.Array:
    """f*(X) of `cfg.dataset` (Assumption 1: sum_l Threshold_{0.9C}(sum_{i in S_l} <w*, X_i>)).
    ConfigError for X or a task of other shapes than `cfg`'s (their indexing clipped silently)."""
    check_patches(X, cfg)
    check_task(cfg, task)
    return dataset(cfg).labelling_function(X, cfg, task)


def check_task(cfg: TheoryConfig, task: Task) -> None:
    """ConfigError unless `task` is a task of `cfg`'s shapes (sets (L, C), w* (d,)), as `make_task(key,
    cfg)` draws it: a task of another config would index patches that do not exist."""
    sets, w = tuple(jnp.shape(task.sets)), tuple(jnp.shape(task.w_star))
    if sets != (cfg.L, cfg.C) or w != (cfg.d,):
        raise ConfigError(
            f"the task has sets {sets} and w* {w}, but the config needs sets ({cfg.L}, {cfg.C}) "
            f"and w* ({cfg.d},) (D={cfg.D}, C={cfg.C}, d={cfg.d}): draw it with "
            "make_task(key, cfg) for this config"
        )


@functools.partial(jax.jit, static_argnames=("cfg", "n"))
def sample(key: jax.Array, cfg: TheoryConfig, task: Task, n: int):
    """Draw n data points (X (n, D, d), y (n,)) of `cfg.dataset`; vmappable over `key`. ConfigError
    (while tracing) for n that is not an integer >= 0 or a task of another config (`check_task`)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ConfigError(f"n={n!r}: draw an integer number of samples >= 0")
    check_task(cfg, task)
    return dataset(cfg).sample(key, cfg, task, n)
