"""The one-pass risk and gradient of (E), on X or on its tiled layout, against `jax.value_and_grad` of the
plain model."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn import mesh as mesh_lib
from posattn.theory import TheoryConfig, make_task, sample
from posattn.theory.fused import (empirical_risk_and_grad, tile_count, tiled, tiled_risk,
                                  tiled_risk_and_grad)
from posattn.theory.model import empirical_risk

CFG = TheoryConfig(D=16, C=4, d=8, q=0.4)


def _problem(cfg=CFG, n=96, seed=0):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    task = make_task(k1, cfg)
    params = {"A": jax.random.normal(k2, (cfg.D, cfg.D)), "v": 0.3 * jax.random.normal(k3, (cfg.d,))}
    X, y = sample(jax.random.key(seed + 1), cfg, task, n)
    weight = (jnp.arange(n) < n - 7).astype(jnp.float32)  # padding of weight 0, as in `step.Batch`
    return params, X, y, weight


def _assert_round_off(got, want):
    """Equal up to float32 round-off of the sums, relative to the largest entry."""
    for name in ("A", "v"):
        scale = float(jnp.abs(want[1][name]).max())
        np.testing.assert_allclose(got[1][name], want[1][name], rtol=0, atol=2e-5 * scale, err_msg=name)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-6)


@pytest.mark.parametrize("num_tiles", [1, 4, 96])
def test_matches_autodiff_of_the_plain_model(num_tiles):
    params, X, y, weight = _problem()
    want = jax.value_and_grad(empirical_risk)(params, X, y, CFG, weight)
    got = jax.jit(lambda p: empirical_risk_and_grad(p, X, y, CFG, weight, num_tiles=num_tiles))(params)
    _assert_round_off(got, want)
    assert float(jnp.abs(got[1]["A"]).max()) > 0 and float(jnp.abs(got[1]["v"]).max()) > 0


@pytest.mark.parametrize("change", [dict(activation="quintic"), dict(temperature=False),
                                    dict(scale_by_D=False)])
def test_matches_autodiff_under_the_model_options(change):
    cfg = dataclasses.replace(CFG, **change)
    params, X, y, _ = _problem(cfg)
    params = {**params, "v": params["v"] / 3}  # keep the quintic's margins moderate
    want = jax.value_and_grad(empirical_risk)(params, X, y, cfg)
    _assert_round_off(empirical_risk_and_grad(params, X, y, cfg, num_tiles=6), want)


def test_sample_axis_sharded_over_devices_gives_the_same():
    """Each device's block through the tiles (`mesh`), the partial sums added over "data"."""
    mesh = mesh_lib.data_mesh()
    params, X, y, weight = _problem(n=16 * mesh.devices.size)
    want = jax.value_and_grad(empirical_risk)(params, X, y, CFG, weight)
    X, y, weight = jax.device_put((X, y, weight), mesh_lib.batch_sharding(mesh))
    got = jax.jit(lambda p, X, y, w: empirical_risk_and_grad(p, X, y, CFG, w, num_tiles=4, mesh=mesh))(
        params, X, y, weight)
    _assert_round_off(got, want)


@pytest.mark.parametrize("tile_bytes", [512, 2048, 1 << 20])  # 1, 4 and 96 samples a tile
def test_the_tiled_layout_gives_the_same(tile_bytes):
    params, X, y, weight = _problem()
    want = jax.value_and_grad(empirical_risk)(params, X, y, CFG, weight)
    tiles = tiled(X, y, weight, tile_bytes=tile_bytes)
    k, m = tiles.X.shape[0], X.shape[0] // tiles.X.shape[0]
    np.testing.assert_array_equal(tiles.X[k - 1, :, (m - 1) * CFG.D + 3], X[-1, 3])  # last sample, patch 3
    np.testing.assert_array_equal(tiles.X.transpose(0, 2, 1).reshape(X.shape), X)
    _assert_round_off(jax.jit(lambda p: tiled_risk_and_grad(p, tiles, CFG))(params), want)
    np.testing.assert_allclose(tiled_risk(params, tiles, CFG), want[0], rtol=2e-6)


def test_the_tiled_layout_sharded_over_devices_gives_the_same():
    """One block of tiles per device (`tiled`'s num_shards), the partial sums added over "data"."""
    mesh = mesh_lib.data_mesh()
    params, X, y, weight = _problem(n=16 * mesh.devices.size)
    want = jax.value_and_grad(empirical_risk)(params, X, y, CFG, weight)
    tiles = jax.device_put(tiled(X, y, weight, mesh.devices.size, tile_bytes=2048),
                           mesh_lib.batch_sharding(mesh))
    got = jax.jit(lambda p, t: tiled_risk_and_grad(p, t, CFG, mesh=mesh))(params, tiles)
    _assert_round_off(got, want)


def test_tile_count():
    assert tile_count(50_000, 4_000, tile_bytes=4_000_000) == 50
    assert tile_count(20_000, 9_216, tile_bytes=1 << 20) == 160  # 125 samples a tile (113.8 fit 1 MiB)
    assert tile_count(96, 512, tile_bytes=2048) == 24
    assert tile_count(20_011, 4_000) == 1  # a prime count: one tile, the plain two reads
