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
"""
import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from posattn.mesh import DATA
from posattn.theory.config import TheoryConfig
from posattn.theory.model import attention, logistic_loss, mix, sigma

# X's bytes per tile: a tile is read from memory once and then again from cache, so it must fit in
# the cache the two reads share (a CPU core's L2 is 0.5-2 MiB, the shared L3 tens of MiB; from 0.25 to
# 4 MiB the step's time hardly moves on the 2-core CPU of docs/benchmarks.md).
TILE_BYTES = 1 << 20


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


def _partial_sums(S, v, X, y, w, cfg: TheoryConfig, num_tiles: int | None):
    """(sum_n w_n loss_n, its gradient in S, its gradient in v) over the samples X (n, D, d) at hand,
    tile by tile (module docstring): unnormalised, so that sums over devices add up."""
    n, D, d = X.shape
    k = num_tiles or tile_count(n, D * d * X.dtype.itemsize)
    X_kxmxDxd = X.reshape(k, n // k, D, d)
    y_kxm, w_kxm = y.reshape(k, n // k), w.reshape(k, n // k)

    def tile_loss(S, z_mxD, y_m, w_m):  # the tile's summed loss, as a function of S and z alone
        margin = y_m * sigma(mix(S, z_mxD, cfg), cfg.activation).sum(-1)
        return (w_m * logistic_loss(margin)).sum()

    def one_tile(carry, j):
        loss, dS, dv = carry
        X_mxDxd, y_m, w_m = (a[0] if k == 1 else jax.lax.dynamic_index_in_dim(a, j, keepdims=False)
                             for a in (X_kxmxDxd, y_kxm, w_kxm))
        z_mxD = X_mxDxd @ v
        l, (dS_j, dz_mxD) = jax.value_and_grad(tile_loss, argnums=(0, 1))(S, z_mxD, y_m, w_m)
        # The second read of the tile, from cache: a vector-matrix product over the (m D, d) rows.
        dv_j = dz_mxD.reshape(-1) @ X_mxDxd.reshape(-1, d)
        return (loss + l, dS + dS_j, dv + dv_j), None

    init = (jnp.zeros((), v.dtype), jnp.zeros_like(S), jnp.zeros_like(v))
    if k == 1:  # X fits in one tile: no loop, and no copy of the tile out of X
        return one_tile(init, 0)[0]
    return jax.lax.scan(one_tile, init, jnp.arange(k))[0]


def empirical_risk_and_grad(params, X: jax.Array, y: jax.Array, cfg: TheoryConfig, weight=None,
                            num_tiles: int | None = None, mesh=None):
    """(R, dR/dparams) of the risk (E), `model.empirical_risk`, in one pass over X (module docstring).

    X (n, D, d), y (n,), weight (n,) or None as in `empirical_risk`; `num_tiles` (a divisor of the
    samples per device) overrides `tile_count`.
    With `mesh` (`posattn.mesh.data_mesh`, n a multiple of its size), each device takes its own block
    of samples through the tiles (`jax.shard_map`) and the partial sums are added over "data": on a
    CPU with one device per core (docs/decisions.md) this is what runs the pass on every core.
    The gradient is the full one (A's diagonal included), as `jax.grad` gives it.
    """
    w = jnp.ones(X.shape[0], X.dtype) if weight is None else weight.astype(X.dtype)
    S, attention_vjp = jax.vjp(lambda A: attention(A, cfg), params["A"])
    v = params["v"]
    if mesh is None or mesh.devices.size == 1:
        loss, dS, dv = _partial_sums(S, v, X, y, w, cfg, num_tiles)
    else:
        def local(S, v, X, y, w):  # check_vma=False: the tile loop's zero start is not marked varying
            return jax.lax.psum(_partial_sums(S, v, X, y, w, cfg, num_tiles), DATA)

        loss, dS, dv = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(), P(DATA), P(DATA), P(DATA)),
                                     out_specs=P(), check_vma=False)(S, v, X, y, w)
    total = w.sum()
    (dA,) = attention_vjp(dS / total)
    return loss / total, {"A": dA, "v": dv / total}
