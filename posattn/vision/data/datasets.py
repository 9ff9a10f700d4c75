"""Image datasets by name behind one interface (`Dataset`): classes and image shape known without the
data, split sizes, known channel statistics, and each split opened for random access (`Split`).

Names (`get`):
- "digits": scikit-learn's 8 x 8 handwritten digits, bundled: the fast offline data of the tests and
  the smoke configs (one fixed stratified 80/20 split);
- "<family>/<variant>" of `FAMILIES`, e.g. "digit_grid/7" (LWLC23's composite grids of `token_grid`);
  a family says its classes, native shape and arrays. Adding one is its module and one line of `FAMILIES`;
- "fashion_mnist": the IDX files of the Debian package `dataset-fashion-mnist` where they are
  (`posattn.vision.data.idx`), else tfds' prepared `fashion_mnist`; the same examples and labels;
- "records:DIR": a folder of encoded images in ArrayRecord files (`posattn.vision.data.records`, written
  by `python -m posattn.experiments.prepare_images`); a bare name is such a folder `<data_dir>/<name>/`;
- any other tfds image-classification dataset (`posattn.vision.data.tfds_datasets`: classes, shape and
  splits from its metadata), e.g. cifar10, svhn_cropped, mnist, imagenet2012, or oxford_flowers102 with
  an image_size.
A dataset of your own numpy arrays is made by `arrays.from_arrays` and passed as it is (`dataset=` of
the train loop, the sweeps and the analysis tools): it has a name but is never registered under it.

Per-channel statistics (on the [0, 1] scale) are the published constants of `channel_stats.KNOWN`
where a dataset has them, else computed from its training split (`channel_stats.of_split`); a run records the
ones it used (run.json). Every dataset also says whether a horizontal flip keeps an image's label
(`FLIP_PRESERVES_LABEL`: what `augment.flip` "auto" applies) and on which scale its images were given
(`PIXEL_SCALES`: what a loaded run's preprocessing takes).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable, Protocol

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data import channel_stats, idx, records, token_grid
from posattn.vision.data import split as split_lib
from posattn.vision.data.split import Split, resize_and_center_crop  # noqa: F401 (the public names)


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What the model, the augmentation and a loaded run need to know about a run's dataset.

    `image_shape` is the (H, W, C) of the images as the run reads them (after any resizing); `mean` and
    `std` are per channel on the [0, 1] pixel scale; `pixels` the scale the images were given on
    (`PIXEL_SCALES`), which a loaded run's preprocessing takes again.
    """

    name: str
    num_classes: int
    image_shape: tuple[int, int, int]
    num_train: int
    num_test: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    pixels: str = "uint8"


class Dataset(Protocol):
    """A dataset as the image stack reads it.

    `native_shape` is (H, W, C), H and W None where the images vary in size (the run must then set an
    image_size); `stats` the known per-channel (mean, std), None where they are computed from the
    training split. `sizes()` and `open_split` read the data (ConfigError where they are missing);
    `open_split(split, image_size)` opens "train" or "test" at image_size x image_size (0: native).
    `flip_preserves_label` (True, False, or None: unknown) and `pixels` (`PIXEL_SCALES`) may be left
    out: read with `flip_preserves_label` and `pixel_scale`, a dataset without them is None and "uint8".
    """

    name: str
    num_classes: int
    native_shape: tuple[int | None, int | None, int]
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None

    def sizes(self) -> tuple[int, int]: ...
    def open_split(self, split: str, image_size: int) -> Split: ...


@dataclasses.dataclass(frozen=True, eq=False)
class InMemoryDataset:
    """A `Dataset` held in memory: `load(split) -> (images_NxHxWxC uint8, labels_N int32)` (cheap after
    its first call). A split at another size than the native one is resized once, when opened."""

    name: str
    num_classes: int
    native_shape: tuple[int, int, int]
    load: Callable[[str], tuple[np.ndarray, np.ndarray]]
    stats: tuple | None = None
    flip_preserves_label: bool | None = None
    pixels: str = (
        "uint8"  # PIXEL_SCALES: the scale its images were given on (stored as uint8 alike)
    )

    def sizes(self) -> tuple[int, int]:
        return len(self.load("train")[1]), len(self.load("test")[1])

    def open_split(self, split: str, image_size: int) -> Split:
        images, labels = self.load(split)
        return split_lib.in_memory(
            split_lib.resized(images, image_size or self.native_shape[0]), labels
        )


class Family(Protocol):
    """A family of in-memory datasets named "<key of FAMILIES>/<variant>", made of the images of the
    dataset named `base`, which `get` opens and hands to `image_shape` and `arrays`.

    `names` spells the valid names for messages; `check(name)` raises ConfigError for a bad variant;
    `arrays` returns a split at the native shape as (images_NxHxWxC uint8, labels_N int32).
    """

    names: str
    base: str

    def check(self, name: str) -> None: ...
    def num_classes(self, name: str) -> int: ...
    def image_shape(self, name: str, base: Dataset) -> tuple[int, int, int]: ...
    def arrays(self, name: str, split: str, base: Dataset) -> tuple[np.ndarray, np.ndarray]: ...


# family prefix -> Family. "digit_grid/R": LWLC23's 3 x 3 grids of digits with R label-relevant slots,
# discriminative digits 3 and 8, 500 train and 2,000 test grids (the fast smoke data);
# "fashion_grid/R": the same of Fashion-MNIST items, T-shirt/top (0) against shirt (6), 2,000 train and
# 2,000 test grids; "cifar10_grid/R": the same of CIFAR-10 (cat and dog, where CIFAR-10 is prepared; not
# yet run on it) (docs/decisions.md, "Composite grids").
FAMILIES: dict[str, Family] = {
    "digit_grid": token_grid.TokenGridFamily(
        "digit_grid", base="digits", discriminative=(3, 8), num_train=500, num_test=2_000
    ),
    "fashion_grid": token_grid.TokenGridFamily(
        "fashion_grid", base="fashion_mnist", discriminative=(0, 6), num_train=2_000, num_test=2_000
    ),
    "cifar10_grid": token_grid.TokenGridFamily(
        "cifar10_grid", base="cifar10", discriminative=(3, 5), num_train=10_000, num_test=2_000
    ),
}

SPLITS = ("train", "test")
# Whether a mirror image keeps its label, by dataset name: what `augment.flip` "auto" (None) applies.
# Digits are not mirror-symmetric (a mirrored 2 or 7 is no digit, SVHN's house numbers alike); clothing,
# objects and animals are mirror-symmetric as classes. A dataset not listed is unknown: no flip unless
# the config says so. The token-grid families declare False (a mirror moves the slots).
FLIP_PRESERVES_LABEL = {
    "digits": False,
    "mnist": False,
    "svhn_cropped": False,
    "fashion_mnist": True,
    "cifar10": True,
    "cifar100": True,
    "imagenet2012": True,
}
# The scales images are given on: "uint8" pixels 0..255 (every named dataset), "float" floats in [0, 1]
# (`arrays.from_arrays` of float arrays); both are held as uint8 levels, round(255 x) for floats.
PIXEL_SCALES = {"uint8": "uint8 pixels 0..255", "float": "float pixels in [0, 1]"}

# digits: scikit-learn's 8x8 handwritten digits, values 0..16, one fixed stratified 80/20 split.
_DIGITS_TEST_FRACTION = 0.2
_DIGITS_SPLIT_SEED = 0


def family(name: str) -> Family | None:
    """The `FAMILIES` entry that serves `name` ("digit_grid/7" -> digit_grid's), None for the others."""
    return FAMILIES.get(name.partition("/")[0]) if isinstance(name, str) and "/" in name else None


@functools.cache
def _digits_arrays() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """digits as uint8 images (N, 8, 8, 1) scaled 0..16 -> 0..255, split by a fixed stratified draw.

    Read once per process (it is pure) and read-only, as every reader only indexes it."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    labels = digits.target.astype(np.int32)
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)),
        test_size=_DIGITS_TEST_FRACTION,
        stratify=labels,
        random_state=_DIGITS_SPLIT_SEED,
    )
    out = {
        "train": (images[train_idx], labels[train_idx]),
        "test": (images[test_idx], labels[test_idx]),
    }
    for array in (a for pair in out.values() for a in pair):
        array.setflags(write=False)
    return out


DIGITS = InMemoryDataset(
    "digits",
    10,
    (8, 8, 1),
    lambda split: _digits_arrays()[split],
    flip_preserves_label=FLIP_PRESERVES_LABEL["digits"],
)


def flip_preserves_label(dataset: Dataset) -> bool | None:
    """Whether `dataset` declares that a horizontal flip keeps an image's label (None: unknown)."""
    return getattr(dataset, "flip_preserves_label", None)


def pixel_scale(dataset: Dataset) -> str:
    """The scale of `PIXEL_SCALES` the images of `dataset` were given on ("uint8" unless it says)."""
    return getattr(dataset, "pixels", "uint8")


def local_names() -> list[str]:
    """The names served without tfds (digits, the families' and the IDX datasets'), for messages."""
    return ["digits", *idx.IDX_DATASETS, *(f.names for f in FAMILIES.values())]


def _idx_or_tfds(name: str, data_dir: str | None, idx_dir: str | None) -> Dataset:
    """An IDX dataset from its files where they are, else tfds' prepared one (the message of a dataset
    that is neither names both ways to get it)."""
    from posattn.vision.data import tfds_datasets

    spec, directory = idx.IDX_DATASETS[name], idx.directory(name, idx_dir)
    if idx.present(name, directory):
        return InMemoryDataset(
            name,
            spec.num_classes,
            spec.image_shape,
            functools.partial(idx.arrays, name, directory),
            channel_stats.KNOWN.get(name),
            FLIP_PRESERVES_LABEL.get(name),
        )
    return tfds_datasets.dataset(
        name,
        data_dir,
        stats=channel_stats.KNOWN.get(name),
        flip_preserves_label=FLIP_PRESERVES_LABEL.get(name),
        other_source=(
            f"its IDX files are not in {directory} either (install them with `{spec.install}`, "
            f"or point --config.idx_dir or ${spec.env} at them); or "
        ),
    )


def get(name: str, *, data_dir: str | None = None, idx_dir: str | None = None) -> Dataset:
    """The dataset `name` (no data read yet); ConfigError for a name that no source knows.

    `data_dir` is the tfds data directory, `idx_dir` that of an IDX dataset's files (fashion_mnist).
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"dataset must be a non-empty name, got {name!r}")
    if name == "digits":
        return DIGITS
    if (fam := family(name)) is not None:
        fam.check(name)
        base = get(fam.base, data_dir=data_dir)
        # the base's known statistics, so that a model pre-trained on the base sees its inputs alike
        return InMemoryDataset(
            name,
            fam.num_classes(name),
            fam.image_shape(name, base),
            functools.partial(family_arrays, name, data_dir=data_dir),
            base.stats,
            flip_preserves_label=False,
        )  # a mirrored grid moves its slots
    if name in idx.IDX_DATASETS:
        return _idx_or_tfds(name, data_dir, idx_dir)
    if name.startswith(records.PREFIX):
        return records.open_dataset(name.removeprefix(records.PREFIX), name)
    from posattn.vision.data import tfds_datasets

    if os.path.isfile(
        os.path.join(tfds_datasets.resolve_data_dir(data_dir), name, records.METADATA)
    ):
        return records.open_dataset(
            os.path.join(tfds_datasets.resolve_data_dir(data_dir), name), name
        )

    found = tfds_datasets.dataset(
        name,
        data_dir,
        stats=channel_stats.KNOWN.get(name),
        flip_preserves_label=FLIP_PRESERVES_LABEL.get(name),
    )
    if found is None:
        raise ConfigError(
            f"unknown dataset {name!r}: expected one of {', '.join(local_names())}, or the name "
            "of a tfds image-classification dataset (e.g. cifar10, mnist), or records:DIR (a "
            "folder of prepare_images); a dataset of your own arrays is made by posattn.vision.data.arrays.from_arrays and passed as dataset="
        )
    return found


@functools.cache
def family_arrays(
    name: str, split: str, data_dir: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A split of the family dataset `name` (`Family.arrays` on its base), made once per process."""
    fam = family(name)
    return fam.arrays(name, split, get(fam.base, data_dir=data_dir))


def check_split(split: str) -> None:
    """ConfigError unless `split` is "train" or "test"."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")


def shape_at(dataset: Dataset, image_size: int = 0) -> tuple[int, int, int]:
    """(H, W, C) of the images of `dataset` read at `image_size` (0: native); needs no data."""
    if image_size < 0:
        raise ConfigError(
            f"image_size must be 0 (native) or a positive side length, got {image_size}"
        )
    side, _, channels = dataset.native_shape
    if not image_size and side is None:
        raise ConfigError(
            f"dataset {dataset.name} has images of varying size: set --config.image_size to "
            "the side they are resized and centre-cropped to (e.g. 64)"
        )
    return (image_size or side,) * 2 + (channels,)


def describe(
    dataset: Dataset, image_size: int = 0, *, stats=None, train: Callable[[], Split] | None = None
) -> DatasetInfo:
    """The `DatasetInfo` of `dataset` read at `image_size`: statistics `stats` if given, else the known
    ones, else computed from the training split (`train()`, by default opened here)."""
    num_train, num_test = dataset.sizes()
    stats = (
        stats
        or dataset.stats
        or channel_stats.of_split(train() if train else dataset.open_split("train", image_size))
    )
    return DatasetInfo(
        name=dataset.name,
        num_classes=dataset.num_classes,
        image_shape=shape_at(dataset, image_size),
        num_train=num_train,
        num_test=num_test,
        mean=tuple(stats[0]),
        std=tuple(stats[1]),
        pixels=pixel_scale(dataset),
    )


# ------------------------------------------------------------------ the same, by name


def dataset_info(
    name: str, data_dir: str | None = None, image_size: int = 0, *, idx_dir: str | None = None
) -> DatasetInfo:
    """Classes, image shape, split sizes and channel statistics of `name` read at `image_size`.

    Raises ConfigError for an unknown dataset or one that is not prepared.
    """
    return describe(get(name, data_dir=data_dir, idx_dir=idx_dir), image_size)


def open_split(
    name: str,
    split: str,
    *,
    data_dir: str | None = None,
    image_size: int = 0,
    idx_dir: str | None = None,
) -> Split:
    """Open `split` ("train" | "test") of `name` for random access, images image_size x image_size.

    image_size 0 keeps the native size. Resizing is shorter side to image_size then a central crop,
    done once at load for the datasets held in memory and per read for those read by index.
    """
    check_split(split)
    dataset = get(name, data_dir=data_dir, idx_dir=idx_dir)
    shape_at(dataset, image_size)  # (checks the size)
    return dataset.open_split(split, image_size)


def image_shape(name: str, image_size: int = 0) -> tuple[int, int, int]:
    """(H, W, C) of the images `open_split(name, ..., image_size=image_size)` reads (no data needed)."""
    return shape_at(get(name), image_size)


def native_image_size(name: str) -> int:
    """The side of the images a dataset yields when config.image_size is 0."""
    return image_shape(name)[0]


def num_classes(name: str) -> int:
    """The number of classes of `name`, known without the data."""
    return get(name).num_classes
