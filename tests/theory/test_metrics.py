"""Patch association (Definition 2.2) and the parameter metrics on hand-built inputs."""

import jax.numpy as jnp
import numpy as np
import pytest

from posattn.errors import ConfigError
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
