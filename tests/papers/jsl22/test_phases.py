"""JSL22's phase detector (posattn.papers.jsl22.phases) on hand-built histories: the proof sketch's
story in order, each phase statement able to fail, and a diverged run measuring nothing."""

import numpy as np

from posattn.papers.jsl22.phases import detect_phases, patch_association_step


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
