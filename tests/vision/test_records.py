"""Records datasets (posattn.vision.data.records): encoded images with their labels in ArrayRecord files,
written and read back bitwise, read by name through datasets.get and the image regime, picklable into
another process; Split.original at full resolution from records, tfds and in-memory splits."""

import concurrent.futures
import io
import json
import multiprocessing
import pickle

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from posattn.errors import ConfigError
from posattn.vision import config as config_lib
from posattn.vision.data import datasets, records, records_writer
from posattn.vision.data import split as split_lib
from posattn.vision.setup import resolve


def digits():
    """scikit-learn's digits as uint8 (N, 8, 8, 1), the same arrays the "digits" dataset serves."""
    return datasets.DIGITS.load("train"), datasets.DIGITS.load("test")


def write(directory, train, test, *, num_classes=10, encoding="png", per_file=100_000):
    entries = {
        name: records_writer.write_split(
            str(directory),
            name,
            zip(*pair),
            num_classes=num_classes,
            encoding=encoding,
            examples_per_file=per_file,
        )
        for name, pair in (("train", train), ("test", test))
    }
    return records_writer.write_metadata(
        str(directory), "mine", [str(k) for k in range(num_classes)], entries
    )


def test_digits_written_as_png_read_back_bitwise_by_name(tmp_path):
    (x, y), (tx, ty) = digits()
    metadata = write(tmp_path, (x, y), (tx, ty), per_file=500)  # 1437 training examples: 3 files
    assert metadata["native_shape"] == [8, 8, 1] and metadata["encoding"] == "png"
    assert metadata["splits"]["train"]["file_examples"] == [500, 500, 437]
    on_disk = json.loads((tmp_path / records.METADATA).read_text())
    assert on_disk["splits"]["test"]["num_examples"] == len(ty)
    dataset = datasets.get(f"records:{tmp_path}")
    assert (dataset.num_classes, dataset.native_shape, dataset.sizes()) == (
        10,
        (8, 8, 1),
        (len(y), len(ty)),
    )
    train = dataset.open_split("train", 0)
    order = np.random.default_rng(0).permutation(len(y))  # across the three files, in any order
    images, labels = train.read(order)
    np.testing.assert_array_equal(images, x[order])
    np.testing.assert_array_equal(labels, y[order])
    assert labels.dtype == np.int32 and images.dtype == np.uint8
    image, label = train.original(1000)
    np.testing.assert_array_equal(image, x[1000])
    assert label == y[1000]
    np.testing.assert_array_equal(dataset.open_split("test", 0).read(np.arange(len(ty)))[0], tx)
    # a record is the label (int32, little-endian) and the PNG file, nothing pickled
    png, label = records.unpack(records.pack(records.encode(x[5]), int(y[5])))
    assert png.startswith(b"\x89PNG") and label == y[5]


def test_the_image_regime_reads_a_records_dataset_by_name(tmp_path):
    (x, y), (tx, ty) = digits()
    write(tmp_path / "mine", (x, y), (tx, ty))
    c = config_lib.base_config()
    c.update(dict(global_batch_size=8, eval_batch_size=8, dataset=f"records:{tmp_path / 'mine'}"))
    setup = resolve(c)
    batch = next(setup.train_batches(process_index=0, process_count=1))
    assert setup.info.num_train == len(y) and setup.image_shape == (8, 8, 1)
    assert batch["image"].shape == (8, 8, 8, 1)
    # a bare name: a records folder <data_dir>/<name>/
    found = datasets.get("mine", data_dir=str(tmp_path))
    assert found.name == "mine" and found.sizes() == (len(y), len(ty))


def test_an_image_size_resizes_then_centre_crops_as_the_other_sources(tmp_path):
    (x, y), (tx, ty) = digits()
    write(tmp_path, (x[:20], y[:20]), (tx[:5], ty[:5]))
    split = datasets.open_split(f"records:{tmp_path}", "train", image_size=24)
    images, _ = split.read(np.arange(20))
    assert split.image_shape == (24, 24, 1) and images.shape == (20, 24, 24, 1)
    np.testing.assert_array_equal(images[7], split_lib.resize_and_center_crop(x[7], 24))
    np.testing.assert_array_equal(split.original(7)[0], x[7])  # full resolution, as stored


def test_sizes_that_vary_need_an_image_size_and_colour_reads_as_rgb(tmp_path):
    rng = np.random.default_rng(1)
    train = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((30, 40), (50, 20))]
    gray = rng.integers(0, 256, (30, 30), dtype=np.uint8)  # grayscale beside colour: read as RGB
    gray_jpeg = records.encode(gray, "jpeg")
    metadata = write(tmp_path, (train, [0, 1]), ([gray_jpeg], [1]), num_classes=2)
    assert metadata["native_shape"] == [None, None, 3] and metadata["encoding"] == "jpeg+png"
    dataset = datasets.get(f"records:{tmp_path}")
    with pytest.raises(ConfigError, match="varying size: set --config.image_size"):
        datasets.open_split(dataset.name, "train")
    images, labels = dataset.open_split("train", 16).read([1, 0])
    assert images.shape == (2, 16, 16, 3) and labels.tolist() == [1, 0]
    np.testing.assert_array_equal(dataset.open_split("train", 16).original(0)[0], train[0])
    test_image = dataset.open_split("test", 16).original(0)[0]
    assert test_image.shape == (30, 30, 3)
    assert (test_image[..., 0] == test_image[..., 2]).all()  # gray replicated
    gray_dir = tmp_path / "gray"
    gray_dir.mkdir()
    write(gray_dir, ([gray], [0]), ([gray], [1]), num_classes=2)
    assert datasets.get(f"records:{gray_dir}").open_split("test", 0).read([0])[0].shape == (
        1,
        30,
        30,
        1,
    )


def _read_in_child(split, indices):
    return split.read(indices)


def test_a_split_is_picklable_and_reads_in_another_process(tmp_path):
    (x, y), (tx, ty) = digits()
    write(tmp_path, (x[:50], y[:50]), (tx[:5], ty[:5]), per_file=20)
    # decoded per read (a split this small is otherwise held in memory, test below)
    split = datasets.get(f"records:{tmp_path}").open_split("train", 0, in_memory=False)
    split.read([0])  # readers open here; a pickled copy opens its own
    copy = pickle.loads(pickle.dumps(split))
    np.testing.assert_array_equal(copy.read([49, 3])[0], x[[49, 3]])
    context = multiprocessing.get_context("spawn")  # what grain's worker processes do
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        images, labels = pool.submit(_read_in_child, split, [45, 21, 2]).result(timeout=120)
    np.testing.assert_array_equal(images, x[[45, 21, 2]])
    np.testing.assert_array_equal(labels, y[[45, 21, 2]])


def test_a_small_split_of_one_size_is_decoded_once_and_held(tmp_path, monkeypatch):
    (x, y), (tx, ty) = digits()
    write(tmp_path, (x[:50], y[:50]), (tx[:5], ty[:5]), per_file=20)
    dataset = datasets.get(f"records:{tmp_path}")
    held = dataset.open_split("train", 0)
    assert held.in_memory
    np.testing.assert_array_equal(held.read(np.arange(50))[0], x[:50])
    assert not dataset.open_split("train", 16).in_memory  # resized: decoded per read
    monkeypatch.setattr(split_lib, "IN_MEMORY_BYTES", 50 * 8 * 8 - 1)  # one byte short
    assert not dataset.open_split("train", 0).in_memory
    with pytest.raises(ConfigError, match="only a split read at its images' own size"):
        dataset.open_split("train", 16, in_memory=True)


def test_bad_folders_and_examples_are_one_line_errors(tmp_path):
    for name, says in (
        ("records:gs://bucket/imagenet", "local copy|gcsfuse"),
        (f"records:{tmp_path}", "not a records dataset"),
        ("records:", "give the records folder"),
    ):
        with pytest.raises(ConfigError, match=says) as e:
            datasets.get(name)
        assert "\n" not in str(e.value)
    (tmp_path / records.METADATA).write_text('{"format": "something else"}')
    with pytest.raises(ConfigError, match="not the metadata of a records dataset"):
        datasets.get(f"records:{tmp_path}")
    image = np.zeros((4, 4, 1), np.uint8)
    for examples, says in (
        ([(image, 3)], r"label 3: labels lie in \[0, 3\)"),
        ([(image, 1.0)], r"label 1.0: labels lie in"),
        ([(b"not an image", 0)], "cannot read an encoded image"),
        ([(np.zeros((4, 4), np.float32), 0)], "give uint8"),
        ([], "no examples"),
    ):
        with pytest.raises(ConfigError, match=says):
            records_writer.write_split(str(tmp_path), "train", examples, num_classes=3)
    sixteen = io.BytesIO()
    Image.fromarray(np.zeros((4, 4), np.uint16)).save(sixteen, format="PNG")
    with pytest.raises(ConfigError, match="16-bit or float"):
        records_writer.write_split(str(tmp_path), "test", [(sixteen.getvalue(), 0)], num_classes=3)


def test_a_file_the_metadata_lists_must_be_there_with_its_count(tmp_path):
    (x, y), (tx, ty) = digits()
    write(tmp_path, (x[:30], y[:30]), (tx[:5], ty[:5]), per_file=10)
    (tmp_path / "train-00001.array_record").unlink()
    with pytest.raises(ConfigError, match="lacks .*train-00001.array_record"):
        datasets.get(f"records:{tmp_path}")


def test_original_of_in_memory_subset_and_tfds_read_by_index_splits(tmp_path, monkeypatch):
    (x, y), _ = digits()
    memory = split_lib.in_memory(x, y)
    np.testing.assert_array_equal(memory.original(4)[0], x[4])
    sub = split_lib.subset(memory, np.array([9, 4]))
    np.testing.assert_array_equal(sub.original(1)[0], x[4])
    assert sub.original(1)[1] == y[4]
    # a tfds split too large for memory (here: every split) decodes its full-size image by index
    monkeypatch.setattr(split_lib, "IN_MEMORY_BYTES", 0)
    with tfds.testing.mock_data(num_examples=3):  # mock oxford_flowers102 images have random sizes
        split = datasets.open_split(
            "oxford_flowers102", "train", data_dir=str(tmp_path), image_size=16
        )
        full, label = split.original(2)
        images, labels = split.read([2])
    assert full.ndim == 3 and full.shape[-1] == 3 and full.dtype == np.uint8
    np.testing.assert_array_equal(images[0], split_lib.resize_and_center_crop(full, 16))
    assert label == labels[0]
