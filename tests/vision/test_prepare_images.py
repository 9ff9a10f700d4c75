"""`python -m posattn.experiments.prepare_images` and its library (posattn.vision.data.prepare): arrays,
folders of class subfolders and IDX files written as records that read back bitwise (PNG) or as
upscaled JPEGs; bad input is one line and exit 2, and nothing is overwritten or left half-written."""

import gzip
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from posattn.errors import ConfigError
from posattn.vision import config as config_lib
from posattn.vision.data import channel_stats, datasets, prepare
from posattn.vision.data import split as split_lib
from posattn.vision.setup import resolve
from tests import envs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def binary(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "posattn.experiments.prepare_images", *args],
        cwd=cwd,
        env=envs.devices(1, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )


def make_config(**overrides):
    c = config_lib.base_config()
    c.update({"global_batch_size": 8, "eval_batch_size": 8, **overrides})
    return c


def read_all(directory, split, image_size=0):
    s = datasets.open_split(f"records:{directory}", split, image_size=image_size)
    return s.read(np.arange(s.num_examples))


def test_arrays_with_a_held_out_test_split_read_back_bitwise(tmp_path):
    x, y = datasets.DIGITS.load("train")
    source = prepare.from_arrays("digits", x[..., 0], y, test_fraction=0.25)  # (N, H, W): gray
    metadata = prepare.write_dataset(source, str(tmp_path / "out"))
    train_idx, test_idx = prepare.holdout(len(y), 0.25)
    assert metadata["splits"]["test"]["num_examples"] == len(test_idx) == round(0.25 * len(y))
    for split, rows in (("train", train_idx), ("test", test_idx)):
        images, labels = read_all(tmp_path / "out", split)
        np.testing.assert_array_equal(images, x[rows])
        np.testing.assert_array_equal(labels, y[rows])
    assert metadata["class_names"] == [str(k) for k in range(10)]
    # the statistics, computed once here, are the run's (no pass over the split at its start)
    computed = channel_stats.of_split(split_lib.in_memory(x[train_idx], y[train_idx]))
    np.testing.assert_allclose(datasets.get(f"records:{tmp_path / 'out'}").stats, computed)
    assert oct(os.stat(tmp_path / "out").st_mode)[-3:] != "700"  # readable beyond its writer
    # the same draw every time (a constant seed), disjoint and complete
    again = prepare.holdout(len(y), 0.25)
    assert all((a == b).all() for a, b in zip(again, (train_idx, test_idx)))
    assert sorted([*train_idx, *test_idx]) == list(range(len(y)))


def write_folder(root, files):
    """files: {relative path: uint8 image}, written as PNG or JPEG by suffix."""
    for rel, image in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(path)


def test_a_folder_of_class_subfolders_keeps_each_file_and_sorts_the_classes(tmp_path):
    rng = np.random.default_rng(0)
    files = {
        f"{cls}/{k}.png": rng.integers(0, 256, (10 + k, 12, 3), dtype=np.uint8)
        for cls in ("zebra", "ant")
        for k in range(5)
    }
    write_folder(tmp_path / "src", files)
    (tmp_path / "src" / "ant" / ".DS_Store").write_bytes(b"junk")  # hidden files are skipped
    source = prepare.from_folder(str(tmp_path / "src"), test_fraction=0.2)
    assert source.class_names == ("ant", "zebra")
    metadata = prepare.write_dataset(source, str(tmp_path / "out"))
    assert metadata["native_shape"] == [None, None, 3]  # sizes vary
    dataset = datasets.get(f"records:{tmp_path / 'out'}")
    assert dataset.sizes() == (8, 2) and dataset.num_classes == 2
    split = dataset.open_split("train", 16)
    for i in range(
        split.num_examples
    ):  # every stored file is one of the originals, its class right
        image, label = split.original(i)
        matches = [r for r, f in files.items() if f.shape == image.shape and (f == image).all()]
        assert len(matches) == 1 and matches[0].split("/")[0] == source.class_names[label]
    # a folder of train/ and test/ (here val/, as ImageNet's) of class subfolders keeps its own split
    write_folder(
        tmp_path / "tt",
        {f"{s}/{c}/0.png": files["ant/0.png"] for s in ("train", "val") for c in "ab"},
    )
    assert prepare.from_folder(str(tmp_path / "tt")).splits["test"][1].tolist() == [0, 1]


def test_the_jpeg_stand_in_is_the_images_upscaled_to_224(tmp_path):
    x, y = datasets.DIGITS.load("train")
    source = prepare.from_arrays("d", x[:6], y[:6], x[6:9], y[6:9])
    metadata = prepare.write_dataset(
        source, str(tmp_path / "out"), size=224, encoding="jpeg", quality=90, channels=3
    )
    assert metadata["native_shape"] == [224, 224, 3] and metadata["encoding"] == "jpeg"
    images, labels = read_all(tmp_path / "out", "train")
    assert images.shape == (6, 224, 224, 3) and labels.tolist() == y[:6].tolist()
    upscaled = split_lib.resize_and_center_crop(x[2], 224).astype(float)
    assert np.abs(images[2, ..., 1] - upscaled[..., 0]).mean() < 4  # JPEG at quality 90


def write_idx(path, array):
    array = np.asarray(array, np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


def test_the_binary_writes_fashion_mnist_from_idx_files_and_refuses_to_overwrite(tmp_path):
    rng = np.random.default_rng(0)
    images = {
        "train": rng.integers(0, 256, (12, 28, 28)),
        "t10k": rng.integers(0, 256, (5, 28, 28)),
    }
    for split, x in images.items():
        write_idx(tmp_path / f"{split}-images-idx3-ubyte.gz", x)
        write_idx(tmp_path / f"{split}-labels-idx1-ubyte.gz", np.arange(len(x)) % 10)
    out = tmp_path / "fashion"
    r = binary("--source=fashion_mnist", f"--idx_dir={tmp_path}", f"--out={out}")
    assert r.returncode == 0, r.stderr[-2000:]
    got, labels = read_all(out, "test")
    np.testing.assert_array_equal(got[..., 0], images["t10k"])
    assert labels.tolist() == [0, 1, 2, 3, 4]
    dataset = datasets.get(f"records:{out}")
    assert dataset.flip_preserves_label is True and dataset.native_shape == (28, 28, 1)
    assert dataset.stats == channel_stats.KNOWN["fashion_mnist"]  # as the IDX and tfds sources
    # a run's batches and normalisation on the records are those on the IDX files, bitwise
    runs = [
        resolve(make_config(dataset=name, idx_dir=str(tmp_path), global_batch_size=4))
        for name in ("fashion_mnist", f"records:{out}")
    ]
    assert runs[0].info.mean == runs[1].info.mean and runs[0].info.std == runs[1].info.std
    first = [next(r.train_batches(process_index=0, process_count=1)) for r in runs]
    for key in ("image", "label"):
        np.testing.assert_array_equal(first[0][key], first[1][key])
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir())
    r = binary("--source=fashion_mnist", f"--idx_dir={tmp_path}", f"--out={out}")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nothing is overwritten" in r.stderr
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir()) == before


@pytest.mark.parametrize(
    "args, says",
    [
        (["--source=/no/such/folder", "--out={t}/o"], "no such folder"),
        (["--source={t}/bad.npz", "--out={t}/o"], "needs `images` and `labels`"),
        (["--source={t}/ok.npz", "--out={t}/o"], "set test_fraction"),
        (
            ["--source={t}/ok.npz", "--test_fraction=0.5", "--encoding=gif", "--out={t}/o"],
            "encoding=",
        ),
        (["--source={t}/ok.npz", "--out={t}/o", "--bogus"], "Unknown command line flag 'bogus'"),
        (["--source={t}/ok.npz", "--test_fraction=0.5"], "--out=DIR is required"),
        (["--source={t}/ok.npz", "--test_fraction=0.5", "--out=gs://bucket/o"], "gcsfuse"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_and_writes_nothing(args, says, tmp_path):
    np.savez(tmp_path / "bad.npz", pictures=np.zeros((3, 4, 4), np.uint8))
    np.savez(
        tmp_path / "ok.npz", images=np.zeros((4, 4, 4), np.uint8), labels=np.array([0, 1, 0, 1])
    )
    r = binary(*(a.format(t=tmp_path) for a in args))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npz", "ok.npz"]


def test_a_write_that_fails_midway_leaves_no_folder_that_looks_finished(tmp_path):
    x, y = datasets.DIGITS.load("train")
    write_folder(
        tmp_path / "src",
        {"a/0.png": x[0, ..., 0], "b/0.png": x[1, ..., 0], "b/1.png": x[2, ..., 0]},
    )
    (tmp_path / "src" / "b" / "2.png").write_bytes(b"not a png")
    with pytest.raises(ConfigError, match="cannot read an encoded image"):
        prepare.write_dataset(
            prepare.from_folder(str(tmp_path / "src"), 0.25), str(tmp_path / "out")
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no out, no temporary folder
    with pytest.raises(ConfigError, match="both splits need examples"):
        prepare.holdout(3, 0.1)
