"""The Inception crop (posattn.vision.data.inception_crop) on 224 x 224 JPEGs written here: shapes and
range, determinism in the entropy, boxes within big_vision's area and aspect ranges, TF's fallback to
the whole image, and one draw pinned against a formula written out independently."""

import math

import numpy as np
import pytest
from PIL import Image

from posattn.errors import ConfigError
from posattn.vision.data import datasets, inception_crop, records, records_writer
from posattn.vision.data import split as split_lib


def jpegs(n: int, channels: int = 3) -> tuple[list[bytes], np.ndarray]:
    """n 224 x 224 JPEGs of smooth random images (structure at every scale a crop could keep)."""
    rng = np.random.default_rng(7)
    out = []
    for _ in range(n):
        small = rng.integers(0, 256, (7, 7, channels), dtype=np.uint8)
        big = split_lib.resize_and_center_crop(small, 224) + rng.integers(
            0, 24, (224, 224, channels), dtype=np.uint8
        )
        out.append(records.encode(big, "jpeg", 90))
    return out, np.arange(n) % 3


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    directory = tmp_path_factory.mktemp("jpeg224")
    train, labels = jpegs(6)
    entries = {
        s: records_writer.write_split(str(directory), s, zip(train, labels), num_classes=3)
        for s in ("train", "test")
    }
    records_writer.write_metadata(str(directory), "jpeg224", ["a", "b", "c"], entries)
    return datasets.open_split(f"records:{directory}", "train", image_size=224)


def test_crops_are_uint8_of_the_size_asked_with_the_labels(split):
    entropy = np.arange(12).reshape(6, 2)
    images, labels = inception_crop.read_cropped(split, np.arange(6), entropy, 96)
    assert images.shape == (6, 96, 96, 3) and images.dtype == np.uint8
    assert labels.dtype == np.int32 and labels.tolist() == [0, 1, 2, 0, 1, 2]
    assert (
        0 <= images.min() and images.max() <= 255 and images.std() > 10
    )  # real pixels, not a fill


def test_a_crop_depends_only_on_its_entropy_row(split):
    entropy = np.array([[1, 2], [3, 4], [5, 6]])
    a, _ = inception_crop.read_cropped(split, [0, 1, 2], entropy, 64)
    b, _ = inception_crop.read_cropped(split, [2, 0], entropy[[2, 0]], 64)  # another batch
    np.testing.assert_array_equal(a[[2, 0]], b)
    again, _ = inception_crop.read_cropped(split, [0, 1, 2], entropy, 64)
    np.testing.assert_array_equal(a, again)
    other, _ = inception_crop.read_cropped(split, [0, 1, 2], entropy + 100, 64)
    assert all((other[n] != a[n]).any() for n in range(3))


@pytest.mark.parametrize("H, W", [(224, 224), (180, 300), (375, 500)])
def test_boxes_keep_area_and_aspect_in_range_and_cover_the_image(H, W):
    rng = np.random.default_rng(0)
    boxes = np.array([inception_crop.sample_box(H, W, rng) for _ in range(3000)])
    top, left, h, w = boxes.T
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= H).all() and (left + w <= W).all()
    area = h * w / (H * W)
    assert area.min() >= 0.05 and area.max() <= 1.0
    # the range is used, both ends (a wide image's largest box at aspect 4/3 is H x 4H/3)
    assert area.min() < 0.07 and area.max() > 0.95 * min(1, 4 / 3 * min(H, W) / max(H, W))
    aspect = w / h  # w = round(h r): within half a pixel of the drawn ratio, one row of slack
    assert (aspect >= 0.75 - 1.5 / h).all() and (aspect <= 4 / 3 + 1.5 / h).all()
    assert aspect.min() < 0.8 and aspect.max() > 1.25
    # offsets spread over the image (TF's Uniform(H - h): every offset but the last)
    assert (top[h < H] < H - h[h < H]).all() and top.max() > H / 2 and left.max() > W / 2


def test_an_impossible_range_falls_back_to_the_whole_image():
    image = np.random.default_rng(0).integers(0, 256, (60, 60, 3), dtype=np.uint8)
    rng = np.random.default_rng(3)
    # a box three times as wide as tall covers at most a third of a square image, never 90%
    box = inception_crop.sample_box(60, 60, rng, area=(0.9, 1.0), aspect=(3.0, 3.0))
    assert box == (0, 0, 60, 60)
    crop = inception_crop.random_resized_crop(image, rng, 60, area=(0.9, 1.0), aspect=(3.0, 3.0))
    np.testing.assert_array_equal(crop, image)


def test_one_draw_pinned_against_the_formula_written_out(split):
    """Entropy [11, 12] on a 224 x 224 image: the first attempt, by the kernel's formula by hand."""
    rng = np.random.default_rng([11, 12])
    r = 0.75 + (4 / 3 - 0.75) * rng.random()  # aspect ratio, uniform
    h_min = round(math.sqrt(0.05 * 224 * 224 / r))
    h_max = min(round(math.sqrt(224 * 224 / r)), 224, int((224 + 0.5 - 1e-7) / r))
    h = h_min + int(rng.integers(h_max - h_min + 1))
    w = round(h * r)
    assert 0.05 * 224 * 224 <= w * h <= 224 * 224 and w <= 224  # (no rounding fix-up in this draw)
    top = int(rng.integers(224 - h)) if h < 224 else 0
    left = int(rng.integers(224 - w)) if w < 224 else 0
    box = inception_crop.sample_box(224, 224, np.random.default_rng([11, 12]))
    assert box == (top, left, h, w)
    assert box == (102, 17, 110, 90)  # pinned: a change of the draw shows here
    image, _ = split.original(4)
    expected = Image.fromarray(image[top : top + h, left : left + w]).resize(
        (64, 64), Image.BILINEAR
    )
    crop, _ = inception_crop.read_cropped(split, [4], [[11, 12]], 64)
    np.testing.assert_array_equal(crop[0], np.asarray(expected))


def test_what_cannot_crop_is_refused_in_one_line(split):
    (x, y) = datasets.DIGITS.load("train")
    no_original = split_lib.Split(num_examples=len(y), image_shape=(8, 8, 1), read=lambda i: None)
    for call, says in (
        (lambda: inception_crop.read_cropped(no_original, [0], [[0]], 8), "full resolution"),
        (lambda: inception_crop.read_cropped(split, [0, 1], [[0]], 8), "one row of integers"),
        (lambda: inception_crop.read_cropped(split, [0], [[-1]], 8), "non-negative integers"),
        (lambda: inception_crop.sample_box(9, 9, np.random.default_rng(), area=(0, 1)), "area="),
        (
            lambda: inception_crop.sample_box(9, 9, np.random.default_rng(), aspect=(2, 1)),
            "aspect=",
        ),
        (lambda: inception_crop.random_resized_crop(x[0], np.random.default_rng(), 0), "size=0"),
    ):
        with pytest.raises(ConfigError, match=says) as e:
            call()
        assert "\n" not in str(e.value)
