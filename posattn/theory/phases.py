"""The three phases of learning of JSL22's proof sketch (Section 4), read off a GD history.

(I)   v aligns with w* while A barely moves: the model is a generalised linear model;
(II)  the within-set entries of A (gamma) separate from the across-set ones (rho): patch association;
(III) alpha = <v, w*> grows again and the risk falls.

Boundaries are found with thresholds relative to the run itself, so they do not depend on the scale
of the problem:
- v aligned: the first step with cos(v, w*) >= `align_cos`;
- end of I / start of II: the first step where gamma - rho reaches `separation` x its largest value;
- end of II / start of III: the first step from which every row of A has patch association for good
  (Definition 2.2);
- III is confirmed when, after it starts, the risk falls by `loss_drop` of its value there. (alpha
  need not grow again here: with the factor D of Eq. (T), concentrating attention on a set alone
  multiplies the pre-activations by D/C.)
"""
import numpy as np


def patch_association_step(history: dict) -> int | None:
    """First history step from which all rows keep patch association to the end (None if never)."""
    ok = np.asarray(history["patch_association_share"]) >= 1.0
    if not ok[-1]:
        return None
    last_fail = np.flatnonzero(~ok)
    first = 0 if last_fail.size == 0 else last_fail[-1] + 1
    return int(history["step"][first])


def _first(steps, condition) -> int | None:
    hits = np.flatnonzero(condition)
    return int(steps[hits[0]]) if hits.size else None


def detect_phases(history: dict, *, align_cos: float = 0.9, separation: float = 0.1,
                  loss_drop: float = 0.2) -> dict:
    """Step boundaries of the three phases and whether they occur in order.

    Returns a dict with `v_aligned_step`, `separation_step`, `patch_association_step`,
    `phases` = {"I": [start, end], "II": [start, end], "III": [start, end]} (an end of None means the
    phase never ended, a missing phase is None) and `in_order`: v aligns no later than the entries
    separate, which is no later than patch association, and the risk falls in III.
    """
    steps = np.asarray(history["step"])
    gap = np.asarray(history["A_within"]) - np.asarray(history["A_across"])
    loss = np.asarray(history["loss"])

    t_align = _first(steps, np.asarray(history["cos_v_wstar"]) >= align_cos)
    t_sep = _first(steps, gap >= separation * gap.max()) if gap.max() > 0 else None
    t_pa = patch_association_step(history)
    last = int(steps[-1])

    risk_falls = False
    if t_pa is not None:
        i = int(np.searchsorted(steps, t_pa))
        risk_falls = bool(loss[-1] <= (1 - loss_drop) * loss[i])
    phases = {
        "I": [0, t_sep],
        "II": None if t_sep is None else [t_sep, t_pa],
        "III": None if t_pa is None else [t_pa, last],
    }
    in_order = (t_align is not None and t_sep is not None and t_pa is not None
                and t_align <= t_sep <= t_pa and risk_falls)
    return {
        "v_aligned_step": t_align,
        "separation_step": t_sep,
        "patch_association_step": t_pa,
        "risk_falls_in_III": risk_falls,
        "phases": phases,
        "in_order": bool(in_order),
    }
