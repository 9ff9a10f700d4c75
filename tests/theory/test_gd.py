"""The run drivers: frozen diagonal, optax optimisers, numbers that are not compiled in, continuing a run,
the caller's data, sharding over devices, symmetry at a0 = 0, and learning."""

import dataclasses
import logging
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from posattn import compile_options
from posattn.errors import ConfigError
from posattn.metrics import classification_error
from posattn.theory import (
    GDConfig,
    TheoryConfig,
    fit,
    make_task,
    optim,
    programs,
    same_set_mask,
    sample,
)
from posattn.theory import draw as draw_lib
from posattn.theory import grid as grid_lib
from posattn.theory.gd import fit_seeds
from posattn.theory.grid import fit_grid
from posattn.theory.keys import run_keys
from posattn.theory.model import empirical_risk, forward, init_params
from posattn.theory.programs import make_chunk_fn
from posattn.theory.step import descend, freeze_diagonal, init_state, make_batch, train_chunk

CFG = TheoryConfig(D=16, C=4, d=16, q=0.4)
GD = GDConfig(N=1000, steps=40, lr=0.01, lr_A=30.0, a0=4.0, eval_every=20, n_test=1000)


# `fit(key(0), CFG, GD)` recorded before the optimiser was optax (hand-written GD, commit 08d9d26) on this
# suite's 8 devices: the default optimiser must give the same numbers up to float32 round-off.
GOLDEN_LOSS = [0.6768479347229004, 0.13364210724830627, 0.12529811263084412]
GOLDEN_ALPHA = [0.012659280560910702, 0.19833706319332123, 0.20369163155555725]
GOLDEN_V = [
    -0.0950562134385109,
    -0.06885501742362976,
    -0.03730148449540138,
    0.050100263208150864,
    -0.05787806957960129,
    0.00979805737733841,
    0.055127572268247604,
    -0.025235287845134735,
    -0.09889387339353561,
    0.027400095015764236,
    -0.10653199255466461,
    -0.03751989081501961,
    0.02234255149960518,
    -0.020768383517861366,
    0.025186413899064064,
    0.006078410428017378,
]


@pytest.mark.slow
def test_diagonal_never_moves_and_history_is_complete_and_golden():
    result = fit(jax.random.key(0), CFG, GD)
    # The default optimiser (optax) gives the numbers of the hand-written GD it replaced.
    np.testing.assert_allclose(result.history["loss"], GOLDEN_LOSS, rtol=2e-6)
    np.testing.assert_allclose(result.history["alpha"], GOLDEN_ALPHA, rtol=2e-6)
    np.testing.assert_allclose(result.params["v"], GOLDEN_V, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(np.diag(result.params["A"]), np.diag(result.init_params["A"]))
    off = ~np.eye(16, dtype=bool)
    assert np.abs(result.params["A"] - result.init_params["A"])[off].max() > 1e-3  # A did move
    h = result.history
    np.testing.assert_array_equal(h["step"], [0, 20, 40])
    for name in (
        "loss",
        "test_error",
        "alpha",
        "cos_v_wstar",
        "v_perp_norm",
        "A_within",
        "A_across",
        "patch_association_share",
    ):
        assert h[name].shape == (3,) and np.isfinite(h[name]).all(), name


@pytest.mark.slow
def test_a_loop_of_fits_builds_its_compiled_chunk_once():
    gd = GDConfig(N=64, steps=4, eval_every=2, n_test=64)
    misses = make_chunk_fn.cache_info().misses
    a, b = (fit(jax.random.key(seed), CFG, gd) for seed in (1, 2))
    assert make_chunk_fn.cache_info().misses == misses + 1
    assert not np.allclose(a.params["v"], b.params["v"])  # two runs, not one result reused


def test_the_chunk_compiled_ahead_from_shapes_serves_the_run(caplog):
    """`fit` compiles its chunk from the draw's shapes while the draw runs: the calls on the drawn
    arrays must find that program, not compile their own. The draw comes out placed, so no program
    cuts it into shards, and the copies kept for a replay compile nothing."""
    gd = GDConfig(N=96, steps=4, eval_every=2, n_test=64)  # a problem no other test compiles
    logged = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)  # process-wide: `jax.log_compiles()` misses threads
    try:
        with caplog.at_level(logging.WARNING):
            fit(jax.random.key(3), CFG, gd)
    finally:
        jax.config.update("jax_log_compiles", logged)
    compiled = [
        r.getMessage().split(" in ")[0]
        for r in caplog.records
        if "Finished XLA compilation of" in r.getMessage()
    ]
    assert compiled.count("Finished XLA compilation of jit(chunk)") == 1
    assert not [c for c in compiled if "_multi_slice" in c or "copy" in c], compiled


def test_the_default_optimiser_is_plain_gradient_descent_with_the_diagonal_frozen():
    params = {"A": jnp.ones((3, 3)), "v": jnp.ones(2)}
    grads = {"A": jnp.full((3, 3), 2.0), "v": jnp.array([1.0, -1.0])}
    gd = optim.gradient_descent()
    new = descend(init_state(params, gd, {"lr": 0.1, "lr_A": 0.5}), grads, gd)
    np.testing.assert_allclose(new["params"]["A"], np.where(np.eye(3), 1.0, 0.0))
    np.testing.assert_allclose(new["params"]["v"], [0.9, 1.1])
    assert int(new["step"]) == 1
    # No optimiser moves the diagonal, not even one that moves coordinates without a gradient.
    decay = optax.adamw(0.1, weight_decay=0.5)
    state = descend(init_state(params, decay), grads, decay)
    np.testing.assert_array_equal(np.diag(state["params"]["A"]), 1.0)
    frozen_A = descend(init_state(params, decay), grads, decay, train_A=False)
    np.testing.assert_array_equal(frozen_A["params"]["A"], params["A"])


def _compiles(caplog, run) -> list[str]:
    """The names of the programs XLA compiled while `run()` ran (every thread)."""
    logged = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)  # process-wide: `jax.log_compiles()` misses threads
    try:
        with caplog.at_level(logging.WARNING):
            caplog.clear()
            run()
    finally:
        jax.config.update("jax_log_compiles", logged)
    return [
        r.getMessage().split(" in ")[0].removeprefix("Finished XLA compilation of ")
        for r in caplog.records
        if "Finished XLA compilation of" in r.getMessage()
    ]


SWEEP_GD = GDConfig(
    N=72, steps=6, eval_every=3, n_test=64, a0=4.0
)  # a problem no other test compiles
LRS = (0.003, 0.01, 0.03, 0.1)


@pytest.mark.slow
def test_a_sweep_over_learning_rates_compiles_once_and_vmaps_in_one_call(caplog):
    key = jax.random.key(4)
    runs = {}
    compiled = _compiles(
        caplog,
        lambda: runs.update(
            {
                lr: fit(key, CFG, dataclasses.replace(SWEEP_GD, lr=lr, steps=4 + i))
                for i, lr in enumerate(LRS)
            }
        ),
    )
    assert compiled.count("jit(chunk)") == 1, compiled  # step sizes and step counts are arguments
    assert len(compiled) == len(set(compiled)), compiled  # nor is any other program compiled twice
    finals = [runs[lr].history["loss"][-1] for lr in LRS]
    assert len(set(finals)) == 4 and [int(runs[lr].history["step"][-1]) for lr in LRS] == [
        4,
        5,
        6,
        7,
    ]
    # The same four step sizes vmapped in one call: each run is the one `fit` made.
    many = fit_seeds(
        jnp.stack([key] * 4),
        CFG,
        dataclasses.replace(SWEEP_GD, steps=4),
        hyperparams={"lr": jnp.array(LRS)},
    )
    for i, lr in enumerate(LRS):
        np.testing.assert_allclose(
            many.history["loss"][:2, i], runs[lr].history["loss"][:2], rtol=1e-4
        )
    np.testing.assert_allclose(many.params["v"][0], runs[LRS[0]].params["v"], rtol=1e-4, atol=1e-6)
    # Continued for 2 more steps, each run at its own step size still: at step 6, the 6-step run's.
    more = fit_seeds(jnp.stack([key] * 4), CFG, dataclasses.replace(SWEEP_GD, steps=2), init=many)
    np.testing.assert_array_equal(more.history["step"], [0, 3, 4, 6])
    np.testing.assert_allclose(
        more.history["loss"][-1, 2], runs[LRS[2]].history["loss"][-1], rtol=1e-4
    )


@pytest.mark.slow
def test_adam_is_one_argument_and_a_run_continues_from_its_result():
    adam = optax.adam(0.01)
    gd = dataclasses.replace(SWEEP_GD, steps=4, eval_every=2)
    key = jax.random.key(6)
    whole = fit(key, CFG, dataclasses.replace(gd, steps=8), optimizer=adam)
    # Adam, written out: the same steps on the same draws, A's diagonal frozen.
    params, train, _, _, _ = draw_lib.draw_run(key, CFG, gd)

    def adam_step(carry, _):
        params, opt_state = carry
        grads = freeze_diagonal(
            jax.grad(empirical_risk)(params, train.X, train.y, CFG, train.weight)
        )
        updates, opt_state = adam.update(grads, opt_state, params)
        return (optax.apply_updates(params, freeze_diagonal(updates)), opt_state), None

    params = jax.jit(lambda p: jax.lax.scan(adam_step, (p, adam.init(p)), length=8)[0][0])(params)
    for name in ("A", "v"):
        np.testing.assert_allclose(whole.params[name], params[name], rtol=2e-4, atol=2e-6)
    # Four steps, then four more from the result: the step count, Adam's moments and the history go on.
    half = fit(key, CFG, gd, optimizer=adam)
    rest = fit(key, CFG, gd, optimizer=adam, init=half)
    np.testing.assert_array_equal(rest.history["step"], [0, 2, 4, 6, 8])
    np.testing.assert_allclose(rest.history["loss"], whole.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(rest.params["v"], whole.params["v"], rtol=1e-5, atol=1e-7)
    assert int(rest.opt_state[0].count) == 8
    np.testing.assert_array_equal(rest.init_params["v"], whole.init_params["v"])
    with pytest.raises(ConfigError, match="its own key"):
        fit(jax.random.key(7), CFG, gd, optimizer=adam, init=half)
    with pytest.raises(ConfigError, match="another optimiser"):
        fit(key, CFG, gd, init=half)
    with pytest.raises(ConfigError, match="build the optimiser with optax.inject_hyperparams"):
        fit(key, CFG, gd, optimizer=adam, hyperparams={"learning_rate": 0.1})


@pytest.mark.slow
def test_fit_on_the_callers_arrays_is_fit_on_the_same_arrays_drawn():
    key, gd = jax.random.key(8), SWEEP_GD
    drawn = fit(key, CFG, gd)
    streams = run_keys(key)
    train = sample(streams["train"], CFG, drawn.task, gd.N)
    test = sample(streams["test"], CFG, drawn.task, gd.n_test)
    own = fit(key, CFG, gd, train=train, test=test)
    for name in ("loss", "test_loss", "test_error", "alpha"):
        np.testing.assert_array_equal(own.history[name], drawn.history[name], err_msg=name)
    # Runs vmapped together, each with its own training set (a leading run axis) and a test sampler.
    many = fit_seeds(
        jnp.stack([key] * 4),
        CFG,
        gd,
        train=jax.tree.map(lambda a: jnp.stack([a] * 4), train),
        test=lambda k, n: sample(k, CFG, drawn.task, n),
    )
    np.testing.assert_allclose(many.history["loss"][:, 3], drawn.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(
        many.history["test_loss"][:, 3], drawn.history["test_loss"], rtol=1e-5
    )
    flipped = fit(
        key, CFG, gd, train=(train[0], -train[1]), test=test
    )  # the arrays are what it trains on
    assert not np.allclose(flipped.history["loss"][1:], drawn.history["loss"][1:])
    with pytest.raises(ConfigError, match=r"must be \(n, D, d\) = \(n, 16, 16\)"):
        fit(key, CFG, gd, train=(train[0][:, :4], train[1]))


def test_fit_on_the_callers_arrays_without_their_task_or_test_set_is_refused():
    # README's call: X drawn from make_task(key(0)); the run's key draws another task (cosine ~0.1 of
    # w*), on which the test error was 0.24 where the task's own is 0.03 (N=1000, 40 steps).
    key, gd = jax.random.key(0), SWEEP_GD
    X, y = sample(jax.random.key(1), CFG, make_task(key, CFG), gd.N)
    with pytest.raises(ConfigError, match=r"pass task= \(the Task that made X\) or test="):
        fit(key, CFG, gd, train=(X, y))
    with pytest.raises(ConfigError, match=r"pass test="):
        fit_seeds(jnp.stack([key] * 2), CFG, gd, train=(jnp.stack([X] * 2), jnp.stack([y] * 2)))


@pytest.mark.slow
def test_fit_on_the_callers_arrays_tests_on_the_task_that_made_them():
    key, gd = jax.random.key(0), SWEEP_GD
    task = make_task(key, CFG)
    X, y = sample(jax.random.key(1), CFG, task, gd.N)
    mine = fit(key, CFG, gd, train=(X, y), task=task)
    np.testing.assert_array_equal(mine.task.w_star, task.w_star)
    X_test, y_test = sample(
        run_keys(key)["test"], CFG, task, gd.n_test
    )  # the history's test set: task's
    assert mine.history["test_error"][-1] == classification_error(
        forward(mine.params, X_test, CFG), y_test
    )


def test_fit_refuses_labels_shapes_and_starts_of_another_problem():
    key, gd = jax.random.key(0), SWEEP_GD
    task = make_task(key, CFG)
    X, y = sample(jax.random.key(1), CFG, task, 8)
    with pytest.raises(ConfigError, match=r"train's y: labels must be -1 or \+1.*2 \* y - 1"):
        fit(key, CFG, gd, train=(X, (y + 1) / 2), task=task)
    with pytest.raises(ConfigError, match=r"test's y: labels must be -1 or \+1.*2 \* y - 1"):
        fit(key, CFG, gd, test=(X, (y + 1) / 2))
    with pytest.raises(ConfigError, match=r"must be \(n, D, d\) = \(n, 16, 16\)"):
        fit(key, CFG, gd, train=(X[..., :8], y), task=task)
    with pytest.raises(ConfigError, match=r"must be \(n, D, d\)"):
        fit(key, CFG, gd, train=(X, y[:, None]), task=task)
    with pytest.raises(ConfigError, match=r"must be \(2, n, D, d\)"):  # one training set per seed
        fit_seeds(jnp.stack([key] * 2), CFG, gd, train=(X, y), test=(X, y))
    other = TheoryConfig(D=36, C=4, d=16)
    with pytest.raises(ConfigError, match="draw it with make_task"):
        fit(key, CFG, gd, task=make_task(key, other))
    with pytest.raises(ConfigError, match=r"Eq. \(T\) here needs \{'A': \(16, 16\)"):
        fit(key, CFG, gd, params=init_params(key, other, gd))


def test_fit_grid_refuses_an_A_init_and_sizes_it_would_broadcast_or_round():
    keys = jax.random.split(jax.random.key(0), 2)
    with pytest.raises(ConfigError, match=r"A_init has shape \(\): give one D x D = \(16, 16\)"):
        fit_grid(keys, None, 4.0, cfg=CFG, gd=SWEEP_GD, sizes=(8,))
    for sizes in ((0, 8), (8.5,)):
        with pytest.raises(ConfigError, match="whole numbers >= 1"):
            fit_grid(keys, cfg=CFG, gd=SWEEP_GD, sizes=sizes)
    with pytest.raises(ConfigError, match="whole numbers >= 1"):
        grid_lib.fit_sizes(keys, cfg=CFG, gd=SWEEP_GD, sizes=(8, 100.5))


def test_a_step_refuses_gradients_samples_and_counts_that_do_not_fit_the_run():
    task = make_task(jax.random.key(0), CFG)
    X, y = sample(jax.random.key(1), CFG, task, 8)
    state = init_state(init_params(jax.random.key(2), CFG, GD), optim.gradient_descent())
    with pytest.raises(ConfigError, match=r"grads .* do not match the parameters"):
        descend(state, {"A": jnp.zeros((16, 16)), "v": jnp.zeros(8)}, optim.gradient_descent())
    chunk = lambda steps, y: train_chunk(
        state,
        steps,
        make_batch(X, y),
        make_batch(X, y),
        jax.random.key(3),
        task,
        cfg=CFG,
        gd=GD,
        optimizer=optim.gradient_descent(),
    )
    with pytest.raises(ConfigError, match=r"train.y: labels must be -1 or \+1"):
        chunk(1, (y + 1) / 2)
    with pytest.raises(ConfigError, match="num_steps=-1"):
        chunk(-1, y)  # the loop ran no step and returned its start silently


def test_jit_and_vmap_of_fit_name_what_to_use_instead():
    keys = jax.random.split(jax.random.key(0), 2)
    for transform, key in ((jax.jit, keys[0]), (jax.vmap, keys)):
        with pytest.raises(ConfigError, match=r"fit_seeds\(keys"):
            transform(fit)(key, CFG, SWEEP_GD)


@pytest.mark.slow
def test_one_and_eight_devices_agree():
    assert jax.device_count() == 8
    for risk, n in (("empirical", 1003), ("population_mc", 1000)):  # 1003: padding is masked
        gd = GDConfig(**{**GD.__dict__, "risk": risk, "N": n, "steps": 20})
        one = fit(jax.random.key(1), CFG, gd, devices=jax.devices()[:1])
        eight = fit(jax.random.key(1), CFG, gd)
        for name in ("A", "v"):
            np.testing.assert_allclose(one.params[name], eight.params[name], rtol=2e-4, atol=1e-5)
        np.testing.assert_allclose(one.history["loss"], eight.history["loss"], rtol=1e-4)


def test_uniform_attention_gets_no_signal_for_patch_association():
    # At a0 = 0 all rows of A are equal and the data are exchangeable within the partition, so the
    # gradient in A cannot prefer within-set entries; a positive diagonal breaks the tie.
    task = make_task(jax.random.key(0), CFG)
    X, y = sample(jax.random.key(1), CFG, task, 100_000)
    mask = np.asarray(same_set_mask(task.sets)) & ~np.eye(16, dtype=bool)
    gaps = {}
    for a0 in (0.0, 8.0):
        params = {"A": a0 * jnp.eye(16), "v": 0.1 * task.w_star}
        gA = np.asarray(jax.grad(lambda p: empirical_risk(p, X, y, CFG))(params)["A"])
        gaps[a0] = gA[mask].mean() - gA[~np.asarray(same_set_mask(task.sets))].mean()
    assert abs(gaps[0.0]) < 1e-3 * abs(gaps[8.0])
    assert gaps[8.0] < 0  # descent raises within-set entries above across-set ones


def test_uniform_attention_moves_every_row_alike_on_any_data():
    # Why the fig2 preset starts at a0 = sqrt(d): from A = 0 every row of the gradient in A is the same,
    # even on Gaussian data, so the rows of A could never differ and never match the blocks.
    cfg = TheoryConfig(D=16, C=4, d=8, dataset="gaussian_cnn", cnn_width=1, cnn_shared_filter=True)
    task = make_task(jax.random.key(0), cfg)
    X, y = sample(jax.random.key(1), cfg, task, 2000)
    v = jax.random.normal(jax.random.key(2), (cfg.d,))
    grad_A = lambda A: np.asarray(
        jax.grad(lambda A: empirical_risk({"A": A, "v": v}, X, y, cfg))(A)
    )
    uniform, broken = grad_A(jnp.zeros((16, 16))), grad_A(4.0 * jnp.eye(16))
    scale = np.abs(uniform).max()
    assert scale > 0
    np.testing.assert_allclose(
        uniform, np.broadcast_to(uniform[0], uniform.shape), atol=1e-5 * scale
    )
    assert np.abs(broken - broken[0]).max() > 1e-2 * np.abs(broken).max()


@pytest.mark.slow
def test_small_problem_learns_patch_association_for_every_seed():
    gd = GDConfig(N=4000, steps=400, lr=0.003, lr_A=30.0, a0=4.0, eval_every=200, n_test=2000)
    h = fit_seeds(jax.random.split(jax.random.key(0), 3), CFG, gd).history
    np.testing.assert_array_equal(h["patch_association_share"][-1], 1.0)
    assert (h["test_error"][-1] < 0.03).all() and (h["test_error"][0] > 0.1).all()
    assert (h["cos_v_wstar"][-1] > 0.9).all()


def test_a_vmapped_seed_is_the_run_fit_makes_from_its_key():
    keys = jax.random.split(jax.random.key(5), jax.device_count())  # split over the 8 host devices
    many = fit_seeds(keys, CFG, GD)
    one = fit(keys[2], CFG, GD)
    np.testing.assert_allclose(one.params["v"], many.params["v"][2], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(one.history["loss"], many.history["loss"][:, 2], rtol=1e-4)


COLLECTIVES = r"all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter"


@pytest.mark.slow
def test_a_sweep_split_over_devices_needs_no_communication(monkeypatch):
    """Each device trains its own seeds (`mesh.split_runs`): left to sharding propagation, the CPU
    kernel's custom call gathered every seed's samples onto every device, which repeated every run. A
    seed count that does not divide over the devices is padded before the program (`mesh.pad_runs`),
    whose seeds then split as evenly: padding inside each split made XLA re-shard whole runs."""
    keys = jax.random.split(jax.random.key(0), jax.device_count())
    gd = dataclasses.replace(GD, steps=3, eval_every=3)
    for sizes in [(GD.N,), (GD.N // 2, GD.N)]:
        grid = jax.jit(lambda keys: fit_grid(keys, cfg=CFG, gd=gd, sizes=sizes))
        text = grid.lower(keys).compile().as_text()
        assert not re.findall(COLLECTIVES, text)
    calls, program = [], programs.grid_program
    spy = lambda *args, **kwargs: calls.append((args, kwargs)) or program(*args, **kwargs)
    monkeypatch.setattr(programs, "grid_program", spy)
    entries = fit_grid(keys[:3], cfg=CFG, gd=gd, sizes=(GD.N,))
    ((args, kwargs),) = calls
    assert len(args[0]) == jax.device_count() and entries["loss"].shape == (1, 3)
    assert not re.findall(COLLECTIVES, program.lower(*args, **kwargs).compile().as_text())


@pytest.mark.slow
def test_seeds_that_do_not_divide_the_devices_are_the_first_of_a_full_sweep():
    """3, 5 or 1 seeds on the 8 devices are padded to 8 (copies of the last seed, cut off after), so
    each is bitwise the run it is in an 8-seed sweep, which trains one seed per device."""
    keys = jax.random.split(jax.random.key(3), jax.device_count())
    gd = dataclasses.replace(GD, steps=6, eval_every=3)
    full = fit_seeds(keys, CFG, gd)
    full_grid = fit_grid(keys, cfg=CFG, gd=gd, sizes=(GD.N // 2, GD.N))
    for n in (3, 5, 1):
        part = fit_seeds(keys[:n], CFG, gd)
        np.testing.assert_array_equal(part.history["step"], full.history["step"])
        for name, values in part.history.items():
            if name != "step":
                assert values.shape == (3, n)
                np.testing.assert_array_equal(values, full.history[name][:, :n], err_msg=name)
        arrays = lambda r: jax.tree.leaves((r.params, r.init_params, r.task, r.opt_state))
        for leaf, whole in zip(arrays(part), arrays(full), strict=True):
            np.testing.assert_array_equal(leaf, np.asarray(whole)[:n])
        grid = fit_grid(keys[:n], cfg=CFG, gd=gd, sizes=(GD.N // 2, GD.N))
        for name, values in grid.items():
            np.testing.assert_array_equal(values, np.asarray(full_grid[name])[:, :n], err_msg=name)


def test_use_cpu_cores_gives_devices_only_where_nothing_was_chosen():
    """A fresh process gets the CPU devices asked for; one whose JAX already started keeps its device;
    the tests' XLA_FLAGS count (8 here) wins over the call."""
    compile_options.use_cpu_cores(3)
    assert jax.device_count() == 8
    flags = re.sub(
        r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")
    )
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_NUM_CPU_DEVICES", None)
    count = (
        "import jax, jax.numpy as jnp; from posattn import compile_options; {} compile_options.use_cpu_cores(3); "
        "print(jax.device_count())"
    )
    for started, want in (("", "3"), ("jnp.zeros(1);", "1")):
        out = subprocess.run(
            [sys.executable, "-c", count.format(started)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.split()[-1] == want, out.stderr
