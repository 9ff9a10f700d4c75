"""The verdicts of summary.md follow the measured numbers, both ways."""

import math

import numpy as np

from posattn.papers.lwlc23 import report


def _curves(final):
    return {p: {"test_hinge": np.array([[0.05, v]])} for p, v in final.items()}


def test_sparsification_verdict_reads_the_ordering_and_the_sign():
    ok = report.sparsify_rows(
        [0, 20], _curves({"irrelevant": 0.01, "noisy": 0.03, "random": 0.06})
    )[0]
    assert ok["verdict"] == "reproduced"
    up = report.sparsify_rows([0, 20], _curves({"irrelevant": 0.01, "noisy": 0.08, "random": 0.2}))[
        0
    ]
    assert up["verdict"].startswith("ordering reproduced, but")
    bad = report.sparsify_rows(
        [0, 20], _curves({"irrelevant": 0.09, "noisy": 0.03, "random": 0.06})
    )[0]
    assert bad["verdict"] == "not reproduced"


def _fit(n_star, power, r2, r4):
    return {
        "N_star": n_star,
        "inside_grid": [True] * len(n_star),
        "power": power,
        "fit_alpha_m2": {"r2": r2},
        "fit_alpha_m4": {"r2": r4},
    }


def test_boundary_verdicts():
    rows = report.boundary_rows(
        _fit([30, 10], 2.1, 0.95, 0.90), _fit([math.nan, 40], 4.2, 0.7, 0.9), [0.2, 0.3]
    )
    assert [r["verdict"] for r in rows] == ["reproduced", "reproduced", "reproduced"]
    rows = report.boundary_rows(
        _fit([30, 10], 2.1, 0.90, 0.95), _fit([20, 5], 2.0, 0.9, 0.7), [0.2, 0.3]
    )
    assert rows[0]["verdict"] == "exponent nearer 2 than 4; line fit worse in alpha^-2"
    assert rows[1]["verdict"].startswith("exponent not nearer 4")
    assert rows[2]["verdict"] == "at 0 of 2 alpha_*"


def test_attention_and_sweep_verdicts():
    band = {
        "step": [0, 30, 60, 90],
        "mean": [0.54, 0.8, 0.9, 0.9],
        "q10": [0, 0, 0, 0.88],
        "q90": [0, 0, 0, 0.92],
        "min": [0, 0, 0, 0.87],
    }
    row = report.attention_row(band, 10)
    assert row["verdict"] == "reproduced"
    assert (
        "0.90 (it. 60)" in row["ours"] and "min 0.87" in row["ours"]
    )  # the step it reads is the one it names
    assert (
        report.attention_row({**band, "mean": [0.54, 0.8, 0.84, 0.84]}, 10)["verdict"]
        == "not reproduced (< 0.85)"
    )
    assert (
        report.attention_row({**band, "mean": [0.9, 0.7, 0.86, 0.86]}, 10)["verdict"]
        == "not reproduced (no rise)"
    )
    sweep = {"values": [0, 1, 2], "N_star": [5.0, 11.0, math.nan], "alpha_star": 0.3}
    assert report.sweep_row(sweep, "tau")["verdict"] == "reproduced"
    assert (
        report.sweep_row({**sweep, "N_star": [12.0, 10.0, 28.0]}, "tau")["verdict"]
        == "not reproduced"
    )
    # every N* at the grid's floor (success >= 0.5 at its smallest N) or beyond it: the grid decides nothing
    at_floor = report.sweep_row({**sweep, "N": [4, 9, 20], "N_star": [4.0, 4.0, 4.0]}, "tau")
    assert at_floor["verdict"] == "not decidable at this grid (every N* at its floor, N = 4)"
    assert at_floor["ours"] == "ViT N* at alpha_* = 0.30: 0: <= 4, 1: <= 4, 2: <= 4"
    assert report.sweep_row({**sweep, "N_star": [math.nan] * 3}, "tau")["verdict"].startswith(
        "not decidable"
    )
    assert (
        report.sweep_row({**sweep, "N": [4, 9, 20], "N_star": [4.0, 4.0, 9.0]}, "tau")["verdict"]
        == "reproduced"
    )
