"""Patch association (Definition 2.2) and the phase detector on hand-built inputs."""

import jax.numpy as jnp
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.papers.jsl22.phases import detect_phases, patch_association_step
from posattn.theory import (
    grid_sets,
    parameter_metrics,
    patch_association,
    top_c_overlap,
    within_across_means,
)
from posattn.theory.data import Task, same_set_mask
from posattn.theory.metrics import off_diagonal_overlap

TASK = Task(sets=grid_sets(16, 4), w_star=jnp.ones(4) / 2)
MASK = np.asarray(same_set_mask(TASK.sets))


def test_block_matrix_has_patch_association():
    A = jnp.asarray(np.where(MASK, 1.0, 0.0))
    rows, ok = patch_association(A, TASK)
    assert bool(ok) and np.asarray(rows).all()
    assert float(top_c_overlap(A, TASK)) == 1.0
    assert float(off_diagonal_overlap(A, TASK)) == 1.0


def test_an_attention_matrix_that_is_not_d_by_d_is_refused():
    with pytest.raises(
        ConfigError,
        match=r"A has shape \(16, 15\): the attention matrix of Eq. \(T\) is D x D = "
        r"\(16, 16\)",
    ):
        patch_association(jnp.ones((16, 15)), TASK)
    with pytest.raises(ConfigError, match="A has shape"):
        top_c_overlap(jnp.ones((4, 4)), TASK)


def test_parameter_metrics_refuse_a_value_vector_of_another_d():
    with pytest.raises(ConfigError, match=r"Eq. \(T\) here needs \{'A': \(16, 16\), 'v': \(4,\)\}"):
        parameter_metrics({"A": jnp.eye(16), "v": jnp.ones(8)}, TASK)  # was a dot_general TypeError


def test_a_large_diagonal_counts_in_top_c_but_not_off_it():
    # A large frozen diagonal over otherwise block-blind entries: top-C shares 1/C from the diagonal.
    A = 5.0 * jnp.eye(16) + jnp.asarray(np.where(MASK, 0.0, 1.0))
    assert float(top_c_overlap(A, TASK)) == 0.25
    assert float(off_diagonal_overlap(A, TASK)) == 0.0


def test_one_bad_entry_breaks_only_its_row():
    A = np.where(MASK, 1.0, 0.0)
    A[5, 15] = 1.5  # row 5 (set {0,1,4,5}) now prefers patch 15
    rows, ok = patch_association(jnp.asarray(A), TASK)
    assert not bool(ok)
    assert np.flatnonzero(~np.asarray(rows)).tolist() == [5]


def test_ties_and_uniform_rows_fail():
    rows, ok = patch_association(jnp.zeros((16, 16)), TASK)
    assert not bool(ok) and not np.asarray(rows).any()
    A = np.where(MASK, 1.0, 0.0)
    A[0, 2] = 1.0  # a tie between the set and an outsider is not "exactly S_l"
    assert not bool(patch_association(jnp.asarray(A), TASK)[0][0])


def test_preferring_another_set_is_not_patch_association():
    # Row i prefers the sets of the next block: a transformer without patch association (Thm 3.2).
    sets = np.asarray(TASK.sets)
    A = np.zeros((16, 16))
    for l in range(4):
        for i in sets[l]:
            A[i, sets[(l + 1) % 4]] = 2.0
    rows, ok = patch_association(jnp.asarray(A), TASK)
    assert not np.asarray(rows).any()
    assert float(top_c_overlap(jnp.asarray(A), TASK)) == 0.0


def test_within_across_means():
    A = np.where(MASK, 3.0, -1.0)
    np.fill_diagonal(A, 100.0)  # the diagonal is excluded from gamma
    within, across = within_across_means(jnp.asarray(A), TASK)
    assert float(within) == 3.0 and float(across) == -1.0


def _history(gap, cos, alpha, share, error):
    n = len(gap)
    return {
        "step": np.arange(n) * 10,
        "A_within": np.asarray(gap, float),
        "A_across": np.zeros(n),
        "cos_v_wstar": np.asarray(cos, float),
        "alpha": np.asarray(alpha, float),
        "patch_association_share": np.asarray(share, float),
        "test_error": np.asarray(error, float),
        "loss": np.asarray(error, float),
    }


# The proof sketch's story, step 0..90 (logit scale 1): v aligns at step 10 while A is still; A separates
# from step 50 (contrast 10% of its final 8.97) to 70 (half of it) with alpha nearly constant; after
# that alpha grows again and the error falls from its GLM-level plateau of 13%.
STORY = dict(
    gap=[0, 0.01, 0.02, 0.03, 0.3, 0.8, 1.5, 2.0, 2.2, 2.3],
    cos=[0.1, 0.9, 0.95, 0.96, 0.96, 0.96, 0.97, 0.98, 0.99, 0.99],
    alpha=[0.01, 0.5, 0.8, 0.9, 0.9, 0.92, 0.93, 0.95, 1.1, 1.3],
    share=[0, 0, 0, 0, 0.5, 1, 1, 1, 1, 1],
    error=[0.5, 0.14, 0.13, 0.13, 0.13, 0.12, 0.08, 0.04, 0.02, 0.01],
)


def _holds(info):
    return {f"{r['phase']} {r['statement']}": r["holds"] for r in info["statements"]}


def test_the_story_of_the_proof_sketch_is_in_order():
    info = detect_phases(_history(**STORY), logit_scale=1.0, glm_error=0.125)
    assert all(_holds(info).values()) and info["in_order"]
    assert (
        info["v_aligned_step"] == 10
        and info["separation_step"] == 50
        and info["risk_fall_step"] == 70
    )
    assert info["phases"] == {"I": [0, 50], "II": [50, 70], "III": [70, 90]}
    assert info["patch_association_step"] == 50


def test_each_phase_statement_can_fail():
    def holds(glm_error=0.125, **change):
        return _holds(
            detect_phases(_history(**{**STORY, **change}), logit_scale=1.0, glm_error=glm_error)
        )

    # A frozen (lr_A ~ 0): no phase II or III.
    frozen = holds(gap=np.full(10, 1e-9), share=np.zeros(10))
    assert frozen["II gamma - rho grows while alpha is nearly constant"] is False
    assert frozen["III the risk falls once patches are associated"] is False
    # A moves before v aligns.
    assert (
        holds(cos=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.9, 0.98, 0.99, 0.99])[
            "I A barely moves while v aligns"
        ]
        is False
    )
    # A plateau far from the GLM's error, or no GLM error to compare with.
    assert holds(glm_error=0.3)["I the phase-I model errs at the GLM's level"] is False
    assert holds(glm_error=None)["I the phase-I model errs at the GLM's level"] is None
    # ... which leaves I.b out of the order (a diverged run's unmeasured statements do not: below)
    assert detect_phases(_history(**STORY), logit_scale=1.0, glm_error=None)["in_order"]
    # alpha halves while A separates; alpha falls in phase III (what the q = 0.4 presets do).
    assert (
        holds(alpha=[0.01, 0.5, 0.8, 0.9, 0.9, 0.9, 0.6, 0.45, 0.5, 0.5])[
            "II gamma - rho grows while alpha is nearly constant"
        ]
        is False
    )
    assert (
        holds(alpha=[0.01, 0.5, 0.8, 0.9, 0.9, 0.92, 0.93, 0.95, 0.9, 0.8])["III alpha grows again"]
        is False
    )
    # The error stays on its plateau, or patch association is lost again at the end.
    assert (
        holds(error=[0.5] + [0.13] * 9)["III the risk falls once patches are associated"] is False
    )
    assert (
        holds(share=[0, 0, 0, 0, 0.5, 1, 1, 1, 1, 0.9])[
            "III the risk falls once patches are associated"
        ]
        is False
    )


def test_a_diverged_run_measures_nothing_and_is_not_in_order():
    info = detect_phases(
        _history(**{**STORY, "alpha": [0.1] * 9 + [np.nan]}), logit_scale=1.0, glm_error=0.125
    )
    assert not info["in_order"] and _holds(info)["I A barely moves while v aligns"] is None
    assert (
        patch_association_step(_history([0, 1, 1], [1, 1, 1], [1, 1, 1], [0, 1, 0.9], [1, 1, 1]))
        is None
    )
