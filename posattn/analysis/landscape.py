"""Loss landscapes along two normalised random directions, PK22 Figure 1 (Li et al. 2018).

theta(x, y) = theta* + x d1 + y d2 on a 21 x 21 grid of [-1, 1]^2. Each direction draws N(0, 1) per
parameter and rescales it slice by slice to the norm of the same slice of theta*, so a step of 1 moves
every slice by its own size whatever the layer's scale. Which slices (`normalisation`):

- "pk22" (default): PK22's code (xxxnell/how-do-vits-work, ops/loss_landscapes.py, `normalize_filter`)
  takes `torch.norm(w, dim=0)`, the norm over dim 0 of PyTorch's parameter: for a (out, in, kh, kw)
  conv or (out, in) linear weight, one norm over the output axis per (in, kh, kw) slice or input unit.
  In flax's layouts that axis is the last axis of a Dense or Conv kernel ((in, out), (kh, kw, in, out))
  and of the attention-output kernel ((heads, head_dim, out): PyTorch's (out, heads * head_dim)), all
  but the first axis of the query, key and value kernels ((in, [3,] heads, head_dim): PyTorch's
  (3 width, width) qkv weight, or one (width, width) weight each), and the first axis of any other
  tensor, whose layout is PyTorch's (a (1, 1, width) class token: its size-1 first axis makes every
  entry its own slice, d_i -> sign(d_i) |theta*_i|).
- "filter": Li et al.'s filter normalisation, one norm per output unit (per index of the axes above,
  over all the others); this module's convention before issue 35.

Both divide by the direction's norm + 1e-7 (`normalize_filter`). Tensors PyTorch holds as 1-D (biases,
here also the attention's (heads, head_dim) and (3, heads, head_dim) biases; normalisation scales and
offsets; batch-norm statistics, which are not parameters here) are zeroed in the directions
(`ignore_bn`), and so is the positional embedding (PK22's notebook losslandscape.ipynb passes
kws=["pos_embed", "relative_position"] to `ignore_kw`): every model moves only its weights.

The loss at all grid points is computed in vmapped chunks of points (`jax.lax.map` with a batch size),
one compiled program for the whole grid: the points are padded to a multiple of the chunk, so the
loss appears once in it (an uneven last chunk would be a second, unbatched copy). The chunk is the
backend's (`default_chunk`) unless given: one point at a time on a CPU, where XLA runs the vmapped
loss, whose weights differ per point, 2-3 times slower per point (docs/how_vits_work.md, Time).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from posattn.errors import ConfigError

GRID = 21  # points per axis (PK22 Figure 1)
EXTENT = 1.0  # the grid spans [-EXTENT, EXTENT]^2


def _path_names(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


# Kernels of a DenseGeneral with one input axis and several output axes: (in, *out).
_INPUT_FIRST = ("qkv", "query", "key", "value")
_NOT_MOVED = ("bias", "scale", "pos_embedding")
NORMALISATIONS = ("pk22", "filter")
_EPS = 1e-7  # PK22's normalize_filter: w_norm / (d_norm + 1e-7)


def output_axes(path, leaf) -> tuple[int, ...] | None:
    """The axes of a parameter tensor that are PyTorch's dim 0 (a layer's output axis, module
    docstring), or None where the tensor does not move along the directions."""
    names = _path_names(path).split("/")
    if leaf.ndim < 2 or any(n in _NOT_MOVED for n in names):
        return None
    if names[-1] != "kernel":
        return (0,)  # the class token: the same layout as PyTorch's
    if len(names) > 1 and names[-2] in _INPUT_FIRST:
        return tuple(range(1, leaf.ndim))
    return (leaf.ndim - 1,)


def norm_axes(path, leaf, normalisation: str = "pk22") -> tuple[int, ...] | None:
    """The axes one slice's norm is taken over: PyTorch's dim 0 ("pk22"), or all others ("filter");
    None where the tensor does not move."""
    if normalisation not in NORMALISATIONS:
        raise ConfigError(f"normalisation={normalisation!r}: choose one of {NORMALISATIONS}")
    out = output_axes(path, leaf)
    if out is None or normalisation == "pk22":
        return out
    return tuple(a for a in range(leaf.ndim) if a not in out)


def _check_like(direction, params, what: str) -> None:
    """ConfigError unless `direction` has the tree structure and leaf shapes of `params` (a direction
    of another model, or another ordering of its leaves, would otherwise move the wrong tensors, or
    broadcast)."""
    if jax.tree.structure(direction) != jax.tree.structure(params):
        raise ConfigError(
            f"{what} has another tree structure than the params: draw it from these params "
            "(random_direction(key, params))"
        )
    for (path, d), theta in zip(
        jax.tree_util.tree_flatten_with_path(direction)[0], jax.tree.leaves(params)
    ):
        if jnp.shape(d) != jnp.shape(theta):
            raise ConfigError(
                f"{what} at {_path_names(path)!r} has shape {jnp.shape(d)}, the params "
                f"{jnp.shape(theta)}: draw it from these params "
                "(random_direction(key, params))"
            )


def normalise_direction(direction, params, normalisation: str = "pk22") -> Any:
    """`direction` (the structure of `params`) with every slice rescaled to the norm of that slice of
    `params` (`norm_axes`), zero where a tensor does not move (module docstring). ConfigError for a
    direction of another structure or shapes."""
    _check_like(direction, params, "the direction")
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    out = []
    for d, (path, theta) in zip(jax.tree.leaves(direction), leaves):
        axes = norm_axes(path, theta, normalisation)
        if axes is None:
            out.append(jnp.zeros_like(theta))
            continue
        d = d.astype(jnp.float32)
        d_norm = jnp.sqrt(jnp.sum(d**2, axis=axes, keepdims=True))
        t_norm = jnp.sqrt(jnp.sum(jnp.square(theta.astype(jnp.float32)), axis=axes, keepdims=True))
        out.append((d * t_norm / (d_norm + _EPS)).astype(theta.dtype))
    return jax.tree_util.tree_unflatten(treedef, out)


def random_direction(key: jax.Array, params, normalisation: str = "pk22") -> Any:
    """A random direction with the structure of `params`: N(0, 1) per entry, `normalise_direction`."""
    # one Gaussian vector for all tensors, not one draw per tensor: the same distribution, and one
    # random-number generator in a compiled program instead of one per tensor (each costs seconds of
    # XLA compilation on a CPU)
    flat_P, unravel = ravel_pytree(jax.tree.map(lambda t: t.astype(jnp.float32), params))
    noise = unravel(jax.random.normal(key, flat_P.shape, jnp.float32))
    return normalise_direction(noise, params, normalisation)


def grid(n: int = GRID, extent: float = EXTENT) -> np.ndarray:
    """The n points per axis, -extent .. extent (theta* among them for odd n); ConfigError unless n >= 2
    and extent > 0."""
    if isinstance(n, bool) or int(n) != n or n < 2 or not np.isfinite(extent) or extent <= 0:
        raise ConfigError(
            f"grid(n={n!r}, extent={extent!r}): give n >= 2 points (odd: theta* on the "
            "grid) and a finite extent > 0"
        )
    return np.linspace(-extent, extent, int(n))


def default_chunk() -> int:
    """Grid points per vmapped chunk where none is given: 1 on a CPU (a digits ResNet, 64 images, 81
    points: 5.4 s one at a time against 10.7 s in chunks of 9), a row of PK22's grid elsewhere."""
    return 1 if jax.default_backend() == "cpu" else GRID


def surface(
    loss_fn: Callable[[Any, Any], jax.Array],
    params,
    batch,
    d1,
    d2,
    *,
    xs=None,
    ys=None,
    chunk: int | None = None,
) -> jax.Array:
    """loss_fn(theta* + x d1 + y d2, batch) at every (x, y): an array (len(ys), len(xs)), rows = y.

    `chunk` grid points are evaluated together (vmapped; None: `default_chunk()`); the chunks run one
    after another, the last padded with the origin (its losses are dropped). ConfigError for directions
    of another structure or shapes than `params`, or a chunk < 1.
    """
    _check_like(d1, params, "d1")
    _check_like(d2, params, "d2")
    chunk = default_chunk() if chunk is None else chunk
    if isinstance(chunk, bool) or int(chunk) != chunk or chunk < 1:
        raise ConfigError(
            f"chunk={chunk!r}: give a positive number of grid points (or None: the backend's)"
        )
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
