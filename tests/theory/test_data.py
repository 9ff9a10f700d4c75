"""Samplers of Assumption 1 and Figure 2: statistics that would fail on a wrong generator."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.theory import (
    TheoryConfig,
    evaluation,
    grid_sets,
    labelling_function,
    make_task,
    same_set_mask,
    sample,
    set_index,
)
from posattn.theory.datasets.structured import sample_coefficients
from posattn.theory.model import forward

CFG = TheoryConfig(D=16, C=4, d=32, q=0.4)


def test_grid_sets_match_figure_1b():
    # JSL22's example, 1-based: S_1={1,2,5,6}, S_2={3,4,7,8}, S_3={9,10,13,14}, S_4={11,12,15,16}.
    np.testing.assert_array_equal(
        grid_sets(16, 4) + 1, [[1, 2, 5, 6], [3, 4, 7, 8], [9, 10, 13, 14], [11, 12, 15, 16]]
    )
    sets = np.asarray(grid_sets(36, 4))
    assert sorted(sets.ravel().tolist()) == list(range(36))
    rows, cols = sets // 6, sets % 6  # every block is a 2x2 square of the 6x6 grid
    assert np.all(rows.max(1) - rows.min(1) == 1) and np.all(cols.max(1) - cols.min(1) == 1)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_partition_is_a_partition(seed):
    cfg = TheoryConfig(D=36, C=4, d=8, partition="random")
    task = make_task(jax.random.key(seed), cfg)
    assert task.sets.shape == (9, 4)
    assert sorted(np.asarray(task.sets).ravel().tolist()) == list(range(36))
    assert not np.array_equal(np.asarray(task.sets), np.asarray(grid_sets(36, 4)))


def test_signal_set_delta_frequencies_and_orthogonal_noise():
    task = make_task(jax.random.key(0), CFG)
    n = 40_000
    X, y = sample(jax.random.key(1), CFG, task, n)
    assert X.shape == (n, 16, 32) and y.shape == (n,)
    assert set(np.unique(np.asarray(y)).tolist()) == {-1.0, 1.0}
    assert abs(float(y.mean())) < 4 / np.sqrt(n)
    np.testing.assert_allclose(float(jnp.linalg.norm(task.w_star)), 1.0, rtol=1e-6)

    coef = np.asarray(X @ task.w_star)  # noise is orthogonal to w*: exact coefficients
    np.testing.assert_allclose(coef, np.round(coef), atol=1e-4)
    coef = np.round(coef)
    noise = np.asarray(X) - coef[..., None] * np.asarray(task.w_star)
    np.testing.assert_allclose(noise @ np.asarray(task.w_star), 0, atol=1e-5)
    np.testing.assert_allclose(noise.var(), CFG.s**2 * (CFG.d - 1) / CFG.d, rtol=0.01)

    # The same key gives the signal set: all its patches equal y w*.
    _, y2, ell = sample_coefficients(jax.random.split(jax.random.key(1))[0], CFG, task, n)
    np.testing.assert_array_equal(np.asarray(y2), np.asarray(y))
    in_signal = np.asarray(set_index(task.sets))[None, :] == np.asarray(ell)[:, None]
    np.testing.assert_array_equal(coef[in_signal], np.repeat(np.asarray(y), 4))
    # Outside it: delta = +1, -1 with probability q/2 each, 0 otherwise.
    outside = coef[~in_signal]
    se = np.sqrt(0.2 * 0.8 / outside.size)
    assert abs((outside == 1).mean() - CFG.q / 2) < 4 * se
    assert abs((outside == -1).mean() - CFG.q / 2) < 4 * se
    assert set(np.unique(outside).tolist()) <= {-1.0, 0.0, 1.0}


def test_isotropic_noise_has_a_component_along_w_star():
    cfg = TheoryConfig(D=16, C=4, d=32, q=0.4, noise="isotropic")
    task = make_task(jax.random.key(0), cfg)
    X, _ = sample(jax.random.key(1), cfg, task, 5000)
    along = np.asarray(X @ task.w_star)
    np.testing.assert_allclose((along - np.round(along)).std(), cfg.s, rtol=0.05)


def test_labelling_function_is_yC_without_full_random_sets():
    task = make_task(jax.random.key(0), CFG)
    X, y = sample(jax.random.key(2), CFG, task, 20_000)
    f = np.asarray(labelling_function(X, CFG, task))
    coef = np.round(np.asarray(X @ task.w_star))
    per_set = coef[:, np.asarray(task.sets)].sum(-1)
    full = (np.abs(per_set) == 4).sum(-1)  # the signal set plus any all-+1 / all--1 random set
    np.testing.assert_allclose(f[full == 1], 4 * np.asarray(y)[full == 1], atol=1e-4)
    assert (full > 1).any()  # q = 0.4 makes some random sets full: f* != yC there
    np.testing.assert_allclose(
        f, np.where(np.abs(per_set) > 0.9 * 4, per_set, 0).sum(-1), atol=1e-4
    )


def test_label_noise_counts_every_tie_and_matches_its_exact_rate():
    # Exact: y f* <= 0 iff among the L - 1 other sets at least one more is all -y than all +y, each
    # set being all +1 (or all -1) with probability p = (q/2)^C.
    cfg = TheoryConfig(D=16, C=4, d=32, q=0.8)  # p = 0.0256 per set: many ties in few samples
    p, m = (cfg.q / 2) ** cfg.C, cfg.L - 1
    exact = sum(
        math.factorial(m)
        / (math.factorial(a) * math.factorial(b) * math.factorial(m - a - b))
        * p ** (a + b)
        * (1 - 2 * p) ** (m - a - b)
        for a in range(m + 1)
        for b in range(a + 1, m + 1 - a)
    )
    task = make_task(jax.random.key(0), cfg)
    X, y = sample(jax.random.key(4), cfg, task, 200_000)
    coef = np.round(np.asarray(X @ task.w_star))  # the integer coefficients, rounding removed
    per_set = coef[:, np.asarray(task.sets)].sum(-1)
    f_exact = np.where(np.abs(per_set) > 0.9 * cfg.C, per_set, 0).sum(-1)
    disagrees = np.asarray(evaluation.label_disagrees(X, y, cfg, task))
    np.testing.assert_array_equal(disagrees, np.asarray(y) * f_exact <= 0)
    np.testing.assert_array_equal(
        np.asarray(evaluation.f_star_is_not_yC(X, y, cfg, task)), f_exact != np.asarray(y) * cfg.C
    )
    assert (f_exact == 0).sum() > 1000  # the ties that rounding used to decide
    se = math.sqrt(exact * (1 - exact) / len(y))
    assert abs(disagrees.mean() - exact) < 3 * se, (disagrees.mean(), exact)


@pytest.mark.slow
def test_final_test_error_is_taken_on_exactly_the_samples_asked_for():
    cfg = TheoryConfig(D=16, C=4, d=32, q=0.8)
    task = make_task(jax.random.key(0), cfg)
    key = jax.random.key(5)
    X, y = sample(jax.random.split(key, 1)[0], cfg, task, 300)  # n <= chunk: one chunk of n
    # v off w*: the scores carry Gaussian noise, so none is a tie at 0 that rounding could decide
    params = {"A": jnp.zeros((16, 16)), "v": task.w_star + 0.5 * jax.random.normal(key, (cfg.d,))}
    got = evaluation.test_errors(key, params, cfg, task, 300)
    assert float(got["label_noise_rate"]) == float(
        evaluation.label_disagrees(X, y, cfg, task).mean()
    )
    assert float(got["test_error"]) == float((~(y * forward(params, X, cfg) > 0)).mean())
    assert 0 < float(got["f_star_not_yC_rate"]) < 0.5
    with pytest.raises(ConfigError, match="multiple"):
        evaluation.test_errors(key, {"A": jnp.zeros((16, 16)), "v": task.w_star}, cfg, task, 15_000)
    # isotropic noise moves every <w*, X_i> off the integers: f* = yC is no event there
    iso = dataclasses.replace(cfg, noise="isotropic")
    assert math.isnan(
        float(evaluation.test_errors(key, params, iso, task, 300)["f_star_not_yC_rate"])
    )


def test_sample_is_jittable_and_vmappable_over_keys():
    task = make_task(jax.random.key(0), CFG)
    keys = jax.random.split(jax.random.key(3), 5)
    X, y = jax.vmap(lambda k: sample(k, CFG, task, 7))(keys)
    assert X.shape == (5, 7, 16, 32) and y.shape == (5, 7)
    Xj, yj = jax.jit(sample, static_argnums=(1, 3))(keys[2], CFG, task, 7)
    np.testing.assert_allclose(np.asarray(Xj), np.asarray(X[2]), atol=1e-6)
    assert not np.allclose(np.asarray(X[0]), np.asarray(X[1]))


def test_sample_refuses_a_count_that_is_no_positive_integer_and_another_configs_task():
    task = make_task(jax.random.key(0), CFG)
    with pytest.raises(ConfigError, match="n=-5: draw an integer number of samples >= 0"):
        sample(jax.random.key(1), CFG, task, -5)
    other = make_task(jax.random.key(0), TheoryConfig(D=36, C=4, d=32))
    with pytest.raises(
        ConfigError,
        match=r"the task has sets \(9, 4\) and w\* \(32,\), but the config needs "
        r"sets \(4, 4\)",
    ):
        sample(jax.random.key(1), CFG, other, 5)


def test_figure2_gaussian_data_is_labelled_by_the_cnn():
    cfg = TheoryConfig(D=16, C=4, d=16, dataset="gaussian_cnn", cnn_width=2)
    task = make_task(jax.random.key(0), cfg)
    X, y = sample(jax.random.key(1), cfg, task, 20_000)
    np.testing.assert_allclose(np.asarray(X).std(), 1.0, rtol=0.01)
    f = np.asarray(labelling_function(X, cfg, task))
    np.testing.assert_array_equal(np.where(f >= 0, 1.0, -1.0), np.asarray(y))
    assert 0.4 < (np.asarray(y) > 0).mean() < 0.6
    # f* only sees patches through their blocks: moving a patch inside its block changes f*.
    blocks = np.asarray(task.sets)
    swapped = np.asarray(X).copy()
    swapped[:, [blocks[0, 0], blocks[0, 1]]] = swapped[:, [blocks[0, 1], blocks[0, 0]]]
    assert not np.allclose(np.asarray(labelling_function(jnp.asarray(swapped), cfg, task)), f)


def test_grid_sets_refuses_sizes_with_no_k_by_k_blocks():
    for D, C in (
        (16, 2),
        (15, 4),
        (36, 16),
    ):  # (16, 2) returned row pairs {0,1}, {2,3}, ... silently
        with pytest.raises(ConfigError, match=rf"grid_sets\(D={D}, C={C}\): k x k blocks"):
            grid_sets(D, C)


def test_set_index_refuses_sets_that_are_not_a_0_based_partition():
    with pytest.raises(ConfigError, match=r"0\.\.15 once \(0-based\), got values 1\.\.16"):
        set_index(jnp.arange(1, 17).reshape(4, 4))  # patch 16 was dropped, patch 0 put in set 0
    with pytest.raises(ConfigError, match="1 repeats"):
        same_set_mask(jnp.array([[0, 1], [1, 2]]))
    # Traced sets are the caller's (a task's partition is drawn by make_task): shapes only.
    np.testing.assert_array_equal(jax.jit(set_index)(grid_sets(16, 4)), set_index(grid_sets(16, 4)))


def test_labelling_function_refuses_samples_and_tasks_of_another_config():
    task = make_task(jax.random.key(0), CFG)
    X, _ = sample(jax.random.key(1), CFG, task, 4)
    with pytest.raises(ConfigError, match=r"X has shape \(4, 8, 32\)"):
        labelling_function(X[:, :8], CFG, task)  # indices past patch 7 were clipped silently
    with pytest.raises(ConfigError, match="draw it with make_task"):
        labelling_function(X, CFG, make_task(jax.random.key(0), TheoryConfig(D=36, C=4, d=32)))
