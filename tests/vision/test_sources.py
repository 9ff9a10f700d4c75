"""Where image data come from: any tfds dataset by its metadata (mocked), Fashion-MNIST from IDX files or
tfds, a dataset of your own arrays; a run on arrays loads and evaluates in a new process without them."""

import dataclasses
import gzip
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from posattn import cli
from posattn.errors import ConfigError
from posattn.papers.pk22 import streams
from posattn.vision import config as config_lib
from posattn.vision import runs, sweep
from posattn.vision.data import arrays, channel_stats, datasets, idx, tfds_datasets
from posattn.vision.setup import resolve
from tests import envs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def make_config(**overrides):
    c = config_lib.base_config()
    c.update(dict(global_batch_size=8, eval_batch_size=8))
    c.update(overrides)
    return c


def first_batch(setup):
    return next(setup.train_batches(process_index=0, process_count=1))


# ------------------------------------------------------------------------------ any tfds dataset


def test_a_tfds_name_no_code_mentions_works_from_its_metadata(tmp_path):
    with tfds.testing.mock_data(num_examples=23):
        setup = resolve(make_config(dataset="mnist", data_dir=str(tmp_path)))
        info = setup.info
        batch = first_batch(setup)
        evals = list(setup.eval_batches())
    assert (info.num_classes, info.image_shape, info.num_train, info.num_test) == (
        10,
        (28, 28, 1),
        23,
        23,
    )
    # no known statistics: computed from the training split (mock pixels are uniform on 0..255)
    assert 0.3 < info.mean[0] < 0.7 and 0.2 < info.std[0] < 0.4
    assert batch["image"].shape == (8, 28, 28, 1) and batch["label"].max() < 10
    assert sum(int(b["mask"].sum()) for b in evals) == 23


def test_images_of_varying_size_need_an_image_size_and_are_resized_to_it(tmp_path):
    with tfds.testing.mock_data(num_examples=5):  # mock oxford_flowers102 images have random sizes
        with pytest.raises(ConfigError, match="varying size: set --config.image_size"):
            resolve(make_config(dataset="oxford_flowers102", data_dir=str(tmp_path)))
        setup = resolve(
            make_config(dataset="oxford_flowers102", data_dir=str(tmp_path), image_size=16)
        )
        batch = first_batch(setup)
    assert setup.info.num_classes == 102 and setup.image_shape == (16, 16, 3)
    assert batch["image"].shape == (8, 16, 16, 3) and batch["image"].dtype == np.uint8


def test_split_names_follow_the_dataset_and_non_image_datasets_are_refused():
    assert tfds_datasets._split_names("x", ["train", "validation", "test"])["test"] == "test"
    assert tfds_datasets._split_names("x", ["train", "validation"])["test"] == "validation"
    assert tfds_datasets._split_names("imagenet2012", [])["test"] == "validation"
    with pytest.raises(ConfigError, match="has no 'train' split"):
        tfds_datasets._split_names("x", ["test"])
    with pytest.raises(ConfigError, match="imdb_reviews is not an image-classification dataset"):
        datasets.get("imdb_reviews")


# ------------------------------------------------------------------------------ Fashion-MNIST offline


def write_idx(path, array):
    """An IDX file of a uint8 array, gzipped: the format of the Fashion-MNIST release."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(n).to_bytes(4, "big") for n in array.shape
    )
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def idx_dir(tmp_path):
    """A directory with tiny Fashion-MNIST IDX files: 12 training and 5 test images."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("t10k", 5)):
        write_idx(tmp_path / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        write_idx(tmp_path / f"{split}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    return tmp_path


def test_fashion_mnist_is_read_from_idx_files(idx_dir, monkeypatch):
    train = idx.read_idx(str(idx_dir / "train-images-idx3-ubyte.gz"))
    setup = resolve(make_config(dataset="fashion_mnist", idx_dir=str(idx_dir)))
    assert (setup.info.num_train, setup.info.num_test, setup.image_shape) == (12, 5, (28, 28, 1))
    assert (
        setup.info.mean == channel_stats.KNOWN["fashion_mnist"][0]
    )  # the same for the tfds source
    images, labels = setup.split("test").read(np.arange(5))
    np.testing.assert_array_equal(labels, np.arange(5))
    np.testing.assert_array_equal(setup.split("train").read([3])[0][0, ..., 0], train[3])
    monkeypatch.setenv("POSATTN_FASHION_MNIST_DIR", str(idx_dir))  # the environment's directory
    assert datasets.dataset_info("fashion_mnist").num_train == 12


def test_fashion_mnist_falls_back_to_tfds_and_otherwise_names_both_ways_to_get_it(tmp_path):
    empty = dict(idx_dir=str(tmp_path / "no_idx"), data_dir=str(tmp_path / "no_tfds"))
    with pytest.raises(ConfigError) as e:
        resolve(make_config(dataset="fashion_mnist", **empty))
    message = str(e.value)
    assert (
        "apt-get install dataset-fashion-mnist" in message and "tfds build fashion_mnist" in message
    )
    assert "\n" not in message
    with tfds.testing.mock_data(num_examples=7):  # tfds' prepared fashion_mnist (mocked)
        info = resolve(make_config(dataset="fashion_mnist", **empty)).info
    assert (info.num_train, info.image_shape, info.mean) == (
        7,
        (28, 28, 1),
        channel_stats.KNOWN["fashion_mnist"][0],
    )


def test_damaged_idx_files_are_one_line_errors(idx_dir):
    (idx_dir / "bad.gz").write_bytes(gzip.compress(b"\x08\x03\0\0"))
    with pytest.raises(ConfigError, match="is not an IDX file"):
        idx.read_idx(str(idx_dir / "bad.gz"))
    data = gzip.decompress((idx_dir / "t10k-labels-idx1-ubyte.gz").read_bytes())
    (idx_dir / "short.gz").write_bytes(gzip.compress(data[:-1]))
    with pytest.raises(ConfigError, match="holds 4 bytes of data, its header"):
        idx.read_idx(str(idx_dir / "short.gz"))


# ------------------------------------------------------------------------------ your own arrays


def digits_as_floats():
    """The digits splits as float images in [0, 1] (N, 8, 8): arrays as a user would hold them."""
    out = []
    for split in ("train", "test"):
        images, labels = datasets.open_split("digits", split).read(
            np.arange(datasets.open_split("digits", split).num_examples)
        )
        out += [images[..., 0] / 255.0, labels.astype(np.int64)]
    return out


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"train_images": np.full((4, 8, 8), 255.0)},
            r"floats in \[255.0, 255.0\]: float images must lie in \[0, 1\]",
        ),
        ({"train_images": np.zeros((4, 8, 8), np.int64)}, "dtype int64: give uint8 pixels"),
        ({"train_images": np.zeros((4, 8, 6))}, "8 x 6: the models take square images"),
        ({"test_images": np.zeros((2, 4, 4))}, "both splits need images of one shape"),
        ({"train_labels": np.array([0, 1, 2, 10])}, r"labels must lie in \[0, num_classes=10\)"),
        ({"train_labels": np.zeros(3, int)}, "give 4 integer labels"),
        ({"name": "digits"}, "give the arrays a name of their own"),
        (
            {"mean": [0.5]},
            r"std=None must be 1 finite positive .* \(set both mean and std, or neither",
        ),
        ({"mean": [0.5, 0.5], "std": [0.2, 0.2]}, r"mean=\[0.5, 0.5\] must be 1 finite number"),
        (
            {"mean": [33.3], "std": [76.3]},
            r"mean=\[33.3\] lies outside \[0, 1\]: .*divide statistics of 0..255",
        ),
        (
            {"train_images": np.full((4, 8, 8), np.nan)},
            "train_images hold 256 NaN or infinite values",
        ),
        ({"train_images": np.zeros((4, 1, 8, 8))}, r"\(channels last: x.transpose\(0, 2, 3, 1\)\)"),
        (
            {"train_images": np.zeros((4, 8, 8, 8, 1))},
            r"give \(N, H, W\) grayscale or \(N, H, W, C\) images",
        ),
        (
            {"test_images": np.zeros((2, 8, 8), np.uint8)},
            "train_images are float pixels in .* test_images uint8 "
            "pixels 0..255: give both splits on one scale",
        ),
        ({"train_labels": np.array([0.0, 1.0, 2.0, 3.0])}, "dtype float64: give 4 integer labels"),
        ({"train_labels": np.arange(4)[:, None]}, r"shape \(4, 1\) .* give 4 integer labels"),
    ],
)
def test_arrays_are_validated(change, message):
    args = dict(
        train_images=np.zeros((4, 8, 8)),
        train_labels=np.arange(4),
        test_images=np.zeros((2, 8, 8)),
        test_labels=np.arange(2),
        num_classes=10,
    )
    with pytest.raises(ConfigError, match=message):
        arrays.from_arrays(**{**args, **change})


def test_arrays_serve_the_train_loop_and_the_analysis_tools():
    x_train, y_train, x_test, y_test = digits_as_floats()
    ds = arrays.from_arrays(x_train, y_train, x_test, y_test, num_classes=10, name="my_digits")
    with pytest.raises(
        ConfigError, match="config.dataset='digits' but the dataset passed is 'my_digits'"
    ):
        resolve(make_config(), dataset=ds)
    setup = resolve(make_config(dataset="my_digits"), dataset=ds)
    reference = resolve(make_config())  # the same pixels as uint8: the same images and statistics
    np.testing.assert_array_equal(
        setup.split("train").read([5])[0], reference.split("train").read([5])[0]
    )
    assert setup.info == dataclasses.replace(reference.info, name="my_digits", pixels="float")
    inputs, labels = streams.test_set(setup, limit=4)
    assert inputs.shape == (4, 8, 8, 1) and list(labels) == list(y_test[:4])
    stats = resolve(
        make_config(dataset="my_digits", channel_mean=(0.5,), channel_std=(0.25,)), dataset=ds
    ).info
    assert (stats.mean, stats.std) == ((0.5,), (0.25,))
    with pytest.raises(ConfigError, match="channel_std=.* must be 1 finite positive"):
        resolve(
            make_config(dataset="my_digits", channel_mean=(0.5,), channel_std=(0.0,)), dataset=ds
        )


def test_a_run_on_float_arrays_preprocesses_floats_from_its_record_as_it_trained(tmp_path):
    """The record alone (config.json and run.json, what load_run reads in a new process) says the images
    were floats in [0, 1]: the loaded preprocessing gives the inputs training's evaluation gave, and
    refuses images on the other scale. (It read the floats as 0..255: 9.8% where the run measured 92.2%.)"""
    x_train, y_train, x_test, y_test = digits_as_floats()
    ds = arrays.from_arrays(x_train, y_train, x_test, y_test, num_classes=10, name="my_digits")
    setup = resolve(make_config(dataset="my_digits"), dataset=ds)
    preprocess = runs.run_preprocess(_record(tmp_path / "floats", setup))
    assert preprocess.info == setup.info and preprocess.info.pixels == "float"
    levels = setup.split("test").read(np.arange(8))[
        0
    ]  # what the run evaluated: round(255 x) as uint8
    np.testing.assert_array_equal(preprocess(x_test[:8]), setup.eval_inputs(levels))
    with pytest.raises(
        ConfigError, match=r"dtype uint8: the run was trained on float pixels in \[0, 1\]"
    ):
        preprocess(levels)
    with pytest.raises(
        ConfigError, match=r"floats in \[0.0, 255.0\]: float images must lie in \[0, 1\]"
    ):
        preprocess(levels.astype(np.float32))
    # a run on uint8 pixels refuses floats in [0, 1], and takes its one channel's axis as given or not
    digits = runs.run_preprocess(_record(tmp_path / "digits", resolve(make_config())))
    with pytest.raises(
        ConfigError, match=r"images in \[0.0, 1.0\]: the run was trained on pixels 0..255"
    ):
        digits(x_test[:8])
    np.testing.assert_array_equal(digits(levels[..., 0]), digits(levels))
    with pytest.raises(ConfigError, match=r"one image: add the batch axis, images\[None\]"):
        digits(levels[0])
    with pytest.raises(
        ConfigError, match=r"shape \(8, 8\): .* give a \(B, 8, 8, 1\) batch or \(B, 8, 8\)"
    ):
        digits(levels[0, ..., 0])
    with pytest.raises(ConfigError, match="hold NaN or infinite values"):
        digits(np.full((2, 8, 8, 1), np.nan))


def _record(workdir: pathlib.Path, setup) -> pathlib.Path:
    """`workdir` holding the record of a run of `setup` (config.json, run.json) and nothing else."""
    workdir.mkdir()
    runs.write_run_record(workdir, setup.config, setup)
    return workdir


LOAD_AND_EVALUATE = """
import sys, numpy as np
from posattn.vision import checkpoint, runs
model, variables, config, preprocess = runs.load_run(sys.argv[1])
data = np.load(sys.argv[2])
logits = model.apply(variables, preprocess(data["images"]), train=False)
print(float(np.mean(np.argmax(np.asarray(logits), -1) == data["labels"])), config.dataset, preprocess.info.mean)
"""


@pytest.mark.slow  # (a new process end to end: `pytest -m slow`, as .ci/run)
def test_a_run_on_arrays_loads_and_evaluates_in_a_new_process(tmp_path):
    x_train, y_train, x_test, y_test = digits_as_floats()
    ds = arrays.from_arrays(x_train, y_train, x_test, y_test, num_classes=10, name="my_digits")
    c = cli.load_config(
        "tpu_configs/digits.py", "quick", config_lib.SCHEMA
    )  # (the programs of the digits smoke runs)
    c.dataset, c.checkpoint_every = "my_digits", 0
    summary = sweep.run_cell(
        c, str(tmp_path / "run"), dataset=ds
    )  # the sweeps' entry to the train loop
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (
        recorded["name"] == "my_digits"
        and recorded["image_shape"] == [8, 8, 1]
        and recorded["pixels"] == "float"
    )
    np.savez(
        tmp_path / "test.npz", images=x_test, labels=y_test
    )  # as the run was given them: floats (N, H, W)
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            LOAD_AND_EVALUATE,
            str(tmp_path / "run"),
            str(tmp_path / "test.npz"),
        ],
        capture_output=True,
        text=True,
        env=envs.devices(1, PYTHONPATH=str(ROOT)),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    accuracy, name, mean = r.stdout.split(maxsplit=2)
    assert float(accuracy) == pytest.approx(summary["test_accuracy"], abs=1e-9)
    assert name == "my_digits" and mean.strip() == str(tuple(recorded["mean"]))
