"""The settling runs' analysis (posattn.papers.lwlc23.settle): fits recover known boundaries, bootstrap
intervals cover them, and the verdicts and summary follow the intervals."""

import math

import ml_collections
import numpy as np

from posattn.analysis import bootstrap
from posattn.papers.lwlc23 import settle, settle_grid, settle_report, settle_stats


def _success(n_true, Ns_CxN, R, rng):
    """Seeds succeed when N exceeds their own threshold, spread around n_true (so the rate crosses 1/2 at it)."""
    thresh_RxC = np.asarray(n_true)[None, :] * np.exp(rng.normal(0, 0.15, (R, len(n_true))))
    return (np.asarray(Ns_CxN)[None] >= thresh_RxC[:, :, None]).astype(float)


def test_shifted_power_fit_recovers_q_and_alpha0():
    alpha = np.array([0.15, 0.2, 0.3, 0.4])
    for q, a0 in ((2.0, 0.0), (1.5, 0.1)):
        fit = settle_stats.shifted_power_fit(alpha, 3.0 * (alpha - a0) ** -q)
        assert abs(fit["q"] - q) < 0.05 and abs(fit["alpha0"] - a0) < 0.01, (q, a0, fit)
    assert math.isnan(settle_stats.shifted_power_fit(alpha, [10, math.nan, math.nan, 5])["q"])
    assert abs(settle_stats.power_fit(alpha, 2 * alpha**-3.0) - 3.0) < 1e-6


def test_boundary_study_interval_covers_the_true_boundary():
    rng = np.random.default_rng(0)
    alpha = np.array([0.15, 0.2, 0.3, 0.4])
    n_true = 2.0 * alpha**-2
    Ns = np.array([settle_grid.geometric_window(n, 1.5, 1.2) for n in n_true], dtype=object)
    Ns = settle_grid.pad_rows([list(r) for r in Ns])
    success = _success(n_true, Ns, 40, rng)
    study = settle_stats.boundary_study(
        success, Ns, alpha, 0.5, bootstrap.resample_indices(40, 200), 0.0
    )
    for iv, n in zip(study["N_star"], n_true):
        assert iv["lo"] <= n * 1.1 and iv["hi"] >= n * 0.9, (iv, n)
    assert study["q"]["lo"] < 2.6 and study["q"]["hi"] > 1.4
    assert settle_report.exponent_verdict(study["q"], 2, 4).startswith("consistent with 2")
    assert "q_at_alpha0_2e" not in study  # alpha_# = 0: no margin to fix alpha_0 at


def test_windows_follow_the_coarse_boundary_and_pad_with_repeats():
    assert settle_grid.geometric_window(100, 1.5, 1.2) == [67, 80, 96, 115, 138, 166]
    coarse = np.zeros((4, 3, 3))
    coarse[:, 0, 1:] = 1  # row 0 crosses between 4 and 16; row 1 never; row 2 already at 4
    coarse[:, 2, :] = 1
    windows = settle_grid.windows_from_coarse(coarse, [4, 16, 64], 0.5, 1.5, 1.2)
    assert (
        windows[0][0] <= 8 <= windows[0][-1] and windows[1][0] > 16
    )  # row 0 about sqrt(4 * 16); row 1 at the end
    assert (
        windows[2][0] < 4 < windows[2][-1] < 16
    )  # a row at the coarse floor gets a window at the floor
    assert np.isnan(
        settle_stats.boundaries(coarse, [[4, 16, 64]] * 3, 0.5)[2]
    )  # and is censored there
    padded = settle_grid.pad_rows([[1, 2, 3], [5, 6]])
    assert padded.tolist() == [[1, 2, 3], [5, 6, 6]]


def test_direction_and_margin_verdicts():
    assert settle_stats.direction({"value": 3, "lo": 1, "hi": 5}) == "grows"
    assert settle_stats.direction({"value": -3, "lo": -5, "hi": -1}) == "falls"
    assert settle_stats.direction({"value": 1, "lo": -1, "hi": 5}).startswith("flat")
    assert settle_stats.direction({"value": math.nan, "lo": 1, "hi": 5}).startswith("not measured")
    assert (
        settle_report.margin_verdict({"value": 0.18, "lo": 0.15, "hi": 0.2}, 1 / 30)
        == "interval contains 2e alpha_#"
    )
    assert (
        settle_report.margin_verdict({"value": 0.0, "lo": -0.05, "hi": 0.05}, 1 / 30)
        == "interval contains 0"
    )
    assert (
        settle_report.exponent_verdict({"value": 4.0, "lo": 3.0, "hi": 5.0}, 2, 4)
        == "above 2, consistent with 4"
    )
    assert settle_report.exponent_verdict(
        {"value": math.nan, "lo": 1.0, "hi": 5.0}, 2, 4
    ).startswith("not measured")


def test_sparsify_setting_reads_flat_random_and_each_policy():
    R, K = 16, 3
    rng = np.random.default_rng(1)
    part = {
        "random/test_hinge": (0.05 + 0.002 * rng.normal(size=(1, R, K))),
        "irrelevant/test_hinge": np.stack([np.linspace(0.05, 0.005, K)] * R)[None]
        + 0.001 * rng.random((1, R, K)),
    }
    s = settle._setting(part, 0, ("random", "irrelevant"), bootstrap.resample_indices(R, 200), L=60)
    assert s["policies"]["random"]["flat"] and s["policies"]["random"]["verdict"] == "no change"
    assert s["policies"]["irrelevant"]["verdict"] == "lowers"
    config = ml_collections.ConfigDict(
        {
            "sgd": {"n_test": 500},
            "level": 0.5,
            "seeds": R,
            "boot": 200,
            "policies": ("random", "irrelevant"),
        }
    )
    s.update(at="test", n=10, kind="any", bound=2.0, far=0.2, ks=[0, 5, 10])
    md = settle_report.summary_markdown("sparsify", {"settings": [s], "seconds": 1.0}, config)
    assert "| test | 60 | 10 | any | 2 (20%) |" in md and "| yes |" in md


def test_far_share_is_zero_inside_half_the_separation_and_positive_beyond():
    from posattn.shallow.config import TokenConfig

    tok = TokenConfig()
    assert (
        settle._far_share(tok, 0.7) == 0.0
    )  # ||z|| <= 0.7 < sqrt(2)/2: always nearest its own pattern
    assert settle._far_share(tok, 2.0) > 0.05


def test_each_knob_is_swept_alone_around_its_base_and_the_base_is_a_row_once():
    from types import SimpleNamespace

    from posattn.papers.lwlc23.settle import sweep_rows

    default = SimpleNamespace(
        sigma_base=0.0, delta_base=0.0, sigmas=(0.0, 1 / 6), deltas=(0.25,), taus=()
    )
    rows, base = sweep_rows(default, 1.0)
    assert base == {"sigma": 0.0, "delta": 0.0, "tau": 1.0}
    # the rows of the settling runs before the base existed: sigma at delta = 0, delta at sigma = 0
    assert [(r["sigma"], r["delta"]) for r in rows] == [(0.0, 0.0), (1 / 6, 0.0), (0.0, 0.25)]
    around = SimpleNamespace(
        sigma_base=2.0, delta_base=2.0, sigmas=(1.0, 3.0), deltas=(2.0, 3.0), taus=(1.0, 2.0)
    )
    rows, base = sweep_rows(around, 1.5)
    assert (
        rows.count(base) == 1 and len(rows) == 6
    )  # base (from the deltas), 2 sigmas, 1 delta, 2 taus
    assert all(sum(r[k] != base[k] for k in base) <= 1 for r in rows)  # one knob moved at a time


def test_the_concentration_verdict_reads_the_end_and_the_rise_by_their_intervals():
    from posattn.papers.lwlc23.concentration import verdict

    assert verdict([0.9, 0.87, 0.93], [0.3, 0.2, 0.4]) == "reproduced"
    assert verdict([0.63, 0.60, 0.67], [0.27, 0.24, 0.29]) == "not reproduced"  # end below 0.85
    assert verdict([0.9, 0.87, 0.93], [0.0, -0.1, 0.0]) == "not reproduced"  # no rise
    assert verdict([0.85, 0.80, 0.90], [0.3, 0.2, 0.4]) == "undecided"  # end across 0.85
