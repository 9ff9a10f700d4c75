"""The three phases of learning of JSL22's proof sketch (Section 4), read off a GD history.

(I)   v aligns with w* while A barely moves: the model is a generalised linear model;
(II)  the within-set entries of A (gamma) separate from the across-set ones (rho): patch association;
(III) the risk falls below the plateau of the generalised linear model.

Boundaries use thresholds relative to the run itself, so they do not depend on the scale of the
problem:
- v aligned: the first step where cos(v, w*) reaches `align` x its largest value up to the end of
  phase I, and at least `min_cos` (with finite N, v keeps a part that fits the noise, so cos(v, w*)
  plateaus below 1 in phase I and rises again in III as that part shrinks);
- end of I / start of II: the first step where gamma - rho reaches `separation` x its largest value;
- end of II / start of III: the first step after that where the risk is `loss_drop` below its value at
  the start of II.
Patch association (Definition 2.2) is an ordering of each row, so it can hold as soon as gamma - rho
is positive in every row; its step is reported beside the phases, and the run counts as "in order"
when v aligns no later than A separates, A separates before the risk falls, and patch association is
reached.
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


def _first(steps, condition, start: int = 0) -> int | None:
    hits = np.flatnonzero(condition & (steps >= start))
    return int(steps[hits[0]]) if hits.size else None


def detect_phases(history: dict, *, align: float = 0.9, min_cos: float = 0.5,
                  separation: float = 0.1, loss_drop: float = 0.2) -> dict:
    """Step boundaries of the three phases and whether they occur in order.

    Returns a dict with `v_aligned_step`, `separation_step`, `risk_fall_step`,
    `patch_association_step`, `phases` = {"I": [start, end], "II": [start, end], "III": [start, end]}
    (a phase that never starts is None; one that never ends ends at the last step) and `in_order`.
    """
    steps = np.asarray(history["step"])
    cos = np.asarray(history["cos_v_wstar"])
    gap = np.asarray(history["A_within"]) - np.asarray(history["A_across"])
    loss = np.asarray(history["loss"])
    last = int(steps[-1])

    t_sep = _first(steps, gap >= separation * gap.max()) if gap.max() > 0 else None
    phase_one = steps <= (steps[-1] if t_sep is None else t_sep)
    t_align = _first(steps, cos >= max(align * cos[phase_one].max(), min_cos))
    t_fall = None
    if t_sep is not None:
        plateau = loss[np.searchsorted(steps, t_sep)]
        t_fall = _first(steps, loss <= (1 - loss_drop) * plateau, start=t_sep + 1)
    t_pa = patch_association_step(history)

    phases = {
        "I": [0, last if t_sep is None else t_sep],
        "II": None if t_sep is None else [t_sep, last if t_fall is None else t_fall],
        "III": None if t_fall is None else [t_fall, last],
    }
    in_order = (None not in (t_align, t_sep, t_fall, t_pa)) and t_align <= t_sep < t_fall
    return {
        "v_aligned_step": t_align,
        "separation_step": t_sep,
        "risk_fall_step": t_fall,
        "patch_association_step": t_pa,
        "phases": phases,
        "in_order": bool(in_order),
    }
