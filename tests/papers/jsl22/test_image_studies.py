"""JSL22's image studies (posattn.papers.jsl22): the permuted table (image_tables), the cells of the
permuted sweep (permuted) and the doubling test of the recipe length (recipe_length)."""

import numpy as np
import pytest

from posattn.papers.jsl22 import image_tables, permuted
from posattn.papers.jsl22.recipe_length import doubling
from posattn.vision import sweep


def test_the_permuted_table_marks_vit_cells_of_whole_tokens_and_says_why_they_test_nothing():
    acc = lambda *v: sweep.spread([x / 100 for x in v])  # noqa: E731
    summary = {
        "image_side": 28,
        "patch_size": {"vit": 7},
        "split": "validation",
        "accuracy": {
            "vit": {"4": acc(80, 81), "7": acc(84, 84.5), "28": acc(84.2, 84.4)},
            "vgg16": {"4": acc(70, 71), "7": acc(83, 83.5), "28": acc(86, 86.5)},
        },
    }
    lines = image_tables.permuted_table(summary).splitlines()
    assert lines[0].startswith("| model (validation accuracy, %) |")
    vit, vgg = lines[2], lines[3]
    assert (
        vit.count("(*)") == 1 and "84.25 ± 0.35 (*)" in vit
    )  # g = 7: whole tokens; g = 4 cuts them
    assert "(*)" not in vgg and "no test of the ViT" in lines[-1]


def test_permuted_cells_take_their_permutation_seed_and_held_out_examples():
    c = permuted.permuted_cell_config(
        "digits",
        "tpu_configs/digits.py",
        "vit",
        4,
        1,
        quick=True,
        permutation=3,
        validation_examples=100,
    )
    assert (c.permute_block, c.permute_seed, c.seed, c.validation_examples) == (4, 3, 1, 100)


def test_the_doubling_test_compares_the_move_with_the_seed_spread_or_half_a_point():
    # moved +1.0 with seeds 0.3 apart: too short
    assert doubling([84.0, 84.3], [85.0, 85.3]) == {
        "moved": pytest.approx(1.0),
        "threshold": 0.5,
        "long_enough": False,
    }
    # moved +0.4, under half a point: long enough
    assert doubling([84.0, 84.3], [84.4, 84.7])["long_enough"]
    # noisy seeds (std 1.41) hide a move of 1.0: long enough by the spread, not by the mean alone
    out = doubling([83.0, 85.0], [85.0, 85.0])
    assert out["threshold"] == pytest.approx(np.sqrt(2)) and out["long_enough"]
    assert doubling([84.0], [84.6]) == {
        "moved": pytest.approx(0.6),
        "threshold": 0.5,
        "long_enough": False,
    }
