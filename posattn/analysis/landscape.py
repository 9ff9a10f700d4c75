"""Loss landscapes along two filter-normalised random directions, PK22 Figure 1 (Li et al. 2018).

theta(x, y) = theta* + x d1 + y d2 on a 21 x 21 grid of [-1, 1]^2. Each direction draws N(0, 1) per
parameter tensor and rescales every filter to the norm of the same filter of theta*, so a step of 1
moves each filter by its own size whatever the layer's scale. A filter is one index of the last axis of
a kernel (the output unit of a flax Dense or Conv kernel, whose layout is (..., in, out)); PK22's code
normalises across the output-channel axis of PyTorch's (out, in, ...) kernels, the same units. Tensors
with fewer than 2 dimensions (biases, normalisation scales) and the positional embedding are zeroed in
the directions (PK22's code), so every model moves only its weights.

The loss at all grid points is computed in vmapped chunks of points (`jax.lax.map` with a batch size),
one compiled program for the whole grid: the points are padded to a multiple of the chunk, so the
loss appears once in it (an uneven last chunk would be a second, unbatched copy).
"""
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

GRID = 21  # points per axis (PK22 Figure 1)
EXTENT = 1.0  # the grid spans [-EXTENT, EXTENT]^2


def _path_names(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def is_moved(path, leaf) -> bool:
    """Whether a parameter tensor moves along the directions: kernels yes; biases, normalisation
    parameters (ndim < 2) and the positional embedding no."""
    return leaf.ndim >= 2 and "pos_embedding" not in _path_names(path)


def filter_normalised_direction(key: jax.Array, params) -> Any:
    """A random direction with the structure of `params`: N(0, 1), every filter (index of the last axis)
    rescaled to the norm of that filter in `params`; zero where `is_moved` says no."""
    # one Gaussian vector for all tensors, not one draw per tensor: the same distribution, and one
    # random-number generator in a compiled program instead of one per tensor (each costs seconds of
    # XLA compilation on a CPU)
    flat_P, unravel = ravel_pytree(jax.tree.map(lambda t: t.astype(jnp.float32), params))
    noise = jax.tree.leaves(unravel(jax.random.normal(key, flat_P.shape, jnp.float32)))
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    out = []
    for d, (path, theta) in zip(noise, leaves):
        if not is_moved(path, theta):
            out.append(jnp.zeros_like(theta))
            continue
        axes = tuple(range(theta.ndim - 1))
        d_norm = jnp.sqrt(jnp.sum(d**2, axis=axes, keepdims=True))
        t_norm = jnp.sqrt(jnp.sum(jnp.square(theta.astype(jnp.float32)), axis=axes, keepdims=True))
        out.append((d * t_norm / jnp.maximum(d_norm, 1e-12)).astype(theta.dtype))
    return jax.tree_util.tree_unflatten(treedef, out)


def grid(n: int = GRID, extent: float = EXTENT) -> np.ndarray:
    """The n points per axis, -extent .. extent."""
    return np.linspace(-extent, extent, n)


def frobenius_penalty(params, weight: float) -> jax.Array:
    """weight * sum over tensors of ||theta||_F (not squared): the regulariser of PK22's landscape code."""
    return weight * sum(jnp.linalg.norm(x.astype(jnp.float32).ravel()) for x in jax.tree.leaves(params))


def surface(
    loss_fn: Callable[[Any, Any], jax.Array],
    params,
    batch,
    d1,
    d2,
    *,
    xs=None,
    ys=None,
    chunk: int = 21,
) -> jax.Array:
    """loss_fn(theta* + x d1 + y d2, batch) at every (x, y): an array (len(ys), len(xs)), rows = y.

    `chunk` grid points are evaluated together (vmapped); the chunks run one after another, the last
    padded with the origin (its losses are dropped).
    """
    xs = grid() if xs is None else xs
    ys = grid() if ys is None else ys
    X, Y = np.meshgrid(np.asarray(xs, np.float32), np.asarray(ys, np.float32))
    points_Gx2 = jnp.stack([jnp.asarray(X.ravel()), jnp.asarray(Y.ravel())], axis=1)

    def at(point_2):
        x, y = point_2[0], point_2[1]
        theta = jax.tree.map(lambda t, a, b: t + (x * a + y * b).astype(t.dtype), params, d1, d2)
        return loss_fn(theta, batch)

    G = points_Gx2.shape[0]
    chunk = min(chunk, G)
    padded_Px2 = jnp.pad(points_Gx2, ((0, -G % chunk), (0, 0)))
    losses_P = jax.lax.map(at, padded_Px2, batch_size=chunk)
    return losses_P[:G].reshape(X.shape)
