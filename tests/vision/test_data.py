"""The input pipeline: datasets, deterministic resumable batches, per-process slices, exact-once eval,
pixel-block permutation (posattn.vision.data)."""

import collections
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

from posattn.errors import ConfigError
from posattn.vision import config as config_lib
from posattn.vision.data import datasets, permutation, pipeline
from posattn.vision.setup import resolve


def make_config(**overrides):
    c = config_lib.base_config()
    c.update(
        dict(
            seed=0,
            dataset="digits",
            image_size=0,
            permute_block=0,
            permute_seed=0,
            global_batch_size=64,
            eval_batch_size=24,
        )
    )
    c.update(overrides)
    return c


def take(iterator, n):
    return list(itertools.islice(iterator, n))


def assert_batches_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])


def example_counts(images, labels):
    return collections.Counter((im.tobytes(), int(l)) for im, l in zip(images, labels))


# ------------------------------------------------------------------------------ digits


def test_digits_info_and_batches():
    info = datasets.dataset_info("digits")
    assert (info.num_classes, info.image_shape, info.num_train + info.num_test) == (
        10,
        (8, 8, 1),
        1797,
    )
    assert info.num_test == 360 and len(info.mean) == len(info.std) == 1
    assert 0.1 < info.mean[0] < 0.6 and 0.1 < info.std[0] < 0.6
    batch = next(resolve(make_config()).train_batches(process_index=0, process_count=1))
    assert batch["image"].shape == (64, 8, 8, 1) and batch["image"].dtype == np.uint8
    assert batch["label"].shape == (64,) and batch["label"].dtype == np.int32
    assert batch["image"].max() == 255 and set(np.unique(batch["label"])) <= set(range(10))
    test = datasets.open_split("digits", "test")
    assert sorted(collections.Counter(test.read(np.arange(360))[1]).values())[0] >= 35  # stratified


def test_digits_resized_to_image_size():
    c = make_config(image_size=16)
    assert resolve(c).image_shape == (16, 16, 1)
    assert next(resolve(c).train_batches(process_index=0, process_count=1))["image"].shape == (
        64,
        16,
        16,
        1,
    )


def test_a_setup_opens_each_split_once():
    setup = resolve(make_config(eval_batch_size=120))
    test = setup.split("test")
    assert setup.split("test") is test and setup.split("train") is not test
    # every evaluation reads the split the setup holds (a second pass decodes nothing again)
    first, second = (list(setup.eval_batches()) for _ in range(2))
    assert_batches_equal(first, second)
    assert setup.split("test") is test


def test_train_batches_deterministic_and_resumable():
    c = make_config(global_batch_size=100)  # 1437 train examples: batches straddle epochs
    full = take(resolve(c).train_batches(process_index=0, process_count=1), 20)
    assert_batches_equal(full, take(resolve(c).train_batches(process_index=0, process_count=1), 20))
    for t in (1, 14, 15):
        resumed = take(
            resolve(c).train_batches(start_step=t, process_index=0, process_count=1), 20 - t
        )
        assert_batches_equal(full[t:], resumed)
    other_seed = next(
        resolve(make_config(seed=1, global_batch_size=100)).train_batches(
            process_index=0, process_count=1
        )
    )
    assert not np.array_equal(other_seed["label"], full[0]["label"])


def test_each_epoch_visits_every_example_once():
    n, b = 37, 5
    positions = np.concatenate(
        [pipeline.global_batch_indices(3, t, b, n) for t in range(3 * n // b + 1)]
    )
    for e in range(3):
        epoch = positions[e * n : (e + 1) * n]
        assert sorted(epoch) == list(range(n))
    assert not np.array_equal(positions[:n], positions[n : 2 * n])  # a fresh order per epoch


@pytest.mark.parametrize("process_count", [2, 4])
def test_process_slices_concatenate_to_global_batch(process_count):
    c = make_config(global_batch_size=128)
    single = take(resolve(c).train_batches(start_step=5, process_index=0, process_count=1), 3)
    per_process = [
        take(
            resolve(c).train_batches(start_step=5, process_index=p, process_count=process_count), 3
        )
        for p in range(process_count)
    ]
    for step, batch in enumerate(single):
        for key in ("image", "label"):
            np.testing.assert_array_equal(
                np.concatenate([pp[step][key] for pp in per_process]), batch[key]
            )


@pytest.mark.parametrize("process_count", [1, 3, 4])
def test_eval_covers_digits_train_exactly_once(process_count):
    c = make_config(eval_batch_size=120)  # 1437 examples (odd): 12 global batches, the last padded
    split = datasets.open_split("digits", "train")
    expected = example_counts(*split.read(np.arange(split.num_examples)))
    seen = collections.Counter()
    lengths = []
    for p in range(process_count):
        batches = list(
            resolve(c).eval_batches("train", process_index=p, process_count=process_count)
        )
        lengths.append(len(batches))
        for b in batches:
            assert b["image"].shape == (120 // process_count, 8, 8, 1) and b["mask"].dtype == bool
            m = b["mask"]
            assert not b["image"][~m].any() and not b["label"][~m].any()
            seen += example_counts(b["image"][m], b["label"][m])
    assert lengths == [12] * process_count
    assert seen == expected


def test_invalid_configs_raise_config_error():
    with pytest.raises(ConfigError, match="unknown dataset 'no_such_set'"):
        datasets.dataset_info("no_such_set")
    with pytest.raises(ConfigError, match="unknown dataset"):
        resolve(make_config(dataset="cifar11")).train_batches(process_index=0, process_count=1)
    with pytest.raises(ConfigError, match="multiple of the process count 3"):
        resolve(make_config(global_batch_size=64)).train_batches(process_index=0, process_count=3)
    with pytest.raises(ConfigError, match="eval_batch_size"):
        resolve(make_config(eval_batch_size=10)).eval_batches(process_index=0, process_count=4)
    with pytest.raises(ConfigError, match="permute_block=3"):
        resolve(make_config(permute_block=3)).train_batches(process_index=0, process_count=1)
    with pytest.raises(ConfigError, match="unknown split"):
        resolve(make_config()).eval_batches("val", process_index=0, process_count=1)
    with pytest.raises(
        ConfigError, match="holds out no validation split: set config.validation_examples"
    ):
        resolve(make_config()).eval_batches("validation", process_index=0, process_count=1)


def test_a_setups_batch_helpers_refuse_images_that_are_not_uint8_pixels():
    # floats in [0, 1] were divided by 255 once more: near-constant inputs, without a word
    setup = resolve(make_config())
    floats = np.random.default_rng(0).random((4, 8, 8, 1)).astype(np.float32)
    for inputs in (
        setup.eval_inputs,
        lambda x: jax.jit(setup.training_inputs)(jax.random.key(0), x),
    ):
        with pytest.raises(
            ConfigError, match="dtype float32: the run's batches are uint8 pixels 0..255"
        ):
            inputs(floats)
    assert setup.eval_inputs((floats * 255).astype(np.uint8)).dtype == jnp.float32


def test_channel_statistics_on_the_0_255_scale_are_refused():
    # a mean of 125 (0..255 pixels) left every input near -1 / 63 of its scale: the run trained on noise
    message = r"channel_mean=\(125.3,\) lies outside \[0, 1\]: .*divide statistics of 0..255 pixels by 255"
    with pytest.raises(ConfigError, match=message):
        resolve(make_config(channel_mean=(125.3,), channel_std=(63.0,)))
    with pytest.raises(ConfigError, match=r"channel_std=\(63.0,\) lies outside \[0, 1\]"):
        resolve(make_config(channel_mean=(0.5,), channel_std=(63.0,)))
    assert resolve(make_config(channel_mean=(0.5,), channel_std=(1.0,))).info.std == (
        1.0,
    )  # 1: no scaling


# ------------------------------------------------------------------------------ block permutation


def blocks_of(x, g):
    h, w = x.shape[-3:-1]
    return [x[..., i : i + g, j : j + g, :] for i in range(0, h, g) for j in range(0, w, g)]


@pytest.mark.parametrize("g", [1, 2, 4])
def test_permute_blocks_moves_whole_blocks_and_inverts(g):
    x = np.random.default_rng(0).integers(0, 256, (3, 8, 16, 2), dtype=np.uint8)
    perm = permutation.block_permutation((8, 16), g, seed=5)
    assert (
        sorted(perm) == list(range((8 // g) * (16 // g))) and (perm != np.arange(len(perm))).any()
    )
    y = permutation.permute_blocks(x, g, perm)
    for k, block in enumerate(
        blocks_of(y, g)
    ):  # block k of the output is block perm[k] of the input
        np.testing.assert_array_equal(block, blocks_of(x, g)[perm[k]])
    np.testing.assert_array_equal(permutation.unpermute_blocks(y, g, perm), x)
    np.testing.assert_array_equal(
        np.asarray(permutation.permute_blocks(jnp.asarray(x), g, perm)), y
    )


def test_block_of_whole_image_is_identity():
    x = np.arange(64, dtype=np.uint8).reshape(1, 8, 8, 1)
    perm = permutation.block_permutation((8, 8), 8, seed=0)
    np.testing.assert_array_equal(permutation.permute_blocks(x, 8, perm), x)


def test_test_images_come_permuted_and_training_images_natural():
    # Training images are permuted in the train step, after augmentation (tests/vision/test_train.py).
    plain, permuted = make_config(), make_config(permute_block=4, permute_seed=7)
    perm = permutation.block_permutation((8, 8), 4, seed=7)
    a = next(resolve(plain).train_batches(process_index=0, process_count=1))["image"]
    b = next(resolve(permuted).train_batches(process_index=0, process_count=1))["image"]
    np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(
        resolve(permuted).permutation(a), permutation.permute_blocks(a, 4, perm)
    )
    a = next(resolve(plain).eval_batches(process_index=0, process_count=1))["image"]
    b = next(resolve(permuted).eval_batches(process_index=0, process_count=1))["image"]
    np.testing.assert_array_equal(b, permutation.permute_blocks(a, 4, perm))
    assert not np.array_equal(a, b)


# ------------------------------------------------------------------------------ tfds (mocked)


@pytest.mark.parametrize(
    "name,num_classes", [("cifar10", 10), ("svhn_cropped", 10), ("cifar100", 100)]
)
def test_tfds_datasets_under_mock(name, num_classes):
    with tfds.testing.mock_data(num_examples=37):
        info = datasets.dataset_info(name)
        assert (info.num_train, info.num_test, info.num_classes) == (37, 37, num_classes)
        assert info.image_shape == (32, 32, 3) and len(info.mean) == 3
        c = make_config(dataset=name, global_batch_size=16, eval_batch_size=12)
        batches = take(resolve(c).train_batches(start_step=2, process_index=1, process_count=2), 3)
        assert batches[0]["image"].shape == (8, 32, 32, 3) and batches[0]["image"].dtype == np.uint8
        assert all(0 <= b["label"].min() and b["label"].max() < num_classes for b in batches)
        full = take(resolve(c).train_batches(process_index=1, process_count=2), 5)
        assert_batches_equal(full[2:], batches)


@pytest.mark.parametrize("process_count", [1, 3, 4])
def test_tfds_eval_exactly_once(process_count):
    with tfds.testing.mock_data(num_examples=37):
        split = datasets.open_split("cifar10", "test")
        expected = example_counts(*split.read(np.arange(37)))
        assert len(expected) == 37  # mock examples are distinct, so counting them identifies them
        c = make_config(dataset="cifar10", eval_batch_size=12)
        per_process = [
            list(resolve(c).eval_batches(process_index=p, process_count=process_count))
            for p in range(process_count)
        ]
    assert [len(b) for b in per_process] == [4] * process_count
    seen = sum(
        (
            example_counts(b["image"][b["mask"]], b["label"][b["mask"]])
            for batches in per_process
            for b in batches
        ),
        collections.Counter(),
    )
    assert seen == expected


def test_imagenet_resized_and_center_cropped_under_mock():
    with tfds.testing.mock_data(num_examples=5):  # mock ImageNet images have random sizes 5..49
        c = make_config(
            dataset="imagenet2012", image_size=24, global_batch_size=4, eval_batch_size=4
        )
        assert resolve(c).image_shape == (24, 24, 3)
        batch = next(resolve(c).train_batches(process_index=0, process_count=1))
        evals = list(resolve(c).eval_batches(process_index=0, process_count=1))
    assert batch["image"].shape == (4, 24, 24, 3) and batch["label"].max() < 1000
    assert [b["mask"].sum() for b in evals] == [4, 1]


def test_resize_and_center_crop_keeps_the_centre():
    image = np.zeros((40, 20, 1), np.uint8)
    image[10:30] = 255  # the central 20 x 20 square of a tall image
    out = datasets.resize_and_center_crop(image, 10)
    assert out.shape == (10, 10, 1)
    assert out[1:-1].min() == 255 and out.min() > 128  # edge rows blend a little with the outside


def test_resize_and_center_crop_takes_floats_in_0_1_as_their_levels_and_refuses_other_floats():
    # PIL refused floats with a TypeError of its own, and clips 0..255 floats given as float images
    image = np.random.default_rng(0).integers(0, 256, (12, 16, 1)).astype(np.uint8)
    levels = datasets.resize_and_center_crop(image, 8)
    out = datasets.resize_and_center_crop(image / 255.0, 8)
    assert out.dtype == np.float32 and np.array_equal(np.round(out * 255.0), levels)
    with pytest.raises(
        ConfigError, match=r"dtype float64 with values in \[0.0, 255.0\]: resize uint8 pixels"
    ):
        datasets.resize_and_center_crop(image.astype(np.float64) * (255 / image.max()), 8)


def test_unprepared_dataset_names_the_build_command(tmp_path, monkeypatch):
    empty = str(tmp_path / "tfds")
    command = f"tfds build cifar10 --file_format=array_record --data_dir={empty}"
    with pytest.raises(ConfigError) as e:
        datasets.dataset_info("cifar10", data_dir=empty)
    assert command in str(e.value) and "posattn[data]" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setenv("TFDS_DATA_DIR", empty)
    with pytest.raises(ConfigError, match="tfds build svhn_cropped --file_format=array_record"):
        resolve(make_config(dataset="svhn_cropped")).train_batches(process_index=0, process_count=1)
