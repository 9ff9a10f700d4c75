"""What a learning problem of JSL22's theory regime fixes once (`Task`: the partition S_1..S_L of
Definition 2.1 and the feature w* of Assumption 1), and the partition's index maps.

A leaf of the theory package: the datasets (`posattn.theory.datasets`) and `posattn.theory.data`, which
dispatches to them, both build on it, so neither imports the other's importer.
"""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError


class Task(NamedTuple):
    """What a learning problem fixes once: the partition and the feature(s).

    Attributes:
      sets: int (L, C), row l lists the patches of S_l (0-based, sorted).
      w_star: float (d,), the unit feature w*.
      labeller: what the dataset's labelling function fixes once (a pytree; e.g. Figure 2's CNN
        filters and output weights), None when it needs nothing beyond sets and w*.
    """

    sets: jax.Array
    w_star: jax.Array
    labeller: Any = None


def grid_sets(D: int, C: int) -> jax.Array:
    """The spatially localised partition: k x k blocks of the sqrt(D) x sqrt(D) grid, row-major.

    D=16, C=4 gives (0-based) {0,1,4,5}, {2,3,6,7}, {8,9,12,13}, {10,11,14,15} (Figure 1b-(1)).
    ConfigError unless D = side^2 and C = k^2 with k dividing side (else no such blocks exist, and the
    rounded square roots gave row pieces: grid_sets(16, 2) returned {0,1}, {2,3}, ...).
    """
    side, k = math.isqrt(D), math.isqrt(C)
    if side * side != D or k * k != C or k < 1 or side % k:
        raise ConfigError(
            f"grid_sets(D={D}, C={C}): k x k blocks of a sqrt(D) x sqrt(D) grid need D and C "
            "square and sqrt(C) dividing sqrt(D)"
        )
    idx = jnp.arange(D).reshape(
        side // k, k, side // k, k
    )  # (block row, in-row, block col, in-col)
    return jnp.transpose(idx, (0, 2, 1, 3)).reshape(D // C, C)


def check_partition(sets) -> None:
    """ConfigError unless `sets` (L, C) is a partition of the patches 0..D-1 (D = L C), 0-based. Values
    are read only where `sets` is concrete (under jit it is traced: its shape alone is checked)."""
    if jnp.ndim(sets) != 2:
        raise ConfigError(
            f"sets has shape {jnp.shape(sets)}: give (L, C), row l the patches of S_l"
        )
    if isinstance(sets, jax.core.Tracer) or not getattr(sets, "is_fully_addressable", True):
        return  # traced, or spread over processes (a multi-host run's): its values are not here
    values = np.sort(np.asarray(sets).ravel())
    if not np.array_equal(values, np.arange(values.size)):
        repeats = values.size - np.unique(values).size
        raise ConfigError(
            f"sets must list each patch 0..{values.size - 1} once (0-based), got values "
            f"{values.min()}..{values.max()} with {repeats} repeats"
        )


def set_index(sets: jax.Array) -> jax.Array:
    """int (D,): the set l that patch j belongs to. ConfigError for `sets` that do not partition 0..D-1
    (`check_partition`): a 1-based or repeated index was dropped or overwritten silently."""
    check_partition(sets)
    L, C = sets.shape
    return (
        jnp.zeros(L * C, jnp.int32)
        .at[sets.reshape(-1)]
        .set(jnp.repeat(jnp.arange(L, dtype=jnp.int32), C))
    )


def same_set_mask(sets: jax.Array) -> jax.Array:
    """bool (D, D): True where patches i and j lie in the same set (the "true block mask");
    ConfigError as `set_index`."""
    ell = set_index(sets)
    return ell[:, None] == ell[None, :]


def unit_vector(key: jax.Array, d: int) -> jax.Array:
    w = jax.random.normal(key, (d,))
    return w / jnp.linalg.norm(w)
