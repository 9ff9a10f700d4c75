r"""The risk (E) of Eq. (T) and its gradient in one pass over the samples, tile by tile.

The data enter Eq. (T) only through the patch values z_nj = <v, X_nj>, and the gradient in v is the
weighted sum sum_nj (dR/dz_nj) X_nj of the same patches. `jax.grad` of the plain model
(`posattn.theory.model.empirical_risk`) computes z over all of X, then the sum over all of X: X (for
N=50,000, D=10, d=100, 200 MB) crosses the memory bus at least twice a step, and the step is
memory-bound. Here the samples are cut into tiles of about `TILE_BYTES`; per tile, z, the loss and
dR/d(S, z) are computed and the tile's share of dR/dv is summed while the tile is still in cache
(`lax.scan` over the tiles), so X is read from memory once. dR/dS is accumulated over the tiles and
taken back through the softmax once. Same loss and gradient as `jax.grad` up to the order of the sums
(float32 round-off; tests/theory/test_fused.py).

Tile j holds the samples jm, ..., (j + 1)m - 1 (k tiles of m = n / k samples): a contiguous block of
X, so that taking it out of X is one copy of consecutive memory (strided tiles: 16.4 against 13.3 ms a step,
docs/benchmarks.md). Over several devices (`mesh`), each walks through the tiles of its own block of
samples, and the only communication is one sum of the partial sums per step; a sample axis sharded
over devices must therefore come with its `mesh`.

A loop that takes many steps on the same samples (`posattn.theory.step.train_chunk`) lays them out
once as `Tiles` (`tiled`): each tile transposed to (d, m D), its patches as columns, so that the two
products are a vector-matrix and a matrix-vector product over long rows, which XLA's CPU kernels
take 8-23% faster a step than over the (m D, d) rows of X (docs/benchmarks.md, "The floor of any XLA
tile loop"). `empirical_risk_and_grad` takes X as it comes; on a CPU it runs the same sums as a C++ kernel
(`posattn.theory.one_pass_kernel`, where it is built: `uses_kernel`) that overlaps the read of X with
the arithmetic, which no XLA tile loop does, and the run drivers then keep X as drawn. The tile loop
stays the path on accelerators and the reference.
"""
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from posattn.errors import ConfigError
from posattn.mesh import DATA
from posattn.theory.config import TheoryConfig
from posattn.theory import one_pass_kernel
from posattn.theory.model import attention, logistic_loss, mix, sigma

# X's bytes per tile: a tile is read from memory once and then again from cache, so it must fit in
# the cache the two reads share (a CPU core's L2 is 0.5-2 MiB, the shared L3 tens of MiB). On the
# 2-core CPU of docs/benchmarks.md the plain layout's step hardly moves from 0.25 to 4 MiB; the tiled
# layout's is 3-8% faster at 1.5-3 MiB than at 1 MiB (fewer tiles, so less per-tile loss work), and
# 30-100% slower from 8 MiB, once two cores' tiles crowd the L3.
TILE_BYTES = 2 << 20


def tile_count(n: int, row_bytes: int, tile_bytes: int = TILE_BYTES) -> int:
    """k, the number of tiles: the divisor of n that gives tiles nearest `tile_bytes` (in log scale)."""
    target = max(1.0, tile_bytes / row_bytes)  # samples per tile
    best, best_gap = 1, math.inf
    divisors = {k for i in range(1, math.isqrt(n) + 1) if n % i == 0 for k in (i, n // i)}
    for k in sorted(divisors):
        gap = abs(math.log((n // k) / target))
        if gap < best_gap:
            best, best_gap = k, gap
    return best


class Tiles(NamedTuple):
    """Samples laid out for the one-pass step (`tiled`): X_kxdxmD[t, :, i D + j] = X[t m + i, j], with
    y and weight (n,) as in `posattn.theory.step.Batch`. The tile axis splits over devices as the
    sample axis does: each device's tiles are its own block of samples."""

    X: jax.Array
    y: jax.Array
    weight: jax.Array


def tiled(X, y, weight, num_shards: int = 1, tile_bytes: int = TILE_BYTES) -> Tiles:
    """X (n, D, d) as `Tiles`: each of the `num_shards` blocks of n / num_shards samples (one per
    device) cut into `tile_count` tiles, each tile transposed to (d, m D). One pass over X."""
    n, D, d = X.shape
    k = tile_count(n // num_shards, D * d * X.dtype.itemsize, tile_bytes)
    return Tiles(X.reshape(num_shards * k, -1, d).transpose(0, 2, 1), y, weight)


def _summed_loss(S, z_nxD, y, w, cfg: TheoryConfig) -> jax.Array:
    """sum_n w_n loss(y_n F(X_n)) of Eq. (T) as a function of S and the patch values z = <v, X_nj> alone."""
    return (w * logistic_loss(y * sigma(mix(S, z_nxD, cfg), cfg.activation).sum(-1))).sum()


def _partial_sums(S, v, X, y, w, cfg: TheoryConfig, num_tiles: int | None, transposed: bool):
    """(sum_n w_n loss_n, its gradient in S, its gradient in v) over the samples at hand, tile by tile
    (module docstring): unnormalised, so that sums over devices add up. X is (n, D, d), or with
    `transposed` the (k, d, m D) tiles of `Tiles`."""
    if transposed:
        k, tiles = X.shape[0], X
        z_of = lambda X_j: (v @ X_j).reshape(-1, cfg.D)  # (m D,) in the order (sample, patch)
        grad_v = lambda dz_mxD, X_j: X_j @ dz_mxD.reshape(-1)
    else:
        n, D, d = X.shape
        k = num_tiles or tile_count(n, D * d * X.dtype.itemsize)
        tiles = X.reshape(k, n // k, D, d)
        z_of = lambda X_j: X_j @ v
        # The second read of the tile, from cache: a vector-matrix product over the (m D, d) rows.
        grad_v = lambda dz_mxD, X_j: dz_mxD.reshape(-1) @ X_j.reshape(-1, d)
    y_kxm, w_kxm = y.reshape(k, -1), w.reshape(k, -1)

    def one_tile(carry, j):
        loss, dS, dv = carry
        X_j, y_m, w_m = (a[0] if k == 1 else jax.lax.dynamic_index_in_dim(a, j, keepdims=False)
                         for a in (tiles, y_kxm, w_kxm))
        l, (dS_j, dz_mxD) = jax.value_and_grad(_summed_loss, argnums=(0, 1))(S, z_of(X_j), y_m, w_m, cfg)
        return (loss + l, dS + dS_j, dv + grad_v(dz_mxD, X_j)), None

    init = (jnp.zeros((), v.dtype), jnp.zeros_like(S), jnp.zeros_like(v))
    if k == 1:  # X fits in one tile: no loop, and no copy of the tile out of X
        return one_tile(init, 0)[0]
    return jax.lax.scan(one_tile, init, jnp.arange(k))[0]


def uses_kernel(dtype) -> bool:
    """Whether the one-pass sums of samples X (n, D, d) of `dtype` run in the CPU kernel
    (`posattn.theory.one_pass_kernel`): float32 on a CPU backend where the kernel is built."""
    return dtype == jnp.float32 and jax.default_backend() == "cpu" and one_pass_kernel.available()


def _kernel_sums(S, v, X, y, w, cfg: TheoryConfig):
    """`_partial_sums` by the CPU kernel, which takes the mix's factor D inside its matrix M."""
    scale = cfg.D if cfg.scale_by_D else 1
    loss, dM, dv = one_pass_kernel.partial_sums(scale * S, v, X, y, w, cfg.activation == "quintic")
    return loss, scale * dM, dv


def _risk_and_grad(params, X, y, w, cfg: TheoryConfig, num_tiles, mesh, transposed: bool):
    S, attention_vjp = jax.vjp(lambda A: attention(A, cfg), params["A"])
    v = params["v"]
    if not transposed and uses_kernel(X.dtype):
        sums = functools.partial(_kernel_sums, cfg=cfg)
    else:
        sums = functools.partial(_partial_sums, cfg=cfg, num_tiles=num_tiles, transposed=transposed)
    if mesh is None or mesh.devices.size == 1:
        loss, dS, dv = sums(S, v, X, y, w)
    else:
        def local(S, v, X, y, w):  # check_vma=False: the tile loop's zero start is not marked varying
            return jax.lax.psum(sums(S, v, X, y, w), DATA)

        loss, dS, dv = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(), P(DATA), P(DATA), P(DATA)),
                                     out_specs=P(), check_vma=False)(S, v, X, y, w)
    total = w.sum()
    (dA,) = attention_vjp(dS / total)
    return loss / total, {"A": dA, "v": dv / total}


def empirical_risk_and_grad(params, X: jax.Array, y: jax.Array, cfg: TheoryConfig, weight=None,
                            num_tiles: int | None = None, mesh=None):
    """(R, dR/dparams) of the risk (E), `model.empirical_risk`, in one pass over X (module docstring).

    X (n, D, d), y (n,), weight (n,) or None as in `empirical_risk`; `num_tiles` (a divisor of the
    samples per device) overrides `tile_count` in XLA's tile loop (the CPU kernel takes blocks of its own).
    With `mesh` (`posattn.mesh.data_mesh`, n a multiple of its size), each device takes its own block
    of samples through the tiles (`jax.shard_map`) and the partial sums are added over "data": on a
    CPU with one device per core (docs/decisions.md) this is what runs the pass on every core.
    The gradient is the full one (A's diagonal included), as `jax.grad` gives it.
    """
    per_device = X.shape[0] // (1 if mesh is None else mesh.devices.size)
    if num_tiles is not None and (num_tiles < 1 or per_device % num_tiles):
        raise ConfigError(f"num_tiles={num_tiles} does not divide the {per_device} samples per device into "
                          "whole tiles")
    w = jnp.ones(X.shape[0], X.dtype) if weight is None else weight.astype(X.dtype)
    return _risk_and_grad(params, X, y, w, cfg, num_tiles, mesh, transposed=False)


def tiled_risk_and_grad(params, tiles: Tiles, cfg: TheoryConfig, mesh=None):
    """`empirical_risk_and_grad` on samples laid out by `tiled` (with `mesh`, `tiled`'s num_shards its
    size): the same loss and gradient, faster a step."""
    return _risk_and_grad(params, tiles.X, tiles.y, tiles.weight.astype(tiles.X.dtype), cfg, None, mesh,
                          transposed=True)


def tiled_risk(params, tiles: Tiles, cfg: TheoryConfig) -> jax.Array:
    """The risk (E), `model.empirical_risk`, of samples laid out by `tiled`: one pass over the tiles."""
    # A multiply-and-sum over each tile's rows: as a dot (einsum), XLA copies all of X into one matrix first.
    z_nxD = (tiles.X * params["v"][:, None]).sum(1).reshape(-1, cfg.D)
    w = tiles.weight.astype(tiles.X.dtype)
    return _summed_loss(attention(params["A"], cfg), z_nxD, tiles.y, w, cfg) / w.sum()
