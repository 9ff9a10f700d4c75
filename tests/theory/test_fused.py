"""The one-pass risk and gradient of (E), on X (by the CPU kernel and by XLA's tile loop) or on its tiled
layout, against `jax.value_and_grad` of the plain model, and its derivatives through JAX's transforms."""

import dataclasses
import functools
import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn import mesh as mesh_lib
from posattn.errors import ConfigError
from posattn.theory import TheoryConfig, fused, make_task, one_pass_kernel, sample
from posattn.theory.fused import (
    empirical_risk_and_grad,
    tile_count,
    tiled,
    tiled_risk,
    tiled_risk_and_grad,
)
from posattn.theory.model import empirical_risk
from tests import envs

CFG = TheoryConfig(D=16, C=4, d=8, q=0.4)


def _problem(cfg=CFG, n=96, seed=0):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    task = make_task(k1, cfg)
    params = {
        "A": jax.random.normal(k2, (cfg.D, cfg.D)),
        "v": 0.3 * jax.random.normal(k3, (cfg.d,)),
    }
    X, y = sample(jax.random.key(seed + 1), cfg, task, n)
    weight = (jnp.arange(n) < n - 7).astype(jnp.float32)  # padding of weight 0, as in `step.Batch`
    return params, X, y, weight


def _assert_round_off(got, want):
    """Equal up to float32 round-off of the sums, relative to the largest entry."""
    for name in ("A", "v"):
        scale = float(jnp.abs(want[1][name]).max())
        np.testing.assert_allclose(
            got[1][name], want[1][name], rtol=0, atol=2e-5 * scale, err_msg=name
        )
    np.testing.assert_allclose(got[0], want[0], rtol=2e-6)


def _expected_lanes():
    """8 where the CPU has AVX2 and FMA (Linux's /proc/cpuinfo says), else 4; either where it cannot tell."""
    try:
        with open("/proc/cpuinfo") as info:
            flags = next(line for line in info if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return one_pass_kernel.lanes()
    return 8 if {"avx2", "fma"} <= set(flags) else 4


@pytest.fixture(params=["cpu_kernel", "xla"])
def path(request):
    """The implementation of the one-pass sums of samples as they come: the CPU kernel (the default
    here: the test fails if the kernel did not build, and the warning says why) and XLA's tile loop."""
    if request.param == "cpu_kernel":
        assert one_pass_kernel.available() and fused.uses_kernel(jnp.float32)
        assert one_pass_kernel.lanes() == _expected_lanes()
    return request.param


# The kernel's blocks of 32 samples: three full ones, one partial one alone, two full and a partial one.
@pytest.mark.slow
@pytest.mark.parametrize("n, num_tiles", [(96, 1), (96, 4), (96, 96), (1, 1), (77, 1)])
def test_matches_autodiff_of_the_plain_model(n, num_tiles, path):
    params, X, y, weight = _problem(n=n)
    weight = weight if n > 7 else jnp.ones(n)
    want = jax.value_and_grad(empirical_risk)(params, X, y, CFG, weight)
    got = jax.jit(
        lambda p: empirical_risk_and_grad(
            p, X, y, CFG, weight, num_tiles=num_tiles, implementation=path
        )
    )(params)
    _assert_round_off(got, want)
    assert float(jnp.abs(got[1]["A"]).max()) > 0 and float(jnp.abs(got[1]["v"]).max()) > 0


# D = 9 and 21: the kernel's odd last row of the mix and its padding of D x D to whole register tiles;
# d = 7 and 3: rows of patches shorter than, and not a multiple of, its vector lanes; n = 77: a partial
# last block of samples.
@pytest.mark.parametrize(
    "change",
    [
        dict(activation="quintic"),
        dict(temperature=False),
        dict(scale_by_D=False),
        dict(D=9, C=3, partition="random"),
        dict(D=21, C=3, partition="random"),
        dict(D=9, C=3, d=7, partition="random"),
        dict(D=21, C=3, d=3, partition="random"),
    ],
)
@pytest.mark.slow
def test_matches_autodiff_under_the_model_options(change, path):
    cfg = dataclasses.replace(CFG, **change)
    params, X, y, _ = _problem(cfg, n=77)
    params = {**params, "v": params["v"] / 3}  # keep the quintic's margins moderate
    want = jax.value_and_grad(empirical_risk)(params, X, y, cfg)
    _assert_round_off(
        empirical_risk_and_grad(params, X, y, cfg, num_tiles=7, implementation=path), want
    )


@pytest.mark.slow
def test_the_kernels_baseline_instance_gives_the_same():
    """The kernel's instance for CPUs without AVX2 (4 lanes: SSE2, as NEON on ARM), forced by
    POSATTN_CPU_KERNEL=baseline in a process of its own, against jax.grad."""
    script = """
import dataclasses, jax
from posattn.theory import fused
from tests.theory import test_fused as t
assert fused.uses_kernel(jax.numpy.float32) and fused.one_pass_kernel.lanes() == 4
for cfg in [t.CFG, dataclasses.replace(t.CFG, D=9, C=3, d=5, partition="random", activation="quintic")]:
    params, X, y, weight = t._problem(cfg, n=77)
    params = {**params, "v": params["v"] / 3}
    want = jax.value_and_grad(t.empirical_risk)(params, X, y, cfg, weight)
    t._assert_round_off(fused.empirical_risk_and_grad(params, X, y, cfg, weight), want)
print("same")
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=envs.devices(1, POSATTN_CPU_KERNEL="baseline"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.strip() == "same", out.stderr[-2000:]


def test_sample_axis_sharded_over_devices_gives_the_same(path):
    """Each device's block through the tiles (`mesh`), the partial sums added over "data"."""
    mesh = mesh_lib.data_mesh()
    params, X, y, weight = _problem(n=16 * mesh.devices.size)
    want = jax.value_and_grad(empirical_risk)(params, X, y, CFG, weight)
    X, y, weight = jax.device_put((X, y, weight), mesh_lib.batch_sharding(mesh))
    got = jax.jit(
        lambda p, X, y, w: empirical_risk_and_grad(
            p, X, y, CFG, w, num_tiles=4, mesh=mesh, implementation=path
        )
    )(params, X, y, weight)
    _assert_round_off(got, want)


def test_vmapped_over_runs_and_sizes_as_a_sweep_gives_each_runs(path):
    """`fit_grid`'s two vmaps: runs (their own X and params) inside sizes (their own weights, X shared);
    the kernel takes the unbatched axes as 1 without copying X."""
    (p0, X0, y, w0), (p1, X1, _, _) = _problem(n=40), _problem(n=40, seed=5)
    params, X = jax.tree.map(lambda a, b: jnp.stack([a, b]), (p0, X0), (p1, X1))
    weights = jnp.stack([w0, (jnp.arange(40) < 20).astype(jnp.float32)])
    one = lambda p, X, w: empirical_risk_and_grad(p, X, y, CFG, w, implementation=path)
    got = jax.jit(jax.vmap(jax.vmap(one, (0, 0, None)), (None, None, 0)))(params, X, weights)
    for size in range(2):
        for run, (p, X_r) in enumerate([(p0, X0), (p1, X1)]):
            want = jax.value_and_grad(empirical_risk)(p, X_r, y, CFG, weights[size])
            _assert_round_off(jax.tree.map(lambda a: a[size, run], got), want)


def test_the_one_pass_risk_is_an_ordinary_jax_function(path):
    """jax.grad (one pass: the forward's gradient), jax.jvp, jax.vmap and jax.jit through
    `fused.empirical_risk`, in the parameters and in the samples, and second derivatives (through the
    XLA tile loop's rule for the kernel), against the plain model."""
    params, X, y, weight = _problem(n=77)

    @functools.partial(jax.jit, static_argnums=0)
    def derivatives(fns, params, X):  # (risk, its gradient) -> every transform, in one program
        risk, grad_of = fns
        at_v = lambda v: risk({**params, "v": v}, X)
        tangent = jax.tree.map(jnp.cos, params)
        return {
            "value_and_grad": jax.value_and_grad(risk)(params, X),
            "jvp": jax.jvp(lambda p: risk(p, X), (params,), (tangent,))[1],
            "dX": jax.grad(risk, argnums=1)(params, X),
            "vmap": jax.vmap(at_v)(jnp.stack([params["v"], -0.5 * params["v"]])),
            "hessian": jax.hessian(at_v)(params["v"]),
            "d_step": jax.grad(lambda p: grad_of(p, X)["v"].sum())(params),
        }  # a GD step's derivative

    one_pass = functools.partial(
        fused.empirical_risk, y=y, cfg=CFG, weight=weight, implementation=path
    )
    one_pass_grad = lambda p, X: fused.empirical_risk_and_grad(
        p, X, y, CFG, weight, implementation=path
    )[1]
    plain = lambda p, X: empirical_risk(p, X, y, CFG, weight)
    got = derivatives((one_pass, one_pass_grad), params, X)
    want = derivatives((plain, jax.grad(plain)), params, X)
    _assert_round_off(got["value_and_grad"], want["value_and_grad"])
    _assert_round_off((0.0, got["d_step"]), (0.0, want["d_step"]))
    np.testing.assert_allclose(got["jvp"], want["jvp"], rtol=1e-4)
    np.testing.assert_allclose(got["dX"], want["dX"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got["vmap"], want["vmap"], rtol=1e-5)
    scale = float(jnp.abs(want["hessian"]).max())
    np.testing.assert_allclose(got["hessian"], want["hessian"], rtol=0, atol=2e-5 * scale)


def test_an_implementation_that_cannot_run_is_refused():
    with pytest.raises(ConfigError, match="implementation='cpu_kernel' needs float32 samples"):
        fused.uses_kernel(jnp.float16, "cpu_kernel")
    with pytest.raises(ConfigError, match="did you mean 'xla'"):
        fused.uses_kernel(jnp.float32, "xl")
    assert not fused.uses_kernel(jnp.float32, "xla")


@pytest.mark.parametrize("tile_bytes", [512, 2048, 1 << 20])  # 1, 4 and 96 samples a tile
def test_the_tiled_layout_gives_the_same(tile_bytes):
    params, X, y, weight = _problem()
    want = jax.value_and_grad(empirical_risk)(params, X, y, CFG, weight)
    tiles = tiled(X, y, weight, tile_bytes=tile_bytes)
    k, m = tiles.X.shape[0], X.shape[0] // tiles.X.shape[0]
    np.testing.assert_array_equal(
        tiles.X[k - 1, :, (m - 1) * CFG.D + 3], X[-1, 3]
    )  # last sample, patch 3
    np.testing.assert_array_equal(tiles.X.transpose(0, 2, 1).reshape(X.shape), X)
    _assert_round_off(jax.jit(lambda p: tiled_risk_and_grad(p, tiles, CFG))(params), want)
    np.testing.assert_allclose(tiled_risk(params, tiles, CFG), want[0], rtol=2e-6)


def test_the_tiled_layout_sharded_over_devices_gives_the_same():
    """One block of tiles per device (`tiled`'s num_shards), the partial sums added over "data"."""
    mesh = mesh_lib.data_mesh()
    params, X, y, weight = _problem(n=16 * mesh.devices.size)
    want = jax.value_and_grad(empirical_risk)(params, X, y, CFG, weight)
    tiles = jax.device_put(
        tiled(X, y, weight, mesh.devices.size, tile_bytes=2048), mesh_lib.batch_sharding(mesh)
    )
    got = jax.jit(lambda p, t: tiled_risk_and_grad(p, t, CFG, mesh=mesh))(params, tiles)
    _assert_round_off(got, want)


def test_tile_count():
    assert tile_count(50_000, 4_000, tile_bytes=4_000_000) == 50
    assert (
        tile_count(20_000, 9_216, tile_bytes=1 << 20) == 160
    )  # 125 samples a tile (113.8 fit 1 MiB)
    assert tile_count(96, 512, tile_bytes=2048) == 24
    assert tile_count(20_011, 4_000) == 1  # a prime count: one tile, the plain two reads
    assert tile_count(50_000, 4_000) == 100  # the CPU's 2 MiB tiles where none are given


def test_an_accelerator_takes_one_tile_per_device(monkeypatch):
    # A GPU runs the scan's tiles one after another, each too small to fill it (docs/accelerator.md):
    # off the CPU the default is one tile, the whole block of samples of a device.
    assert tile_count(1_000_000, 4_000, tile_bytes=math.inf) == 1
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert fused.default_tile_bytes() == math.inf
    assert tile_count(50_000, 4_000) == 1
    X = jnp.ones((64, 4, 8))
    assert tiled(X, jnp.ones(64), jnp.ones(64), num_shards=2).X.shape == (2, 8, 128)


def test_tiles_that_do_not_divide_the_samples_are_refused():
    params, X, y, _ = _problem(n=77)
    with pytest.raises(ConfigError, match="num_tiles=6 does not divide the 77 samples per device"):
        fused.empirical_risk_and_grad(params, X, y, CFG, num_tiles=6)
