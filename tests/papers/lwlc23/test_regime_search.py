"""Issue 50's search: the screening grid's cells, with and without amendment 2's confusion tokens."""

import math

import jax
import numpy as np

from posattn.papers.lwlc23 import regime_search as rs
from posattn.shallow import grid


def test_without_confusion_the_cells_are_the_product_the_search_always_ran():
    s = rs.Setting.of("A1")
    want, _ = grid.product_cells(s.tokens, s.model, s.sgd, n_star=s.n_stars(), N=rs.NS)
    got = rs.screening_cells(s)
    for name, a, b in zip(grid.Cell._fields, got, want):
        if a is not None or b is not None:
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_amendment_2_puts_theorem_1s_largest_confusion_count_in_every_row():
    s = rs.Setting.of("H1")
    assert s.n_stars() == [16, 18, 20, 24, 30]
    assert s.n_confs() == [2, 3, 3, 4, 5]
    assert all(n >= 2 * math.e * c for n, c in zip(s.n_stars(), s.n_confs()))
    cells = rs.screening_cells(s)
    rows = np.asarray(cells.n_conf).reshape(len(s.n_stars()), len(rs.NS))
    np.testing.assert_array_equal(rows[:, 0], s.n_confs())
    assert (rows == rows[:, :1]).all() and jax.tree.leaves(cells)[0].shape[0] == 5 * len(rs.NS)
