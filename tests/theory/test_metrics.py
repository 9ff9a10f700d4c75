"""Patch association (Definition 2.2) and the phase detector on hand-built inputs."""
import jax.numpy as jnp
import numpy as np

from posattn.theory import grid_sets, patch_association, top_c_overlap, within_across_means
from posattn.theory.metrics import off_diagonal_overlap
from posattn.theory.data import Task, same_set_mask
from posattn.theory.phases import detect_phases, patch_association_step

TASK = Task(sets=grid_sets(16, 4), w_star=jnp.ones(4) / 2)
MASK = np.asarray(same_set_mask(TASK.sets))


def test_block_matrix_has_patch_association():
    A = jnp.asarray(np.where(MASK, 1.0, 0.0))
    rows, ok = patch_association(A, TASK)
    assert bool(ok) and np.asarray(rows).all()
    assert float(top_c_overlap(A, TASK)) == 1.0
    assert float(off_diagonal_overlap(A, TASK)) == 1.0


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


def _history(gap, cos, share, loss):
    n = len(gap)
    return {"step": np.arange(n) * 10, "A_within": np.asarray(gap, float), "A_across": np.zeros(n),
            "cos_v_wstar": np.asarray(cos, float), "patch_association_share": np.asarray(share, float),
            "loss": np.asarray(loss, float), "alpha": np.ones(n)}


def test_phases_in_order():
    h = _history(gap=[0, 0, 0.01, 0.5, 1, 2, 3], cos=[0.1, 0.8, 0.85, 0.85, 0.84, 0.84, 0.84],
                 share=[0, 0, 1, 1, 1, 1, 1], loss=[0.7, 0.3, 0.3, 0.29, 0.2, 0.05, 0.02])
    p = detect_phases(h)
    # cos(v, w*) plateaus at 0.85 (finite N): aligned at 90% of it, step 10.
    assert p["v_aligned_step"] == 10 and p["separation_step"] == 30
    assert p["risk_fall_step"] == 40 and p["patch_association_step"] == 20
    assert p["phases"] == {"I": [0, 30], "II": [30, 40], "III": [40, 60]}
    assert p["in_order"]


def test_phases_out_of_order_or_missing():
    # The risk falls before A separates: a GLM-like fit, not the three phases.
    h = _history(gap=[0, 0, 0, 0.1, 1], cos=[0.1, 0.9, 0.9, 0.9, 0.9], share=[0, 0, 0, 1, 1],
                 loss=[0.7, 0.2, 0.1, 0.1, 0.1])
    p = detect_phases(h)
    assert p["separation_step"] == 30 and p["risk_fall_step"] is None and not p["in_order"]
    assert p["phases"]["III"] is None and p["phases"]["II"] == [30, 40]
    # No patch association: not in order even if the other boundaries are.
    h = _history(gap=[0, 0.1, 0.2, 1], cos=[0.1, 0.95, 0.97, 0.97], share=[0, 0.5, 0.5, 0.5],
                 loss=[0.7, 0.3, 0.3, 0.1])
    p = detect_phases(h)
    assert p["patch_association_step"] is None and p["risk_fall_step"] == 30
    assert not p["in_order"]
    # Patch association lost again at the end does not count as reached.
    assert patch_association_step(_history([0, 1, 1], [1, 1, 1], [0, 1, 0.9], [1, 1, 1])) is None
