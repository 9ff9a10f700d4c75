"""LWLC23's deeper-ViT experiment: the token-grid datasets ("digit_grid/R", "fashion_grid/R"), the
dataset registry, the pre-trained start (`warm_start`), the ViT's token removal (keep_BxN) and a
tiny end-to-end run of experiments.token_grid (the study's own tests:
tests/papers/lwlc23/test_grid_study.py)."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn import cli, run_record
from posattn.analysis.slot_attention import prune_least_attended, relevant_mass
from posattn.errors import ConfigError
from posattn.papers.lwlc23 import grid_experiment
from posattn.vision import config as config_lib
from posattn.vision import resume, warm_start
from posattn.vision.data import channel_stats, datasets, token_grid
from posattn.vision.data import split as split_lib
from posattn.vision.models import vit
from tests import envs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DISCRIMINATIVE = (3, 8)


def _compose(R, seed=0, num_grids=60):
    images, labels = datasets.open_split("digits", "train").read(np.arange(200))
    return token_grid.compose(
        images,
        labels,
        R=R,
        discriminative=DISCRIMINATIVE,
        num_classes=10,
        num_grids=num_grids,
        seed=seed,
    ), images


@pytest.mark.parametrize("R", token_grid.R_VALUES)
def test_slot_fractions_and_majority_label(R):
    g, base = _compose(R)
    rel, conf, irr = token_grid.slot_counts(R)
    assert (rel, conf) == (R, (9 - R) // 2) and rel + conf + irr == 9
    counts = np.stack([(g.slot_types_NxS == t).sum(1) for t in range(3)], 1)
    assert (counts == [rel, conf, irr]).all()
    label_class = np.asarray(DISCRIMINATIVE)[g.labels_N]
    other_class = np.asarray(DISCRIMINATIVE)[1 - g.labels_N]
    types, classes = g.slot_types_NxS, g.slot_classes_NxS
    assert (classes[types == token_grid.RELEVANT] == np.repeat(label_class, rel)).all()
    assert (classes[types == token_grid.CONFUSION] == np.repeat(other_class, conf)).all()
    assert not np.isin(classes[types == token_grid.IRRELEVANT], DISCRIMINATIVE).any()
    # the label is the majority of the discriminative slots, and labels are balanced
    votes = np.stack([(classes == c).sum(1) for c in DISCRIMINATIVE], 1)
    np.testing.assert_array_equal(g.labels_N, votes.argmax(1))
    assert g.labels_N.sum() == len(g.labels_N) // 2
    # slot s of grid n (row-major) is a base image of its slot class
    n, s = 7, 5
    tile = g.images_NxHxWxC[n, 8 * (s // 3) : 8 * (s // 3) + 8, 8 * (s % 3) : 8 * (s % 3) + 8]
    assert any(
        (tile == im).all()
        for im in base[
            np.asarray(datasets.open_split("digits", "train").read(np.arange(200))[1])
            == classes[n, s]
        ]
    )


def test_theorem_margin_holds_from_R_6():
    assert [token_grid.meets_theorem_margin(R) for R in token_grid.R_VALUES] == [
        False,
        True,
        True,
        True,
        True,
    ]


def test_grids_are_deterministic_in_the_seed():
    a, _ = _compose(6, seed=1)
    b, _ = _compose(6, seed=1)
    c, _ = _compose(6, seed=2)
    for field in ("images_NxHxWxC", "labels_N", "slot_types_NxS"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.slot_types_NxS, c.slot_types_NxS)


def _tiles(images_NxHxWxC):
    n = len(images_NxHxWxC)
    return images_NxHxWxC.reshape(n, 3, 8, 3, 8).transpose(0, 1, 3, 2, 4).reshape(-1, 64)


def test_train_grids_use_only_train_digits_and_test_grids_only_test_digits():
    info = datasets.dataset_info("digit_grid/7")
    assert (info.num_classes, info.image_shape) == (2, (24, 24, 1))
    rows = lambda a: {r.tobytes() for r in a}
    digits = {
        split: rows(
            datasets.open_split("digits", split)
            .read(np.arange(datasets.open_split("digits", split).num_examples))[0]
            .reshape(-1, 64)
        )
        for split in ("train", "test")
    }
    for split, other in (("train", "test"), ("test", "train")):
        split_data = datasets.open_split("digit_grid/7", split)
        assert split_data.num_examples == getattr(info, f"num_{split}")
        tiles = rows(_tiles(split_data.read(np.arange(split_data.num_examples))[0]))
        assert tiles <= digits[split]
        assert not tiles & (digits[other] - digits[split])  # no image only the other split holds
    g = grid_experiment.slot_grids("digit_grid/7", "test")
    assert g.slot_types_NxS.shape == (info.num_test, 9)
    np.testing.assert_array_equal(
        g.images_NxHxWxC, split_data.read(np.arange(info.num_test))[0]
    )  # the grids read


def test_registry_serves_families_and_refuses_unknown_names():
    assert datasets.num_classes("digit_grid/5") == 2
    assert datasets.native_image_size("digit_grid/9") == 24
    assert datasets.image_shape("digit_grid/9", 12) == (12, 12, 1)
    for bad in ("digit_grid/4", "digit_grid/x", "digit_grid"):
        with pytest.raises(ConfigError, match=r"digit_grid/R \(R = 5..9\)"):
            datasets.num_classes(bad)
    with pytest.raises(
        ConfigError, match=r"unknown dataset 'no_such_set': expected one of digits, .*digit_grid/R"
    ):
        datasets.dataset_info("no_such_set")
    with pytest.raises(ConfigError, match="not a dataset of token grids"):
        grid_experiment.slot_grids("digits", "test")


def test_grids_of_a_tfds_base_under_mock():
    tfds = pytest.importorskip("tensorflow_datasets")
    try:
        with tfds.testing.mock_data(num_examples=120):
            g = grid_experiment.slot_grids("cifar10_grid/7", "test")
            assert (
                g.images_NxHxWxC.shape == (2_000, 96, 96, 3)
                and datasets.native_image_size("cifar10_grid/7") == 96
            )
            base = datasets.open_split("cifar10", "test")
            images, labels = base.read(np.arange(base.num_examples))
            n, s = 3, 4  # slot s of grid n is a base image of its class
            tile = g.images_NxHxWxC[n, 32:64, 32:64]
            assert any((tile == im).all() for im in images[labels == g.slot_classes_NxS[n, s]])
    finally:
        datasets.family_arrays.cache_clear()  # the mock's grids must not outlive the mock


# ------------------------------------------------------------------------------ Fashion-MNIST grids


class _SmallBase:
    """A stand-in for Fashion-MNIST: 28 x 28 items, 10 classes, 4 per class; item i of class c is filled
    with the value 10 c + i, so a tile names its class and item."""

    name, num_classes, native_shape, stats = "small", 10, (28, 28, 1), None

    def open_split(self, split, image_size):
        labels = np.repeat(np.arange(10, dtype=np.int32), 4)
        images = np.broadcast_to(
            (10 * labels + np.tile(np.arange(4), 10)).astype(np.uint8)[:, None, None, None],
            (40, 28, 28, 1),
        ).copy()
        return split_lib.in_memory(images, labels)


@pytest.mark.parametrize("R", [5, 6, 8])
def test_fashion_grids_hold_the_slot_counts_and_the_majority_label(R):
    family = datasets.FAMILIES["fashion_grid"]
    assert (family.base, family.discriminative) == (
        "fashion_mnist",
        (0, 6),
    )  # T-shirt/top against shirt
    g = family.grids(f"fashion_grid/{R}", "test", _SmallBase())
    assert g.images_NxHxWxC.shape == (family.num_test, 84, 84, 1)
    # each 28 x 28 tile is one item, uniform in value: its class is value // 10
    tiles = (
        g.images_NxHxWxC.reshape(-1, 3, 28, 3, 28).transpose(0, 1, 3, 2, 4).reshape(-1, 9, 28 * 28)
    )
    assert (tiles == tiles[..., :1]).all()
    np.testing.assert_array_equal(tiles[..., 0] // 10, g.slot_classes_NxS)
    rel, conf, irr = token_grid.slot_counts(R)
    counts = np.stack([(g.slot_types_NxS == t).sum(1) for t in range(3)], 1)
    assert (counts == [rel, conf, irr]).all()
    label_class = np.where(g.labels_N == 1, 6, 0)[:, None]
    other_class = np.where(g.labels_N == 1, 0, 6)[:, None]
    types, classes = g.slot_types_NxS, g.slot_classes_NxS
    assert ((classes == label_class) == (types == token_grid.RELEVANT)).all()
    assert ((classes == other_class) == (types == token_grid.CONFUSION)).all()
    assert set(np.unique(classes[types == token_grid.IRRELEVANT])) <= {1, 2, 3, 4, 5, 7, 8, 9}
    assert g.labels_N.sum() == len(g.labels_N) // 2
    for t in range(
        3
    ):  # every slot type present takes every position: a position says nothing about a type
        assert (types == t).any(0).all() == bool(counts[0, t])


def test_fashion_grids_are_registered_with_the_items_statistics(monkeypatch, tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    monkeypatch.setenv(
        "POSATTN_FASHION_MNIST_DIR", str(tmp_path)
    )  # the same with or without the IDX files
    with tfds.testing.mock_data(num_examples=20):
        grid, items = datasets.get("fashion_grid/7"), datasets.get("fashion_mnist")
    assert (grid.num_classes, grid.native_shape) == (2, (84, 84, 1))
    # a model pre-trained on the items sees its grids' inputs normalised alike
    assert grid.stats == items.stats == channel_stats.KNOWN["fashion_mnist"]
    assert (
        datasets.get("digit_grid/7").stats is None
    )  # the digits have none: computed from each split


# ------------------------------------------------------------------------------ the pre-trained start


def test_transfer_copies_every_leaf_spreads_P_over_the_grid_and_keeps_a_fresh_head():
    rng = np.random.default_rng(0)
    leaf = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)
    pre = {
        "embedding": {"kernel": leaf(4, 4, 1, 8)},
        "pos_embedding": leaf(1, 8),
        "head": {"kernel": leaf(8, 10), "bias": leaf(10)},
    }
    fresh = {
        "embedding": {"kernel": leaf(4, 4, 1, 8)},
        "pos_embedding": leaf(9, 8),
        "head": {"kernel": jnp.zeros((8, 2)), "bias": jnp.zeros(2)},
    }
    out = warm_start.transfer(fresh, pre)
    np.testing.assert_array_equal(out["embedding"]["kernel"], pre["embedding"]["kernel"])
    np.testing.assert_allclose(
        out["pos_embedding"], np.repeat(pre["pos_embedding"], 9, 0), rtol=1e-6
    )
    np.testing.assert_array_equal(out["head"]["kernel"], fresh["head"]["kernel"])
    # a 2 x 2 grid after a CLS row, per block (L, T, D): the CLS row kept, the corners kept by the resize
    P = leaf(2, 5, 3)
    big = warm_start.resample_pos_embedding(P, 17)
    assert big.shape == (2, 17, 3)
    np.testing.assert_array_equal(big[:, 0], P[:, 0])
    np.testing.assert_allclose(
        big[:, 1:].reshape(2, 4, 4, 3)[:, ::3, ::3], P[:, 1:].reshape(2, 2, 2, 3), rtol=1e-5
    )
    # another width, or a leaf one side lacks, is refused, naming it
    with pytest.raises(
        ConfigError, match=r"embedding/kernel \(shape \(4, 4, 1, 8\) pre-trained, \(4, 4, 1, 6\)"
    ):
        warm_start.transfer({**fresh, "embedding": {"kernel": leaf(4, 4, 1, 6)}}, pre)
    with pytest.raises(ConfigError, match=r"cls \(not in the pre-trained model\)"):
        warm_start.transfer({**fresh, "cls": leaf(1, 1, 8)}, pre)
    with pytest.raises(ConfigError, match="no finished run there"):
        warm_start.load("/nonexistent/run")


def test_a_run_recorded_before_init_from_existed_resumes():
    base = cli.load_config(
        os.path.join(ROOT, "tpu_configs", "digits.py"), "quick", config_lib.SCHEMA
    )
    old = run_record.as_json(base)
    del old["init_from"]
    assert resume.check_resume(old, base, 2, "w") == []  # it started fresh, as init_from "" does
    base.init_from = "/some/run"
    with pytest.raises(ConfigError, match="init_from"):
        resume.check_resume(old, base, 2, "w")


# ------------------------------------------------------------------------------ token removal


def _random_variables(module, *args):
    """Variables of `module` drawn by numpy: compiling flax's random initialisers costs seconds."""
    rng = np.random.default_rng(0)
    shapes = jax.eval_shape(lambda key: module.init(key, *args), jax.random.key(0))
    return jax.tree.map(lambda s: (0.5 * rng.normal(size=s.shape)).astype(np.float32), shapes)


def _vit(attention, pool):
    return vit.ViT(
        num_classes=3,
        image_size=8,
        patch_size=4,
        width=8,
        depth=1,
        num_heads=2,
        mlp_dim=16,
        attention=attention,
        pool=pool,
    )


@pytest.mark.parametrize(
    "attention, pool", [("vanilla", "gap"), ("positional", "gap"), ("vanilla", "cls")]
)
def test_removed_tokens_do_not_reach_the_output(attention, pool):
    model = _vit(attention, pool)
    x = jax.random.normal(jax.random.key(0), (2, 8, 8, 1))
    keep = jnp.array([[True, False, True, True], [False, True, True, False]])
    # change only the removed tokens' pixels (4 x 4 patches, row-major)
    patch_keep = jnp.repeat(jnp.repeat(keep.reshape(2, 2, 2), 4, 1), 4, 2)[..., None]
    x2 = jnp.where(patch_keep, x, 10.0 * jax.random.normal(jax.random.key(2), x.shape))

    @jax.jit  # one compiled program: a tiny model's cost here is compilation
    def outputs(variables, x, x2):
        f = lambda images, keep=None: model.apply(variables, images, keep_BxN=keep)
        return f(x, keep), f(x2, keep), f(x), f(x2), f(x, jnp.ones((2, 4), bool))

    y, y2, plain, plain2, all_kept = outputs(_random_variables(model, x), x, x2)
    np.testing.assert_allclose(y2, y, atol=1e-6)
    assert not np.allclose(plain2, plain, atol=1e-3)  # without the mask, those pixels matter
    np.testing.assert_allclose(all_kept, plain, atol=1e-6)  # keeping every token = no mask


@pytest.mark.parametrize("attention", ["vanilla", "positional"])
def test_masked_block_equals_the_block_on_the_shortened_token_list(attention):
    """The kept tokens' outputs of a block with a mask are the block's outputs on the kept tokens alone
    (for positional attention with the kept rows of P)."""
    block = vit.EncoderBlock(num_heads=2, mlp_dim=32, attention=attention)
    x = jax.random.normal(jax.random.key(0), (1, 5, 16))
    p = jax.random.normal(jax.random.key(1), (5, 16))
    kept = np.array([0, 2, 3])
    keep = jnp.zeros((1, 5), bool).at[0, kept].set(True)

    @jax.jit
    def outputs(variables, x, p):
        return block.apply(variables, x, p, False, keep)[1], block.apply(
            variables, x[:, kept], p[kept], False
        )[1]

    full, short = outputs(_random_variables(block, x, p, False), x, p)
    np.testing.assert_allclose(full[:, kept], short, atol=1e-5)


def test_pruning_mask_and_relevant_mass():
    scores = jnp.array([[0.3, 0.1, 0.2, 0.4]])
    np.testing.assert_array_equal(prune_least_attended(scores, 2), [[True, False, False, True]])
    np.testing.assert_array_equal(prune_least_attended(scores, 0), [[True] * 4])
    att = jnp.array([[[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [1, 0, 0, 0], [0, 0, 0, 1]]])
    types = jnp.array([[0, 2, 0, 1]])  # relevant queries 0 and 2 put 0.5 and 1.0 on relevant keys
    np.testing.assert_allclose(relevant_mass(att, types), [0.75])


# ------------------------------------------------------------------------------ the binary


@pytest.mark.slow
def test_tiny_run_of_the_binary(tmp_path):
    env = envs.devices(1)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.token_grid",
            f"--workdir={tmp_path}",
            "--config.grid.Rs=6",
            "--config.grid.attentions=vanilla",
            "--config.grid.steps=2",
            "--config.model.variant=test/8",
            "--config.grid.max_pruned=1",
            "--config.grid.starts=scratch,pretrained",
            "--config.grid.pretrain_steps=2",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for name in (
        "config.json",
        "run.json",
        "metrics.jsonl",
        "summary.json",
        "summary.md",
        "token_grid_accuracy.png",
        "token_grid_attention.png",
        "token_grid_pruning.png",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    cell = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert (cell["R"], cell["start"], cell["seed"]) == (6, "scratch", 0) and cell["ks"] == [0, 1]
    assert (
        0 <= cell["relevant_mass"] <= 1
        and (tmp_path / "scratch_vanilla_R6_s0" / "summary.json").exists()
    )
    assert cell["accuracy_attention_pruned"][0] == pytest.approx(cell["test_accuracy"])
    assert "| claim | paper | ours | verdict |" in (tmp_path / "summary.md").read_text()
    first_summary = (tmp_path / "summary.json").read_text()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("pretrain") or (r["start"], r["R"]) for r in records] == [
        ("scratch", 6),
        "pretrain_vanilla_s0",
        ("pretrained", 6),
    ]
    assert records[2]["init_from"] == str(tmp_path / "pretrain_vanilla_s0")
    assert [r["step"] for r in records] == [0, 1, 2]  # one schema: `posattn.metric_log`
    assert (
        json.loads((tmp_path / "pretrain_vanilla_s0" / "config.json").read_text())["dataset"]
        == "digits"
    )
    # The same command again on the finished experiment reads its cells back (a resumed cell was once
    # evaluated again with no training accuracy, and the report's average of it raised)
    again = subprocess.run(out.args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    reread = json.loads((tmp_path / "summary.json").read_text())
    assert reread["cells"] == json.loads(first_summary)["cells"]  # (its "seconds" are this run's)
    assert all(r["train_accuracy"] is not None for r in records if "train_accuracy" in r)
