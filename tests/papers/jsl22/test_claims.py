"""JSL22's other claims on tiny sizes: GLM baseline, Theorem 3.2 construction, transfer, and the
reproduction report."""

import dataclasses
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.papers.jsl22 import construction, glm, report, transfer
from posattn.theory import (
    GDConfig,
    TheoryConfig,
    evaluation,
    make_task,
    patch_association,
    sample,
)
from posattn.theory.datasets.structured import sample_coefficients
from posattn.theory.model import forward, sigma
from tests import envs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CFG = TheoryConfig(D=16, C=4, d=8, q=0.4)
GD = GDConfig(N=64, steps=5, lr=0.01, lr_A=30.0, a0=math.sqrt(CFG.d), n_test=128)


def test_glm_depends_on_x_only_through_the_weighted_sum():
    params = glm.init_glm(jax.random.key(0), CFG.D, CFG.d)
    X = jax.random.normal(jax.random.key(1), (4, CFG.D, CFG.d))
    # Move mass between patches 0 and 1 along directions that keep z = sum_j <w_j, X_j> fixed.
    w0, w1 = params["w"][0], params["w"][1]
    X2 = X.at[:, 0].add(w0 / (w0 @ w0)).at[:, 1].add(-w1 / (w1 @ w1))
    np.testing.assert_allclose(
        glm.glm_forward(params, X), glm.glm_forward(params, X2), rtol=1e-4, atol=1e-5
    )


@pytest.mark.slow
def test_glm_training_lowers_its_risk_and_oracle_error_is_a_label_count():
    task = make_task(jax.random.key(0), CFG)
    X, y = sample(jax.random.key(1), CFG, task, 256)
    _, losses = glm.fit_glm(jax.random.key(2), X, y, steps=50)
    assert losses[-1] < 0.8 * losses[0]
    # Without spurious features (q = 0) z = yC separates the classes; with q > 0 some z values mix them.
    no_spurious = dataclasses.replace(CFG, q=0.0)
    assert float(glm.oracle_error(jax.random.key(3), no_spurious, task, 10_000)) == 0.0
    assert (
        0.0
        < float(glm.oracle_error(jax.random.key(3), dataclasses.replace(CFG, q=0.8), task, 10_000))
        < 0.5
    )
    # Against f* (Theorem 3.1's error), counted by hand on the same draws: at each z the link takes the
    # majority sign of f*, and a tie f* = 0 is an error whatever it says.
    noisy = dataclasses.replace(CFG, q=0.8)
    coef, _, _ = sample_coefficients(jax.random.key(3), noisy, task, 10_000)
    coef = np.asarray(coef)
    z = np.round(coef.sum(-1)).astype(int)
    per_set = coef[:, np.asarray(task.sets)].sum(-1)
    f_sign = np.sign(np.where(np.abs(per_set) > 0.9 * noisy.C, per_set, 0).sum(-1))
    by_hand = (
        sum(
            min(np.sum(at & (f_sign > 0)), np.sum(at & (f_sign < 0))) + np.sum(at & (f_sign == 0))
            for at in (z == v for v in np.unique(z))
        )
        / 10_000
    )
    assert np.sum(f_sign == 0) > 0  # ties occur, and count
    np.testing.assert_allclose(
        float(glm.oracle_error(jax.random.key(3), noisy, task, 10_000, against="f_star")),
        by_hand,
        rtol=1e-6,
    )


@pytest.mark.slow
def test_construction_avoids_own_sets_and_equals_the_set_sum_model():
    task = make_task(jax.random.key(0), CFG)
    params = construction.construction_params(CFG, task)
    assert not construction.own_set_in_top_c(params["A"], task).any()
    assert not bool(patch_association(params["A"], task)[1])
    X, _ = sample(jax.random.key(1), CFG, task, 512)
    s = (X @ task.w_star)[:, task.sets].sum(-1)  # (n, L) per-set sums
    expected = CFG.C * sigma(CFG.D * (CFG.C / CFG.D) * s / CFG.C, CFG.activation).sum(-1)
    np.testing.assert_allclose(forward(params, X, CFG), expected, rtol=1e-3, atol=1e-3)
    errors = evaluation.test_errors(jax.random.key(2), params, CFG, task, 20_000, 10_000)
    assert float(errors["test_error"]) <= float(errors["label_noise_rate"]) + 0.01


def test_own_set_detector_sees_the_diagonal_and_ties():
    task = make_task(jax.random.key(0), CFG)
    A = construction.construction_params(CFG, task)["A"]
    assert construction.own_set_in_top_c(A + 1e3 * jnp.eye(CFG.D), task).all()
    assert construction.own_set_in_top_c(jnp.zeros((CFG.D, CFG.D)), task).all()  # all tied


@pytest.mark.slow
def test_transfer_pieces():
    w_star = make_task(jax.random.key(0), CFG).w_star
    w = transfer.orthogonal_feature(jax.random.key(1), w_star)
    assert abs(float(w @ w_star)) < 1e-6 and abs(float(jnp.linalg.norm(w)) - 1) < 1e-6
    assert transfer.smallest_size((8, 16, 32), (0.2, 0.04, 0.01), 0.05) == 16
    assert transfer.smallest_size((8, 16), (0.2, 0.1), 0.05) is None
    out = transfer.transfer(
        jax.random.key(2), CFG, GD, pretrain_N=64, sizes=(8, 16), seeds=2, n_test=64
    )
    for way in ("frozen_A", "scratch"):
        assert out[way]["sizes"] == [8, 16] and out[way]["seeds"] == 2
        assert len(out[way]["test_error_mean"]) == 2
    # The downstream labels follow w', not w*: a data point's w'-coefficients carry its label.
    task = make_task(jax.random.key(0), CFG)
    down = transfer.downstream_task(jax.random.key(3), task)
    np.testing.assert_array_equal(down.sets, task.sets)  # same partition, a new feature
    assert abs(float(down.w_star @ task.w_star)) < 1e-6
    X, y = sample(jax.random.key(4), CFG, down, 64)
    coef, y2, _ = sample_coefficients(jax.random.split(jax.random.key(4))[0], CFG, down, 64)
    np.testing.assert_allclose(X @ down.w_star, coef, atol=1e-5)
    np.testing.assert_array_equal(y, y2)


def _statements(**holds):
    """Phase statements as `phases.detect_phases` lists them, each holding unless given False."""
    names = [
        ("still_A", "I", "A barely moves while v aligns"),
        ("glm", "I", "the phase-I model errs at the GLM's level"),
        ("gamma", "II", "gamma - rho grows while alpha is nearly constant"),
        ("risk", "III", "the risk falls once patches are associated"),
        ("alpha", "III", "alpha grows again"),
    ]
    return [
        {
            "phase": p,
            "statement": n,
            "paper": "",
            "measured": {"x": 0.5},
            "holds": holds.get(k, True),
        }
        for k, p, n in names
    ]


def test_report_verdicts_and_bad_flags():
    row = lambda **kw: kw
    core_statements = _statements(
        alpha=False
    )  # alpha falls in phase III, as on the q = 0.4 presets
    results = {
        "core": row(
            patch_association=True,
            patch_association_share=1.0,
            test_error=0.01,
            label_noise_rate=0.01,
            phases_in_order=False,
            phase_statements=core_statements,
            figure="core_dynamics.png",
        ),
        "frozen_A": row(
            phase_statements=_statements(gamma=False, risk=False, alpha=False),
            phases_in_order=False,
        ),
        "exact": row(patch_association=False, final_loss=0.1, test_error=0.02, figure="x.png"),
        "glm": row(
            test_error=0.13,
            train_error=0.1,
            oracle_error=0.133,
            f_star_error=0.135,
            oracle_f_star_error=0.14,
        ),
        "construction": row(
            test_error=0.012, label_noise_rate=0.01, rows_whose_top_C_meets_own_set=0
        ),
        "figure2": row(
            test_error=0.2,
            off_diagonal_overlap=0.2,
            chance=0.2,
            seeds=2,
            off_diagonal_overlaps=[0.1, 0.3],
        ),
        "transfer": {
            "target": 0.05,
            "ratio": 4.0,
            "frozen_A": {"smallest_size": 16},
            "scratch": {"smallest_size": 64},
            "ratio_is_lower_bound": False,
            "pretrain": {"patch_association": True},
        },
        "sweep": row(
            sizes=[10, 100],
            patch_association_rate=[0.0, 0.5],
            rows_with_patch_association=[0.5, 0.9],
            test_error_mean=[0.1, 0.01],
        ),
    }
    verdicts = {r["claim"].split(":")[0]: r["verdict"] for r in report.verdicts(results)}
    assert verdicts["Theorems 4.1-4.2"] == "reproduced"  # patch association and the risk's fall
    phase_rows = {
        r["claim"]: r["verdict"] for r in report.verdicts(results) if "(core run)" in r["claim"]
    }
    assert (
        len(phase_rows) == 5
        and phase_rows["Phase III (core run): alpha grows again"] == "not reproduced"
    )
    assert verdicts["Control"] == "reproduced"  # II and III fail with A frozen, as they must
    assert verdicts["GD on the exact population risk (P)"] == "not reproduced"
    assert verdicts["Theorem 3.1"] == "reproduced"
    assert verdicts["Theorem 3.2"] == "reproduced"
    assert verdicts["Figure 2"] == "not reproduced"  # 20% test error
    assert verdicts["Theorem 5.1"] == "not reproduced"  # ratio 4 < 5
    assert verdicts["Sample complexity"] == "reproduced"
    # The best GLM we know (w_j = w*, phi the majority link) decides Theorem 3.1, not an overfitted one,
    # by the theorem's error, against f*; transfer needs pre-training to have found the structure, and a
    # ratio at the grid's edge is ">=".
    results["glm"]["oracle_error"] = 0.10  # against the labels: not the theorem's quantity
    assert {r["claim"].split(":")[0]: r["verdict"] for r in report.verdicts(results)}[
        "Theorem 3.1"
    ] == "reproduced"
    results["glm"]["oracle_f_star_error"] = 0.12
    results["transfer"].update(ratio=64.0, ratio_is_lower_bound=True)
    rows = {r["claim"].split(":")[0]: r for r in report.verdicts(results)}
    assert rows["Theorem 3.1"]["verdict"] == "not reproduced"
    assert (
        rows["Theorem 5.1"]["verdict"] == "reproduced"
        and ">= 64x" in rows["Theorem 5.1"]["measured"]
    )
    results["transfer"]["pretrain"]["patch_association"] = False
    assert {r["claim"].split(":")[0]: r["verdict"] for r in report.verdicts(results)}[
        "Theorem 5.1"
    ] == "not reproduced"
    # A control on which phase II held would show the measurement cannot fail: not reproduced.
    results["frozen_A"]["phase_statements"] = _statements(risk=False)
    assert {r["claim"].split(":")[0]: r["verdict"] for r in report.verdicts(results)}[
        "Control"
    ] == "not reproduced"
    core_statements[3]["holds"] = False  # the risk does not fall: the core claim fails
    assert {r["claim"].split(":")[0]: r["verdict"] for r in report.verdicts(results)}[
        "Theorems 4.1-4.2"
    ] == "not reproduced"
    out = subprocess.run(
        [sys.executable, "-m", "experiments.reproduce"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=envs.devices(1),
    )
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
