"""LWLC23's deeper-ViT study on token grids (posattn.papers.lwlc23): a pre-trained cell starts from
the pre-trained parameters, the Fashion-MNIST config plans every run and each is valid
(grid_experiment), and the report's intervals over seeds and slope verdict (grid_report)."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn import cli
from posattn.errors import ConfigError
from posattn.papers.lwlc23 import grid_experiment, grid_report
from posattn.vision import train, warm_start
from posattn.vision.data import datasets
from posattn.vision.setup import resolve

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.mark.slow  # (seconds of training: `pytest -m slow`, as .ci/run)
def test_a_pretrained_cell_starts_from_the_pretrained_parameters(tmp_path, monkeypatch):
    base = cli.load_config(
        os.path.join(ROOT, "tpu_configs", "token_grid.py"), "quick", grid_experiment.SCHEMA
    )
    del base["grid"]
    cell = grid_experiment.cell_config(
        base,
        family="digit_grid",
        R=6,
        attention="vanilla",
        seed=0,
        steps=1,
        init_from=str(tmp_path / "pre"),
    )
    pre = grid_experiment.pretrain_config(cell, steps=2)
    assert (pre.dataset, pre.init_from, pre.seed, pre.total_steps) == ("digits", "", cell.seed, 2)
    # the pre-trained run's parameters (its model reads one 8 x 8 digit as one token, 10 classes), drawn
    # far from any initialisation; the end-to-end pre-training is the slow binary test's
    model = resolve(pre, 1).model
    shapes = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros((1, 8, 8, 1)))["params"]
    )
    rng = np.random.default_rng(0)
    want = jax.tree.map(lambda s: jnp.asarray(3 + rng.normal(size=s.shape), jnp.float32), shapes)
    monkeypatch.setattr(
        warm_start, "load", lambda workdir: want if workdir == cell.init_from else None
    )
    state, _ = train.train(cell, str(tmp_path / "cell"), devices=jax.devices()[:1])
    got = state["params"]
    # one step of AdamW moves a parameter by about lr = 1e-3 at most; a fresh one lies ~3 away
    for path in (
        ("embedding", "kernel"),
        ("block_0", "attn", "qkv", "kernel"),
        ("block_1", "mlp", "fc2", "kernel"),
    ):
        a, b = got, want
        for key in path:
            a, b = a[key], b[key]
        np.testing.assert_allclose(a, b, atol=1e-2, err_msg="/".join(path))
    np.testing.assert_allclose(
        got["pos_embedding"], np.repeat(want["pos_embedding"], 9, 0), atol=1e-2
    )
    assert (
        want["head"]["kernel"].shape[-1] == 10 and np.abs(got["head"]["kernel"]).max() < 1e-2
    )  # fresh, 2 classes
    assert json.loads((tmp_path / "cell" / "config.json").read_text())["init_from"] == str(
        tmp_path / "pre"
    )
    cell.model.variant = "XS/8"  # another width than the pre-trained test ViT's
    with pytest.raises(ConfigError, match="init_from: the pre-trained parameters do not fit"):
        train.train(cell, str(tmp_path / "other"), devices=jax.devices()[:1])
    assert not (tmp_path / "other").exists()  # refused before the workdir is touched


def test_the_fashion_config_plans_every_run_and_each_is_valid(monkeypatch, tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    monkeypatch.setenv("POSATTN_FASHION_MNIST_DIR", str(tmp_path))
    path = os.path.join(ROOT, "tpu_configs", "token_grid.py")
    c = cli.load_config(path, "fashion", grid_experiment.SCHEMA)
    Rs, kinds, starts, seeds, ks = grid_experiment.check_grid(c.grid)
    assert (Rs, kinds, starts, seeds, ks) == (
        [5, 6, 7, 8, 9],
        ["vanilla", "positional"],
        ["scratch", "pretrained"],
        [0, 1, 2, 3, 4],
        [0, 1, 2, 3, 4],
    )
    base = c.copy_and_resolve_references()
    del base["grid"]
    pretrains, cells = grid_experiment.plan(base, c.grid, "/w", Rs, kinds, starts, seeds)
    assert len(pretrains) == 10 and len(cells) == 100
    assert list(cells)[:6] == [
        "scratch_vanilla_R5_s0",
        "scratch_vanilla_R6_s0",
        "scratch_vanilla_R7_s0",
        "scratch_vanilla_R8_s0",
        "scratch_vanilla_R9_s0",
        "pretrained_vanilla_R5_s0",
    ]
    cell = cells["pretrained_positional_R7_s3"]
    assert (cell.dataset, cell.seed, cell.model.attention, cell.init_from) == (
        "fashion_grid/7",
        3,
        "positional",
        "/w/pretrain_positional_s3",
    )
    assert cells["scratch_positional_R7_s3"].init_from == ""
    pre = pretrains["pretrain_positional_s3"]
    assert (pre.dataset, pre.total_steps, pre.seed, pre.model.variant) == (
        "fashion_mnist",
        940,
        3,
        "XS/28",
    )
    try:
        with tfds.testing.mock_data(num_examples=200):  # (every class among the items)
            for config in cells.values():
                grid_experiment.check_cell(
                    config
                )  # one token per item: patch 28 of the 84 x 84 grid
    finally:
        datasets.family_arrays.cache_clear()  # the mock's grids must not outlive the mock
    quick = cli.load_config(path, "fashion,quick", grid_experiment.SCHEMA)
    assert (quick.model.variant, quick.grid.steps, quick.grid.pretrain_steps) == ("test/28", 60, 20)
    for field, value, message in (
        ("starts", "pretrained,bogus", "grid.starts: unknown 'bogus'"),
        ("pretrain_steps", 0, "a pretrained start needs pre-training steps"),
        ("seeds", (), "grid.seeds=.*give integers"),
    ):
        bad = c.copy_and_resolve_references()
        bad.grid[field] = value
        with pytest.raises(ConfigError, match=message):
            grid_experiment.check_grid(bad.grid)


def test_the_report_gives_intervals_over_seeds_and_the_slope_verdict():
    def cell(R, seed, acc, start="scratch"):
        return {
            "R": R,
            "alpha_star": R / 9,
            "alpha_conf": 0.0,
            "theorem_margin": True,
            "attention": "vanilla",
            "start": start,
            "seed": seed,
            "test_accuracy": acc,
            "test_loss": 1 - acc,
            "relevant_mass": 0.5,
            "chance_mass": R / 9,
            "ks": [0, 1],
            "accuracy_attention_pruned": [acc, acc],
            "accuracy_random_pruned": [acc, acc - 0.01],
        }

    rising = [cell(R, s, 0.5 + 0.05 * R + 0.01 * s) for R in (5, 7, 9) for s in range(3)]
    flat = [
        cell(R, s, 0.9 + 0.01 * ((R + s) % 3 - 1), "pretrained")
        for R in (5, 7, 9)
        for s in range(3)
    ]
    curves = grid_report.curves(rising + flat)
    assert list(curves) == ["vanilla, from scratch", "vanilla, pre-trained"]
    mean, low, high = curves["vanilla, from scratch"][0]["accuracy_interval"]
    # seeds 0.75, 0.76, 0.77: mean 0.76, half-width t(0.975, 2) 0.01 / sqrt(3) = 4.303 * 0.00577
    assert mean == pytest.approx(0.76) and high - mean == pytest.approx(
        4.303 * 0.01 / np.sqrt(3), rel=1e-3
    )
    assert grid_report.slope_verdict(curves["vanilla, from scratch"])[1].startswith(
        "rises with alpha_*"
    )
    assert grid_report.slope_verdict(curves["vanilla, pre-trained"])[1].startswith("not resolved")
    assert "0.760 [0.735, 0.785]" in grid_report.accuracy_table(rising)
    # pre-trained minus scratch, paired by seed: +0.14 [+0.097, +0.183] at R = 5, +0.04 [-0.003, +0.083] at 7
    (gain,) = grid_report.start_rows(rising + flat)
    assert (
        "R = 5: +0.140 [+0.097, +0.183]" in gain["ours"]
        and gain["verdict"] == "better at R = 5 (interval above 0)"
    )
