"""Loss landscapes along two filter-normalised random directions, PK22 Figure 1 (Li et al. 2018).

theta(x, y) = theta* + x d1 + y d2 on a 21 x 21 grid of [-1, 1]^2. Each direction draws N(0, 1) per
parameter tensor and rescales every filter to the norm of the same filter of theta*, so a step of 1
moves each filter by its own size whatever the layer's scale. A filter is one output unit of a layer,
as in PK22's code, which normalises each index of the output-channel axis of PyTorch's (out, in, ...)
kernels: in flax's layouts one index of the last axis of a Dense, Conv or attention-output kernel
((..., in, out)), and one index of all but the first axis of the attention's query, key and value
kernels ((in, [3,] heads, head_dim): PyTorch's one (3 width, width) matrix). A class token is one
filter (PyTorch's (1, 1, width) tensor, whose first axis has one index). Biases and normalisation
parameters (PyTorch's 1-D tensors, here also the attention's (heads, head_dim) biases) and the
positional embedding are zeroed in the directions (PK22's code), so every model moves only its weights.

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


# Kernels of a DenseGeneral with one input axis and several output axes: (in, *out).
_INPUT_FIRST = ("qkv", "query", "key", "value")
_NOT_MOVED = ("bias", "scale", "pos_embedding")


def filter_axes(path, leaf) -> tuple[int, ...] | None:
    """The axes one filter of a parameter tensor spans (its norm is taken over them), or None where
    the tensor does not move along the directions (module docstring)."""
    names = _path_names(path).split("/")
    if leaf.ndim < 2 or any(n in _NOT_MOVED for n in names):
        return None
    if names[-1] == "cls":
        return tuple(range(leaf.ndim))
    if names[-1] == "kernel" and len(names) > 1 and names[-2] in _INPUT_FIRST:
        return (0,)
    return tuple(range(leaf.ndim - 1))


def filter_normalised_direction(key: jax.Array, params) -> Any:
    """A random direction with the structure of `params`: N(0, 1), every filter (`filter_axes`)
    rescaled to the norm of that filter in `params`; zero where a tensor does not move."""
    # one Gaussian vector for all tensors, not one draw per tensor: the same distribution, and one
    # random-number generator in a compiled program instead of one per tensor (each costs seconds of
    # XLA compilation on a CPU)
    flat_P, unravel = ravel_pytree(jax.tree.map(lambda t: t.astype(jnp.float32), params))
    noise = jax.tree.leaves(unravel(jax.random.normal(key, flat_P.shape, jnp.float32)))
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    out = []
    for d, (path, theta) in zip(noise, leaves):
        axes = filter_axes(path, theta)
        if axes is None:
            out.append(jnp.zeros_like(theta))
            continue
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
