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

On an accelerator the whole block of samples of a device is one tile (`default_tile_bytes`): a GPU
fills itself only with whole-X products, not with a loop of cache-sized ones.

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
(`posattn.theory.one_pass_kernel`, where it is built) that overlaps the read of X with the arithmetic,
which no XLA tile loop does, and the run drivers then keep X as drawn. The tile loop stays the path on
accelerators and the reference. Which one runs is the `implementation` argument (`IMPLEMENTATIONS`;
`GDConfig.implementation` for the run drivers): "auto" (the default) takes the kernel for float32
samples on a CPU backend where it is built, "xla" the tile loop, "cpu_kernel" the kernel or an error.

Both are ordinary JAX functions: `jax.jit`, `jax.vmap`, `jax.grad`, `jax.jvp` and `jax.hessian` go
through `empirical_risk` and `empirical_risk_and_grad` on any implementation. `empirical_risk` is a
`jax.custom_jvp` whose derivative in the parameters is the gradient its forward pass already computes
(so `jax.grad` of it costs one pass over X, as `empirical_risk_and_grad` does); a derivative in the
samples (X, y, weight) is the plain model's. The kernel's sums carry their own rule: their derivative
is that of the XLA tile loop's (the same function), so second derivatives (e.g. `jax.grad` through a
GD step, `posattn.theory.step.train_chunk`) run through the tile loop.
"""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.sharding import PartitionSpec as P

from posattn.errors import ConfigError, check_choice
from posattn.mesh import DATA
from posattn.theory import model, one_pass_kernel
from posattn.theory.config import IMPLEMENTATIONS, TheoryConfig
from posattn.theory.model import attention, logistic_loss, mix, sigma

# X's bytes per tile: a tile is read from memory once and then again from cache, so it must fit in
# the cache the two reads share (a CPU core's L2 is 0.5-2 MiB, the shared L3 tens of MiB). On the
# 2-core CPU of docs/benchmarks.md the plain layout's step hardly moves from 0.25 to 4 MiB; the tiled
# layout's is 3-8% faster at 1.5-3 MiB than at 1 MiB (fewer tiles, so less per-tile loss work), and
# 30-100% slower from 8 MiB, once two cores' tiles crowd the L3.
TILE_BYTES = 2 << 20


def default_tile_bytes() -> float:
    """X's bytes per tile where none are given: `TILE_BYTES` on a CPU; on an accelerator, one tile per
    device (infinite). A GPU runs the tile loop's `lax.scan` one small tile after another, none filling
    the chip: on an H200 at N = 1,000,000 (D = 10, d = 100) the 2 MiB tiles took 29.0 ms a step against
    1.0 ms for one GEMV over X and 4.2 ms for `jax.grad` of the plain model (docs/accelerator.md). One
    tile is two whole-X products, the shape of that `jax.grad` step, with the loss read once: on an H100
    5.8 ms a step against 5.7 for `jax.grad` and 1.4 for the GEMV."""
    return TILE_BYTES if jax.default_backend() == "cpu" else math.inf


def tile_count(n: int, row_bytes: int, tile_bytes: float | None = None) -> int:
    """k, the number of tiles: the divisor of n that gives tiles nearest `tile_bytes` (in log scale;
    None: `default_tile_bytes()`; infinite: one tile)."""
    tile_bytes = default_tile_bytes() if tile_bytes is None else tile_bytes
    if math.isinf(tile_bytes):
        return 1
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


def tiled(X, y, weight, num_shards: int = 1, tile_bytes: float | None = None) -> Tiles:
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
        X_j, y_m, w_m = (
            a[0] if k == 1 else jax.lax.dynamic_index_in_dim(a, j, keepdims=False)
            for a in (tiles, y_kxm, w_kxm)
        )
        l, (dS_j, dz_mxD) = jax.value_and_grad(_summed_loss, argnums=(0, 1))(
            S, z_of(X_j), y_m, w_m, cfg
        )
        return (loss + l, dS + dS_j, dv + grad_v(dz_mxD, X_j)), None

    init = (jnp.zeros((), v.dtype), jnp.zeros_like(S), jnp.zeros_like(v))
    if k == 1:  # X fits in one tile: no loop, and no copy of the tile out of X
        return one_tile(init, 0)[0]
    return jax.lax.scan(one_tile, init, jnp.arange(k))[0]


def uses_kernel(dtype, implementation: str | None = "auto") -> bool:
    """Whether the one-pass sums of samples X (n, D, d) of `dtype` run in the CPU kernel
    (`posattn.theory.one_pass_kernel`): with "auto", float32 on a CPU backend where the kernel is built;
    "cpu_kernel" asks for it (a ConfigError where it cannot run); "xla" never."""
    implementation = check_choice(implementation or "auto", IMPLEMENTATIONS, "implementation")
    if implementation == "xla":
        return False
    runs = dtype == jnp.float32 and jax.default_backend() == "cpu" and one_pass_kernel.available()
    if implementation == "cpu_kernel" and not runs:
        raise ConfigError(
            f"implementation='cpu_kernel' needs float32 samples on a CPU backend where the "
            f"kernel builds (here: {jnp.dtype(dtype).name} samples, backend "
            f"{jax.default_backend()!r}); use implementation='xla' or 'auto'"
        )
    return runs


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def _kernel_sums(S, v, X, y, w, cfg: TheoryConfig):
    """`_partial_sums` by the CPU kernel, which takes the mix's factor D inside its matrix M."""
    scale = cfg.D if cfg.scale_by_D else 1
    loss, dM, dv = one_pass_kernel.partial_sums(scale * S, v, X, y, w, cfg.activation == "quintic")
    return loss, scale * dM, dv


@_kernel_sums.defjvp
def _kernel_sums_jvp(cfg: TheoryConfig, primals, tangents):
    """The kernel's sums at `primals`; their derivative is the XLA tile loop's (the same function, which
    JAX can differentiate): only derivatives of the gradient (second order) take this path."""
    _, derivative = jax.jvp(
        lambda *a: _partial_sums(*a, cfg=cfg, num_tiles=None, transposed=False), primals, tangents
    )
    return _kernel_sums(*primals, cfg), derivative


def _risk_and_grad(
    params,
    X,
    y,
    w,
    cfg: TheoryConfig,
    num_tiles,
    mesh,
    transposed: bool,
    implementation: str | None = "auto",
    axis_name: str | None = None,
):
    S, attention_vjp = jax.vjp(lambda A: attention(A, cfg), params["A"])
    v = params["v"]
    if not transposed and uses_kernel(X.dtype, implementation):
        sums = functools.partial(_kernel_sums, cfg=cfg)
    else:
        sums = functools.partial(_partial_sums, cfg=cfg, num_tiles=num_tiles, transposed=transposed)
    if mesh is None or mesh.devices.size == 1:
        loss, dS, dv = sums(S, v, X, y, w)
    else:

        def local(
            S, v, X, y, w
        ):  # check_vma=False: the tile loop's zero start is not marked varying
            return jax.lax.psum(sums(S, v, X, y, w), DATA)

        loss, dS, dv = jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P(), P(), P(DATA), P(DATA), P(DATA)),
            out_specs=P(),
            check_vma=False,
        )(S, v, X, y, w)
    total = w.sum()
    if axis_name is not None:  # inside a shard_map whose devices hold the samples in blocks
        loss, dS, dv, total = jax.lax.psum((loss, dS, dv, total), axis_name)
    (dA,) = attention_vjp(dS / total)
    return loss / total, {"A": dA, "v": dv / total}


def _weights(X, weight):
    return jnp.ones(X.shape[0], X.dtype) if weight is None else weight.astype(X.dtype)


def _check_tiles(X, num_tiles, mesh):
    per_device = X.shape[0] // (1 if mesh is None else mesh.devices.size)
    if num_tiles is not None and (num_tiles < 1 or per_device % num_tiles):
        raise ConfigError(
            f"num_tiles={num_tiles} does not divide the {per_device} samples per device into "
            "whole tiles"
        )


def empirical_risk_and_grad(
    params,
    X: jax.Array,
    y: jax.Array,
    cfg: TheoryConfig,
    weight=None,
    num_tiles: int | None = None,
    mesh=None,
    implementation: str | None = "auto",
    axis_name: str | None = None,
):
    """(R, dR/dparams) of the risk (E), `model.empirical_risk`, in one pass over X (module docstring).

    X (n, D, d), y (n,), weight (n,) or None as in `empirical_risk`; `num_tiles` (a divisor of the
    samples per device) overrides `tile_count` in XLA's tile loop (the CPU kernel takes blocks of its own).
    With `mesh` (`posattn.mesh.data_mesh`, n a multiple of its size), each device takes its own block
    of samples through the tiles (`jax.shard_map`) and the partial sums are added over "data": on a
    CPU with one device per core (docs/decisions.md) this is what runs the pass on every core.
    `implementation`: "auto", "xla" or "cpu_kernel" (module docstring). The gradient is the full one
    (A's diagonal included), as `jax.grad` gives it; the pair is `jax.value_and_grad(empirical_risk)`.
    Called inside a `jax.shard_map` whose devices each hold a block of the samples, `axis_name` (the
    mesh axis of the blocks, no `mesh` then) adds the partial sums over it.
    """
    _check_tiles(X, num_tiles, mesh)
    return _risk_and_grad(
        params, X, y, _weights(X, weight), cfg, num_tiles, mesh, False, implementation, axis_name
    )


def empirical_risk(
    params,
    X: jax.Array,
    y: jax.Array,
    cfg: TheoryConfig,
    weight=None,
    num_tiles: int | None = None,
    mesh=None,
    implementation: str | None = "auto",
) -> jax.Array:
    """The risk (E), `model.empirical_risk`, by the one-pass step: arguments as `empirical_risk_and_grad`.

    Its derivative in `params` is the gradient the pass computes (`jax.grad` of it is one pass over X);
    in X, y or weight, the plain model's (module docstring).
    """
    _check_tiles(X, num_tiles, mesh)
    return _one_pass_risk(params, X, y, _weights(X, weight), cfg, num_tiles, mesh, implementation)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5, 6, 7))
def _one_pass_risk(params, X, y, w, cfg, num_tiles, mesh, implementation):
    return _risk_and_grad(params, X, y, w, cfg, num_tiles, mesh, False, implementation)[0]


def _one_pass_risk_jvp(cfg, num_tiles, mesh, implementation, primals, tangents):
    """dR = <dR/dparams, dparams> with the gradient of the forward pass, plus the plain model's
    derivative along the samples' tangents where they have any (`symbolic_zeros`: none is computed
    for a sample argument that is not differentiated)."""
    params, X, y, w = primals
    d_params, *d_data = tangents
    risk, grads = _risk_and_grad(params, X, y, w, cfg, num_tiles, mesh, False, implementation)
    is_zero = lambda t: isinstance(t, SymbolicZero)
    d_risk = sum(jnp.vdot(grads[k], t) for k, t in d_params.items() if not is_zero(t))
    if not all(map(is_zero, d_data)):
        d_data = [jnp.zeros_like(a) if is_zero(t) else t for a, t in zip((X, y, w), d_data)]
        d_risk = (
            d_risk
            + jax.jvp(
                lambda X, y, w: model.empirical_risk(params, X, y, cfg, w), (X, y, w), tuple(d_data)
            )[1]
        )
    return risk, jnp.zeros_like(risk) + d_risk


_one_pass_risk.defjvp(_one_pass_risk_jvp, symbolic_zeros=True)


def tiled_risk_and_grad(params, tiles: Tiles, cfg: TheoryConfig, mesh=None, axis_name=None):
    """`empirical_risk_and_grad` on samples laid out by `tiled` (with `mesh`, `tiled`'s num_shards its
    size; `axis_name` as there): the same loss and gradient, faster a step."""
    return _risk_and_grad(
        params,
        tiles.X,
        tiles.y,
        tiles.weight.astype(tiles.X.dtype),
        cfg,
        None,
        mesh,
        transposed=True,
        implementation="xla",
        axis_name=axis_name,
    )


def tiled_risk(params, tiles: Tiles, cfg: TheoryConfig) -> jax.Array:
    """The risk (E), `model.empirical_risk`, of samples laid out by `tiled`: one pass over the tiles."""
    # A multiply-and-sum over each tile's rows: as a dot (einsum), XLA copies all of X into one matrix first.
    z_nxD = (tiles.X * params["v"][:, None]).sum(1).reshape(-1, cfg.D)
    w = tiles.weight.astype(tiles.X.dtype)
    return _summed_loss(attention(params["A"], cfg), z_nxD, tiles.y, w, cfg) / w.sum()
