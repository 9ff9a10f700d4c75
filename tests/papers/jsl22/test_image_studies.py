"""JSL22's image studies (posattn.papers.jsl22): the permuted table (image_tables), the cells of the
permuted sweep (permuted), Figure 7's verdict (attention_comparison) and the doubling test of the
recipe length (recipe_length)."""

import numpy as np
import pytest

from posattn import configs
from posattn.errors import ConfigError
from posattn.papers.jsl22 import attention_comparison, image_tables, permuted
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


def test_per_seed_permutations_give_each_permuted_cell_its_seeds_permutation_and_the_unpermuted_none():
    config = configs.load_config("tpu_configs/permuted.py", "digits,quick", permuted.SCHEMA)
    config.update(models="vit,vgg", seeds=3, cnn_seeds=2, permutation_per_seed=True)
    keys = list(permuted.cells(config))
    assert [k for k in keys if k[0] == "vit" and k[1] == 2] == [("vit", 2, s, s) for s in range(3)]
    assert [k for k in keys if k[1] == 8] == [("vit", 8, s, 0) for s in range(3)] + [
        ("vgg16", 8, s, 0) for s in range(2)
    ]
    config.permutations = 2
    with pytest.raises(ConfigError, match="leave permutations at 1"):
        permuted.cells(config)


def test_the_drop_contrast_is_the_cnns_drop_minus_the_vits_and_its_verdict_needs_both_intervals():
    acc = lambda *v: sweep.spread([x / 100 for x in v])  # noqa: E731
    accuracy = {
        "vit": {
            "2": acc(84.0, 84.4, 83.9),
            "4": acc(84.6, 84.1, 84.3),
            "7": acc(84.2),
            "28": acc(84.5, 84.2, 84.4),
        },
        # g = 2: the CNN loses 6 points, the ViT 0.3; g = 4: both lose the same (no verdict can be drawn)
        "vgg16": {
            "2": acc(86.1, 86.6, 85.9),
            "4": acc(91.9, 92.3, 91.7),
            "7": acc(90.0, 90.2),
            "28": acc(92.0, 92.3, 92.1),
        },
    }
    out = permuted.drop_contrasts(accuracy, 28)
    assert set(out) == {"vgg16"} and set(out["vgg16"]) == {
        "2",
        "4",
    }  # g = 7: one ViT run, no interval
    two = out["vgg16"]["2"]
    assert two["value"] == pytest.approx((92.1333 - 86.2) - (84.3667 - 84.1), abs=1e-3)
    assert two["verdict"] == "reproduced" and out["vgg16"]["4"]["verdict"] == "not decidable"
    flipped = {
        "vit": accuracy["vgg16"],
        "vgg16": accuracy["vit"],
    }  # the ViT loses, the CNN does not
    assert permuted.drop_contrasts(flipped, 28)["vgg16"]["2"]["verdict"] == "not reproduced"
    table = image_tables.permuted_table(
        {"image_side": 28, "accuracy": accuracy, "drop_contrast": out}
    )
    assert "| VGG-16 | 2 | +5.67 |" in table and table.endswith("| not decidable |")


@pytest.mark.parametrize(
    "welch, boot, verdict",
    [
        # the init ablation's rows as run (docs/image_results.md): N(0, 0.02^2), N(0, 0.125^2), N(0, 1)
        ((0.04, 0.70), (0.17, 0.57), "reproduced"),
        ((-0.54, 1.13), (-0.17, 0.77), "not decidable"),  # Welch alone leaves the band
        ((0.18, 2.83), (1.11, 2.09), "not decidable"),
        (
            (1.2, 2.8),
            (1.4, 2.5),
            "not reproduced: both intervals above [-1, +1] (positional better)",
        ),
        (
            (-3.0, -1.1),
            (-2.5, -1.3),
            "not reproduced: both intervals below [-1, +1] (positional worse)",
        ),
        ((-0.5, 1.2), (-0.3, 0.9), "not decidable"),  # one interval leaves the band
        ((1.1, 2.0), (0.9, 1.8), "not decidable"),  # both above 0, only one wholly above +1
    ],
)
def test_figure_7s_verdict_is_both_intervals_inside_or_both_outside_one_side_of_a_point(
    welch, boot, verdict
):
    # the criterion of docs/image_results.md, written out independently of bootstrap.agreed_sign
    inside = all(-1 < lo and hi < 1 for lo, hi in (welch, boot))
    above, below = all(lo > 1 for lo, _ in (welch, boot)), all(hi < -1 for _, hi in (welch, boot))
    expected = "reproduced" if inside else "not reproduced" if above or below else "not decidable"
    got = attention_comparison.comparable_verdict(
        {"mean": 0.0, "welch_95": list(welch), "bootstrap_95": list(boot)}
    )
    assert got.startswith(verdict) and got.split(":")[0] == expected
    assert attention_comparison.comparable_verdict({"mean": 0.4, "stderr": 0.0}) is None  # one seed


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
