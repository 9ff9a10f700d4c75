"""Runs vmapped over seeds and grid cells equal the same runs alone; training learns; boundary fits."""

import math

import jax
import numpy as np
import pytest

from posattn.shallow import dynamics, grid, phase_map
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig

TOK = TokenConfig(d=6, M=4, L=12, alpha_star=0.5, alpha_conf=1 / 12, tau=0.3)
MODEL = ModelConfig(m_a=6, m_b=6, m=8)
SGD = SGDConfig(N=40, batch=4, steps=30, eta=0.2, eta_attention=1.0, n_test=64)


@pytest.mark.slow
def test_a_vmapped_grid_cell_equals_the_same_run_alone():
    keys = grid.seed_keys(0, 3)
    cells, shape = grid.product_cells(TOK, MODEL, SGD, n_star=[5, 6], N=[8, 40])
    assert shape == (2, 2)
    np.testing.assert_array_equal(cells.n_star, [5, 5, 6, 6])
    np.testing.assert_array_equal(cells.N, [8, 40, 8, 40])
    together = grid.run_cells(keys, cells, tokens=TOK, model=MODEL, sgd=SGD, cells_per_batch=2)
    assert together["test_hinge"].shape == (4, 3)
    c, s = 2, 1  # n_* = 6, N = 8, seed 1, run on its own, unbatched
    run_alone = jax.jit(
        lambda key, cell: grid.run_cell(key, cell, tokens=TOK, model=MODEL, sgd=SGD)
    )
    alone = run_alone(keys[s], jax.tree.map(lambda a: a[c], cells))
    for name in ("test_hinge", "test_error", "attention_mass"):
        np.testing.assert_allclose(
            together[name][c, s], alone[name], rtol=2e-4, atol=1e-6, err_msg=name
        )
    # the cells really differ: a different N (same seed) trains a different model
    assert together["test_hinge"][2, 1] != together["test_hinge"][3, 1]


def test_training_lowers_the_test_loss_and_concentrates_attention():
    _, history = dynamics.seed_histories(
        grid.seed_keys(1, 2),
        tokens=TOK,
        model=MODEL,
        sgd=SGDConfig(**{**SGD.__dict__, "N": 200, "steps": 60, "eval_every": 30}),
    )
    hinge, mass = np.asarray(history["test_hinge"]), np.asarray(history["attention_mass"])
    assert hinge.shape == (2, 3)
    assert (hinge[:, -1] < 0.5 * hinge[:, 0]).all()
    assert (mass[:, -1] > mass[:, 0] + 0.05).all()
    band = dynamics.band(history)
    assert band["step"] == [0, 30, 60] and band["min"][-1] <= band["mean"][-1] <= band["max"][-1]


def test_boundary_interpolates_and_censors():
    Ns = [10, 20, 40, 80]
    assert phase_map.boundary(Ns, [0, 0, 0.5, 1]) == 40
    assert math.isclose(phase_map.boundary(Ns, [0, 0, 1, 1]), math.sqrt(20 * 40))  # log-linear
    assert math.isclose(phase_map.boundary(Ns, [0, 0.25, 0.75, 1]), math.sqrt(20 * 40))
    assert phase_map.boundary(Ns, [1, 1, 1, 1]) == 10
    assert math.isnan(phase_map.boundary(Ns, [0, 0, 0.4, 0.3]))


def test_fit_boundary_tells_alpha_squared_from_alpha_fourth():
    alphas = np.array([0.2, 0.25, 0.3, 0.4, 0.5])
    Ns = np.geomspace(5, 5000, 61)
    for power in (2, 4):
        n_true = 3 * alphas**-power + 20
        rate = (Ns[None, :] >= n_true[:, None]).astype(float)
        fit = phase_map.fit_boundary(
            {"alpha_star": alphas.tolist(), "N": Ns.tolist(), "success_rate": rate}
        )
        r2, r4 = fit["fit_alpha_m2"]["r2"], fit["fit_alpha_m4"]["r2"]
        assert (r2 > r4) == (power == 2), (power, r2, r4)
        assert fit["fit_alpha_m2" if power == 2 else "fit_alpha_m4"]["r2"] > 0.99
