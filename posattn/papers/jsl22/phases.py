"""The three phases of JSL22's proof sketch (Section 4), as statements measured on a GD history.

The proof sketch says:
(I)   A stays approximately constant and only v moves; alpha = <v, w*> grows to a threshold, and the
      model is then a generalised linear model, which does not generalise (Theorem 3.1);
(II)  with alpha large, the attention starts to move: gamma (within-set entries of A) grows more than
      rho (across-set entries): patch association;
(III) with patch association established, alpha grows again and the risk goes to o(1).

Each statement below is a measurement with a threshold fixed here, not fitted to a run
(docs/theory_results.md, "Phases as measurements", gives the reasons and the runs). How far A has moved
is read off the attention contrast kappa = exp((gamma - rho) / sqrt(d)) - 1, the extra softmax weight a
within-set key gets over an across-set key (0 at a0 I), so it does not depend on the scale of A.
Boundaries:
- v aligned: the first step where cos(v, w*) reaches ALIGN of its final value (the direction, so that
  neither A's movement nor alpha's later changes of scale enter); v never aligns if that final value
  is below MIN_COS;
- phase II starts where kappa first reaches II_START of its final value, phase III where it first
  reaches III_START of it; a run whose final kappa is below SEPARATED has no phase II or III.
Statements:
- I.a  A barely moves while v aligns: v aligns, and kappa at alignment <= STILL_A x its final value
       (x SEPARATED when the final value is below it);
- I.b  the model of phase I is at the GLM's level: the median test error between alignment and the
       start of II within GLM_BAND (relative) of the best GLM's error (needs that error: Assumption 1
       with orthogonal noise);
- II   gamma - rho grows while alpha is nearly constant: A separates (final kappa >= SEPARATED) and
       alpha changes by at most STILL_ALPHA of its value over phase II;
- III.a the risk falls after patch association: patch association is reached and kept, and the final
       test error is at most RISK_FALL x the phase-I plateau;
- III.b alpha grows again in phase III.
A run is "in order" when every statement holds.
"""

import numpy as np

ALIGN = 0.9
MIN_COS = 0.5
II_START = 0.1
III_START = 0.5
SEPARATED = 0.5  # a within-set key weighs at least 1.5x an across-set key at the end
STILL_A = 0.1
GLM_BAND = 0.25
STILL_ALPHA = 0.25
RISK_FALL = 0.5


def patch_association_step(history: dict) -> int | None:
    """First history step from which all rows keep patch association to the end (None if never)."""
    ok = np.asarray(history["patch_association_share"]) >= 1.0
    if not ok[-1]:
        return None
    last_fail = np.flatnonzero(~ok)
    first = 0 if last_fail.size == 0 else last_fail[-1] + 1
    return int(history["step"][first])


def attention_contrast(history: dict, logit_scale: float) -> np.ndarray:
    """kappa = exp(logit_scale (gamma - rho)) - 1 over the history (logit_scale = 1/sqrt(d) in Eq. (T))."""
    gap = np.asarray(history["A_within"], np.float64) - np.asarray(history["A_across"], np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.expm1(logit_scale * gap)


def _first(condition) -> int | None:
    hits = np.flatnonzero(condition)
    return int(hits[0]) if hits.size else None


def _statement(phase, name, paper, measured, holds) -> dict:
    return {
        "phase": phase,
        "statement": name,
        "paper": paper,
        "measured": measured,
        "holds": None if holds is None else bool(holds),
    }


def detect_phases(history: dict, *, logit_scale: float, glm_error: float | None = None) -> dict:
    """Phase boundaries and JSL22's phase statements measured on `history` (module docstring).

    history: the `gd.fit` history (step, loss, test_error, alpha, cos_v_wstar, A_within, A_across,
      patch_association_share). logit_scale: the factor of A in the softmax (1/sqrt(d), or 1 without
      the temperature). glm_error: the best GLM's error on the same data (None: I.b is not measured).
    Returns {"phases": {"I", "II", "III": [start, end] or None}, "v_aligned_step", "separation_step",
    "risk_fall_step" (start of III), "patch_association_step", "statements": [rows], "in_order"}.
    """
    step = np.asarray(history["step"])
    alpha = np.asarray(history["alpha"], np.float64)
    cos = np.asarray(history["cos_v_wstar"], np.float64)
    error = np.asarray(history["test_error"], np.float64)
    kappa = attention_contrast(history, logit_scale)
    last = len(step) - 1
    finite = np.isfinite(alpha).all() and np.isfinite(cos).all() and np.isfinite(kappa).all()
    i_align = _first(cos >= ALIGN * cos[-1]) if finite and cos[-1] >= MIN_COS else None
    final = kappa[-1] if finite else np.nan
    separated = bool(final >= SEPARATED)
    i_II = _first(kappa >= II_START * final) if separated else None
    i_III = _first(kappa >= III_START * final) if separated else None
    t_pa = patch_association_step(history) if finite else None
    at = lambda i: None if i is None else int(step[i])

    rows = []
    # A run whose v never aligned fails I.a; a diverged run measures nothing.
    # Measured against SEPARATED when A ends below it: a share of a final contrast near 0 says nothing.
    share = None if i_align is None else float(kappa[i_align] / max(final, SEPARATED))
    rows.append(
        _statement(
            "I",
            "A barely moves while v aligns",
            "A approximately constant in phase I",
            {
                "v_aligned_step": at(i_align),
                "contrast_at_alignment": None if i_align is None else float(kappa[i_align]),
                "final_contrast": float(final),
                "share_of_final": share,
                "threshold": STILL_A,
            },
            None if not finite else (share is not None and share <= STILL_A),
        )
    )
    end_I = i_II if i_II is not None else last
    plateau = (
        float(np.median(error[i_align : max(end_I, i_align) + 1])) if i_align is not None else None
    )
    rel = None if plateau is None or not glm_error else plateau / glm_error - 1
    glm_row = _statement(
        "I",
        "the phase-I model errs at the GLM's level",
        "a GLM, which errs >= 1/8 (Theorem 3.1)",
        {
            "plateau_test_error": plateau,
            "glm_error": glm_error,
            "relative_gap": rel,
            "threshold": GLM_BAND,
        },
        None if rel is None else abs(rel) <= GLM_BAND,
    )
    rows.append(glm_row)
    if separated and i_II is not None and i_III is not None:
        alpha_change = float(alpha[i_III] / alpha[i_II] - 1)
        gap_change = float(kappa[i_III] / kappa[i_II] - 1) if kappa[i_II] > 0 else None
    else:
        alpha_change = gap_change = None
    rows.append(
        _statement(
            "II",
            "gamma - rho grows while alpha is nearly constant",
            "attention moves, alpha large",
            {
                "separated": separated,
                "contrast_relative_change": gap_change,
                "alpha_relative_change": alpha_change,
                "threshold": STILL_ALPHA,
            },
            separated and alpha_change is not None and abs(alpha_change) <= STILL_ALPHA,
        )
    )
    fall = None if plateau is None or t_pa is None else float(error[-1] / max(plateau, 1e-12))
    rows.append(
        _statement(
            "III",
            "the risk falls once patches are associated",
            "o(1) risk (Theorems 4.1, 4.2)",
            {
                "patch_association_step": t_pa,
                "final_test_error": float(error[-1]),
                "final_over_plateau": fall,
                "threshold": RISK_FALL,
            },
            fall is not None and separated and fall <= RISK_FALL,
        )
    )
    alpha_III = None if i_III is None else float(alpha[-1] / alpha[i_III] - 1)
    rows.append(
        _statement(
            "III",
            "alpha grows again",
            "alpha grows again in phase III",
            {
                "alpha_at_start_of_III": None if i_III is None else float(alpha[i_III]),
                "final_alpha": float(alpha[-1]),
                "alpha_relative_change": alpha_III,
            },
            alpha_III is not None and alpha_III > 0,
        )
    )

    return {
        "phases": {
            "I": [0, at(end_I)],
            "II": None if i_II is None else [at(i_II), at(i_III if i_III is not None else last)],
            "III": None if i_III is None else [at(i_III), at(last)],
        },
        "v_aligned_step": at(i_align),
        "separation_step": at(i_II),
        "risk_fall_step": at(i_III),
        "patch_association_step": t_pa,
        "statements": rows,
        # every statement holds; I.b is left out where it has no reference (glm_error None: data other
        # than Assumption 1's with orthogonal noise), while any other one not measured (a diverged run)
        # breaks the order
        "in_order": all(r["holds"] for r in rows if not (r is glm_row and glm_error is None)),
    }


VERDICTS = {True: "holds", False: "fails", None: "n/a"}


def format_measured(measured: dict) -> str:
    """A statement's numbers as "name value, ..." (3 significant digits)."""
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)  # noqa: E731
    return ", ".join(f"{k.replace('_', ' ')} {fmt(v)}" for k, v in measured.items())


def statement_lines(info: dict) -> list[str]:
    """One line per statement: verdict, phase, statement and its numbers."""
    return [
        f"{VERDICTS[r['holds']]:>5}  {r['phase']:>3}  {r['statement']}: {format_measured(r['measured'])}"
        for r in info["statements"]
    ]
