"""A sweep of few seeds on a ("runs", "data") mesh (`fit_seeds(..., split_samples=True)`,
`posattn.theory.seed_mesh`): the shape of the mesh, where the samples lie, what the step communicates,
and the numbers against the one-axis sweep."""

import dataclasses
import re

import jax
import numpy as np
import pytest

from posattn import mesh as mesh_lib
from posattn.errors import ConfigError
from posattn.theory import GDConfig, TheoryConfig, programs, seed_mesh
from posattn.theory.gd import fit_seeds
from posattn.theory.grid import fit_grid
from posattn.theory.host_loop import steps_arg

CFG = TheoryConfig(D=16, C=4, d=16, q=0.4)
GD = GDConfig(N=1000, steps=40, lr=0.01, lr_A=30.0, a0=4.0, eval_every=20, n_test=1000)


def test_the_runs_take_the_fewest_devices_that_hold_them_and_the_samples_the_rest():
    shapes = {runs: mesh_lib.runs_mesh_shape(runs, 8) for runs in (1, 2, 3, 4, 5, 8, 9, 20)}
    assert shapes == {
        1: (1, 8),
        2: (2, 4),
        3: (4, 2),
        4: (4, 2),
        5: (8, 1),
        8: (8, 1),
        9: (8, 1),
        20: (8, 1),
    }
    mesh = mesh_lib.runs_mesh(2)
    assert dict(mesh.shape) == {mesh_lib.RUNS: 2, mesh_lib.DATA: 4}
    # A driver's mesh: none unless asked, nor where the seeds leave no device free (one-axis programs).
    assert seed_mesh.sweep_mesh(2, True, GD) == mesh
    assert seed_mesh.sweep_mesh(2, False, GD) is None and seed_mesh.sweep_mesh(5, True, GD) is None


def test_split_samples_wants_the_samples_of_the_empirical_risk():
    gd = dataclasses.replace(GD, risk="population_mc")
    with pytest.raises(ConfigError, match="split_samples"):
        fit_seeds(jax.random.split(jax.random.key(0), 2), CFG, gd, split_samples=True)


@pytest.mark.slow
def test_two_seeds_on_eight_devices_split_their_samples_four_ways_and_add_only_their_sums():
    """Each device holds a quarter of one seed's samples, and a step's only communication is the sum
    of the partial sums within each seed's 4 devices (and the evaluation's means): no sample moves."""
    mesh = mesh_lib.runs_mesh(2)
    optimizer, hyper = programs.resolve_optimizer(None, GD, None)
    fns = seed_mesh.seed_programs(CFG, GD, optimizer, None, mesh)
    keys = jax.random.split(jax.random.key(0), 2)
    state, *args = fns.draw((keys, programs.per_run(hyper, 2), None, None, None, None))
    for samples in (args[0].X, args[1].X):
        assert {shard.data.shape[:2] for shard in samples.addressable_shards} == {(1, GD.N // 4)}
    grid = seed_mesh.grid_program.lower(
        keys,
        None,
        None,
        programs.per_run(hyper, 2),
        steps_arg(1),
        cfg=CFG,
        gd=programs.compiled_key(GD),
        sizes=(GD.N // 2, GD.N),
        train_A=True,
        optimizer=optimizer,
        mesh=mesh,
    )
    for program in (fns.chunk.lower(state, steps_arg(1), *args), grid):
        text = program.compile().as_text()
        assert not re.findall(r"all-gather|all-to-all|collective-permute|reduce-scatter", text)
        groups = re.findall(r"all-reduce\(.*?replica_groups=\{(\{[\d,]+\}(?:,\{[\d,]+\})*)\}", text)
        assert groups and all(len(g.split(",")) == 4 for gs in groups for g in gs.split("},{"))


@pytest.mark.slow
@pytest.mark.parametrize("runs, implementation", [(2, "auto"), (3, "xla")])
def test_a_split_sweep_is_the_one_axis_sweep_up_to_float32_round_off(runs, implementation):
    """On (2, 4) and (4, 2) meshes, with the CPU kernel and with XLA's tile loop: each seed's sums over
    its samples are taken in blocks and then over the devices, another order than one device's, so the
    numbers agree to float32 round-off grown over 40 steps, not bitwise: about 3e-7 of each array's
    largest entry when written, and 1e-5 of it leaves room for other CPUs' instructions. A test
    error may differ by one sample whose margin the round-off crosses."""
    gd = dataclasses.replace(GD, implementation=implementation)
    keys = jax.random.split(jax.random.key(5), runs)
    one_axis = fit_seeds(keys, CFG, gd)
    split = fit_seeds(keys, CFG, gd, split_samples=True)
    close = lambda a, b, name: np.testing.assert_allclose(
        a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max(), err_msg=name
    )
    for name in ("loss", "test_loss", "alpha"):
        close(split.history[name], one_axis.history[name], name)
    test_errors = split.history["test_error"] - one_axis.history["test_error"]
    assert np.abs(test_errors).max() <= 1.0 / GD.n_test
    for name in ("A", "v"):
        close(split.params[name], one_axis.params[name], name)
    np.testing.assert_array_equal(split.init_params["v"], one_axis.init_params["v"])
    # A split run continues from its result: 20 steps and 20 more are the 40 steps, bitwise.
    half = dataclasses.replace(gd, steps=20)
    first = fit_seeds(keys, CFG, half, split_samples=True)
    more = fit_seeds(keys, CFG, half, split_samples=True, init=first)
    for name, values in more.history.items():
        np.testing.assert_array_equal(values, split.history[name], err_msg=name)
    np.testing.assert_array_equal(more.params["v"], split.params["v"])


@pytest.mark.slow
def test_a_split_grid_is_the_one_axis_grid_up_to_float32_round_off():
    """`fit_grid` on the (2, 4) mesh: two sizes, the smaller picked by weights split with the samples;
    the same round-off as a split sweep (above)."""
    keys = jax.random.split(jax.random.key(5), 2)
    one_axis = fit_grid(keys, cfg=CFG, gd=GD, sizes=(GD.N // 2, GD.N))
    split = fit_grid(keys, cfg=CFG, gd=GD, sizes=(GD.N // 2, GD.N), split_samples=True)
    for name in ("loss", "test_loss", "alpha", "A_within", "test_error"):
        b = np.asarray(one_axis[name])
        np.testing.assert_allclose(
            split[name], b, rtol=1e-5, atol=1e-5 * np.abs(b).max(), err_msg=name
        )
