"""Sweeps of GD runs in one program (posattn.theory.grid): a vmapped grid of seeds and sample sizes
equals its single runs, splits its seeds over the devices, and keeps a frozen A and the order of the
sizes."""

import dataclasses
import math

import jax
import numpy as np
import pytest

from posattn.papers.jsl22 import construction
from posattn.theory import GDConfig, TheoryConfig, keys, make_task
from posattn.theory import draw as draw_lib
from posattn.theory import grid as grid_lib
from posattn.theory.metrics import within_across_means
from posattn.theory.optim import gradient_descent
from posattn.theory.step import init_state, make_batch, train_chunk

CFG = TheoryConfig(D=16, C=4, d=8, q=0.4)
GD = GDConfig(N=64, steps=5, lr=0.01, lr_A=30.0, a0=math.sqrt(CFG.d), n_test=128)


@pytest.mark.slow
def test_vmapped_grid_matches_a_single_run_on_the_prefix():
    seeds = keys.seed_keys(0, 2)
    sizes = (16, 48)
    entries = grid_lib.fit_grid(seeds, cfg=CFG, gd=GD, sizes=sizes)
    assert entries["test_error"].shape == (2, 2)
    params, train, test, k, task = draw_lib.draw_run(seeds[1], CFG, GD, n_train=max(sizes))
    prefix = make_batch(train.X[:16], train.y[:16])  # the first 16 samples, no padding at all
    gd = gradient_descent()
    state = init_state(params, gd, {"lr": GD.lr, "lr_A": GD.lr_A})
    _, entry = train_chunk(state, GD.steps, prefix, test, k, task, cfg=CFG, gd=GD, optimizer=gd)
    for name in ("loss", "alpha", "A_within", "test_loss"):
        np.testing.assert_allclose(entries[name][0, 1], entry[name], rtol=2e-4, atol=1e-6)
    assert not np.allclose(entries["loss"][0], entries["loss"][1])  # the sizes did differ


@pytest.mark.slow
def test_grid_splits_seeds_over_the_devices_without_changing_a_run():
    seeds = keys.seed_keys(2, jax.device_count())  # 8 host devices (conftest): one seed each
    entries = grid_lib.fit_grid(seeds, cfg=CFG, gd=GD, sizes=(GD.N,))
    assert len(entries["loss"].sharding.device_set) == jax.device_count()
    # One seed is padded to one per device (copies of it, cut off after): the same program, its bits.
    alone = grid_lib.fit_grid(seeds[3:4], cfg=CFG, gd=GD, sizes=(GD.N,))
    assert alone["loss"].shape == (1, 1)
    for name in ("loss", "alpha", "A_within", "test_error"):
        np.testing.assert_array_equal(entries[name][0, 3], alone[name][0, 0], err_msg=name)


@pytest.mark.slow
def test_frozen_a_stays_and_fit_sizes_keeps_the_order_of_sizes():
    task = make_task(jax.random.key(0), CFG)
    A = 0.5 * construction.construction_params(CFG, task)["A"]
    seeds = keys.seed_keys(1, 2)
    gd = dataclasses.replace(GD, n_test=64)
    entries = grid_lib.fit_sizes(seeds, task, A, cfg=CFG, gd=gd, sizes=(32, 8), train_A=False)
    within, across = (float(x) for x in within_across_means(A, task))
    np.testing.assert_allclose(entries["A_within"], within, rtol=1e-6)
    np.testing.assert_allclose(entries["A_across"], across, rtol=1e-6)
    single = grid_lib.fit_grid(seeds, task, A, cfg=CFG, gd=gd, sizes=(8,), train_A=False)
    np.testing.assert_allclose(entries["loss"][1], single["loss"][0], rtol=1e-4, atol=1e-7)
    assert grid_lib.size_groups((16, 32, 64, 128, 1000), spread=4) == [
        (16, 32, 64),
        (128,),
        (1000,),
    ]
