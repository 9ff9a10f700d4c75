"""Image datasets behind one random-access interface: tfds array_record sources and the bundled digits.

A split is opened as a `Split`: its size and a `read(indices) -> (images_NxHxWxC uint8, labels_N int32)`
function. CIFAR-10/100, SVHN and digits fit in memory, so their split is decoded once and indexed; ImageNet
is read by index from its array_record files on every call (decoding and resizing on a thread pool). The
data are read through `tfds.data_source` (random access, no TensorFlow); a dataset that is not prepared
in array_record format is a `ConfigError` naming the `tfds build` command that prepares it.

Families of datasets built from these (`FAMILIES`, names "<family>/<variant>", e.g. "digit_grid/7",
LWLC23's composite grids of `token_grid`) are held in memory too: a family says its classes, native
shape and arrays, and every function here serves its names like the others. Adding one is its module and
one line of `FAMILIES`.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
from typing import Callable, Protocol

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data import token_grid


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What the model and the augmentation need to know about a dataset.

    `image_shape` is the native (H, W, C) (ImageNet, whose images vary in size: 224 x 224 x 3);
    `mean` and `std` are per channel on the [0, 1] pixel scale.
    """

    name: str
    num_classes: int
    image_shape: tuple[int, int, int]
    num_train: int
    num_test: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class _Spec:
    num_classes: int
    image_shape: tuple[int, int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    splits: dict  # our split name ("train" | "test") -> the tfds split name
    in_memory: bool  # small enough to decode once and hold as one uint8 array


# Per-channel statistics of the training sets on the [0, 1] scale (the usual published constants; the
# CIFAR std is the per-pixel std, not the frequently copied per-image 0.2023/0.1994/0.2010).
_TFDS = {
    "cifar10": _Spec(10, (32, 32, 3), (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616),
                     {"train": "train", "test": "test"}, True),
    "cifar100": _Spec(100, (32, 32, 3), (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762),
                      {"train": "train", "test": "test"}, True),
    "svhn_cropped": _Spec(10, (32, 32, 3), (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970),
                          {"train": "train", "test": "test"}, True),
    # ImageNet's labelled held-out split is "validation"; its "test" split has no labels.
    "imagenet2012": _Spec(1000, (224, 224, 3), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225),
                          {"train": "train", "test": "validation"}, False),
}
DATASETS = ("digits", *_TFDS)
SPLITS = ("train", "test")


class Family(Protocol):
    """A family of in-memory datasets named "<key of FAMILIES>/<variant>" (what the functions here need).

    `names` spells the valid names for messages; `check(name)` raises ConfigError for a bad variant;
    `arrays` returns a split at the native shape as (images_NxHxWxC uint8, labels_N int32).
    """

    names: str

    def check(self, name: str) -> None: ...
    def num_classes(self, name: str) -> int: ...
    def image_shape(self, name: str) -> tuple[int, int, int]: ...
    def arrays(self, name: str, split: str, data_dir: str | None) -> tuple[np.ndarray, np.ndarray]: ...


# family prefix -> Family. "digit_grid/R": LWLC23's 3 x 3 grids of digits with R label-relevant slots,
# discriminative digits 3 and 8, 500 train and 2,000 test grids; "cifar10_grid/R": the same of CIFAR-10
# (cat and dog, where CIFAR-10 is prepared; not yet run on it) (docs/decisions.md, "Composite grids").
FAMILIES: dict[str, Family] = {
    "digit_grid": token_grid.TokenGridFamily("digit_grid", base="digits", discriminative=(3, 8),
                                             num_train=500, num_test=2_000),
    "cifar10_grid": token_grid.TokenGridFamily("cifar10_grid", base="cifar10", discriminative=(3, 5),
                                               num_train=10_000, num_test=2_000),
}

# digits: scikit-learn's 8x8 handwritten digits, values 0..16, one fixed stratified 80/20 split.
_DIGITS_TEST_FRACTION = 0.2
_DIGITS_SPLIT_SEED = 0


@dataclasses.dataclass(frozen=True)
class Split:
    """One split behind random access: `read(indices_N) -> (images_NxHxWxC uint8, labels_N int32)`."""

    num_examples: int
    image_shape: tuple[int, int, int]
    read: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def family(name: str) -> Family | None:
    """The `FAMILIES` entry that serves `name` ("digit_grid/7" -> digit_grid's), None for the others."""
    return FAMILIES.get(name.partition("/")[0]) if isinstance(name, str) and "/" in name else None


def _check_name(name: str) -> None:
    if name in DATASETS:
        return
    if (fam := family(name)) is not None:
        fam.check(name)
        return
    valid = [*DATASETS, *(f.names for f in FAMILIES.values())]
    raise ConfigError(f"unknown dataset {name!r}; expected one of {', '.join(valid)}")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")


def resolve_data_dir(data_dir: str | None) -> str:
    """The tfds data directory: `data_dir`, else $TFDS_DATA_DIR, else tfds' default (~/tensorflow_datasets)."""
    if data_dir:
        return os.path.expanduser(data_dir)
    if os.environ.get("TFDS_DATA_DIR"):
        return os.path.expanduser(os.environ["TFDS_DATA_DIR"])
    return os.path.expanduser(os.path.join("~", "tensorflow_datasets"))


def build_command(name: str, data_dir: str) -> str:
    """The command that prepares `name` for random access in `data_dir` (on a machine with internet;
    `tfds build` runs TensorFlow's builders: `pip install 'posattn[data]'` first)."""
    command = f"pip install 'posattn[data]' && tfds build {name} --file_format=array_record --data_dir={data_dir}"
    if name == "imagenet2012":  # ImageNet cannot be downloaded by tfds: it reads the official tars.
        command += " --manual_dir=DIR_WITH_ILSVRC2012_TARS"
    return command


def _tfds_source(name: str, split: str, data_dir: str | None):
    """`tfds.data_source` of one split, or a `ConfigError` naming the `tfds build` command."""
    import tensorflow_datasets as tfds  # imported here: digits-only users never pay for it

    directory = resolve_data_dir(data_dir)
    try:
        return tfds.data_source(name, split=_TFDS[name].splits[split], data_dir=directory,
                                download=False)
    # Without TensorFlow, tfds reports a missing dataset (and one prepared as tfrecord only) as
    # NotImplementedError "random access ... not supported", an empty split table as KeyError.
    except (NotImplementedError, KeyError, FileNotFoundError) as e:
        raise ConfigError(
            f"dataset {name} is not prepared in array_record format under {directory}; "
            f"prepare it with: {build_command(name, directory)}") from e


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
        np.arange(len(labels)), test_size=_DIGITS_TEST_FRACTION, stratify=labels,
        random_state=_DIGITS_SPLIT_SEED)
    out = {"train": (images[train_idx], labels[train_idx]), "test": (images[test_idx], labels[test_idx])}
    for array in (a for pair in out.values() for a in pair):
        array.setflags(write=False)
    return out


def _channel_stats(images_NxHxWxC: np.ndarray, chunk: int = 1024) -> tuple[tuple, tuple]:
    """Per-channel mean and std on the [0, 1] scale, accumulated in float64 over chunks of images (a
    float copy of a large uint8 split at once would take 8 times its memory)."""
    C = images_NxHxWxC.shape[-1]
    total, squares, count = np.zeros(C), np.zeros(C), 0
    for start in range(0, len(images_NxHxWxC), chunk):
        x = images_NxHxWxC[start:start + chunk].reshape(-1, C).astype(np.float64) / 255.0
        total, squares, count = total + x.sum(0), squares + (x * x).sum(0), count + len(x)
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean * mean, 0.0))
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


def dataset_info(name: str, data_dir: str | None = None) -> DatasetInfo:
    """Classes, native image shape, split sizes and channel statistics of `name`.

    Raises ConfigError for an unknown dataset or one that is not prepared under the data directory.
    """
    _check_name(name)
    if name == "digits":
        arrays = _digits_arrays()
        train_01 = arrays["train"][0].astype(np.float64) / 255.0
        return DatasetInfo(
            name=name, num_classes=10, image_shape=(8, 8, 1),
            num_train=len(arrays["train"][1]), num_test=len(arrays["test"][1]),
            mean=tuple(float(m) for m in train_01.mean(axis=(0, 1, 2))),
            std=tuple(float(s) for s in train_01.std(axis=(0, 1, 2))))
    if (fam := family(name)) is not None:
        train_images, _ = fam.arrays(name, "train", data_dir)
        _, test_labels = fam.arrays(name, "test", data_dir)
        mean, std = _channel_stats(train_images)
        return DatasetInfo(
            name=name, num_classes=fam.num_classes(name), image_shape=fam.image_shape(name),
            num_train=len(train_images), num_test=len(test_labels), mean=mean, std=std)
    spec = _TFDS[name]
    return DatasetInfo(
        name=name, num_classes=spec.num_classes, image_shape=spec.image_shape,
        num_train=len(_tfds_source(name, "train", data_dir)),
        num_test=len(_tfds_source(name, "test", data_dir)),
        mean=spec.mean, std=spec.std)


def native_image_size(name: str) -> int:
    """The side of the images a dataset yields when config.image_size is 0."""
    _check_name(name)
    if (fam := family(name)) is not None:
        return fam.image_shape(name)[0]
    return 8 if name == "digits" else _TFDS[name].image_shape[0]


def image_shape(name: str, image_size: int = 0) -> tuple[int, int, int]:
    """(H, W, C) of the images `open_split(name, ..., image_size=image_size)` reads (no data needed)."""
    fam = family(name)
    channels = fam.image_shape(name)[2] if fam is not None else 1 if name == "digits" else 3
    return (image_size or native_image_size(name),) * 2 + (channels,)


def num_classes(name: str) -> int:
    """The number of classes of `name`, known without the data."""
    _check_name(name)
    if (fam := family(name)) is not None:
        return fam.num_classes(name)
    return 10 if name == "digits" else _TFDS[name].num_classes


def resize_and_center_crop(image_HxWxC: np.ndarray, size: int) -> np.ndarray:
    """Resize so the shorter side is `size` (antialiased bilinear), then take the central size x size."""
    from PIL import Image

    h, w, c = image_HxWxC.shape
    if (h, w) == (size, size):
        return image_HxWxC
    scale = size / min(h, w)
    new_h, new_w = max(size, round(h * scale)), max(size, round(w * scale))
    pil = Image.fromarray(image_HxWxC[..., 0] if c == 1 else image_HxWxC)
    resized = np.asarray(pil.resize((new_w, new_h), Image.BILINEAR)).reshape(new_h, new_w, c)
    top, left = (new_h - size) // 2, (new_w - size) // 2
    return resized[top:top + size, left:left + size]


def _read_threads() -> int:
    # Decoding (PIL) releases the GIL; a few threads per core keep the reads of a batch overlapped.
    return min(32, 4 * (os.cpu_count() or 1))


def _decode(source, indices: np.ndarray, shape: tuple[int, int, int], resize: bool,
            pool: concurrent.futures.Executor) -> tuple[np.ndarray, np.ndarray]:
    """Read examples `indices` of a tfds source as (N, *shape) uint8, resized first if `resize`."""
    images = np.empty((len(indices), *shape), np.uint8)
    labels = np.empty((len(indices),), np.int32)

    def one(k):
        example = source[int(indices[k])]
        image = np.asarray(example["image"], dtype=np.uint8)
        images[k] = resize_and_center_crop(image, shape[0]) if resize else image
        labels[k] = example["label"]

    for _ in pool.map(one, range(len(indices))):  # consume, so that worker errors surface here
        pass
    return images, labels


def _in_memory(images: np.ndarray, labels: np.ndarray) -> Split:
    def read(indices):
        indices = np.asarray(indices, dtype=np.int64)
        return images[indices], labels[indices]

    return Split(num_examples=len(labels), image_shape=tuple(images.shape[1:]), read=read)


def open_split(name: str, split: str, *, data_dir: str | None = None, image_size: int = 0) -> Split:
    """Open `split` ("train" | "test") of `name` for random access, images image_size x image_size.

    image_size 0 keeps the native size (ImageNet: 224). Resizing is shorter side to image_size then a
    central crop, done once at load for the in-memory datasets and per read for ImageNet.
    """
    _check_name(name)
    _check_split(split)
    if image_size < 0:
        raise ConfigError(f"image_size must be 0 (native) or a positive side length, got {image_size}")
    native = native_image_size(name)
    size = image_size or native
    if name == "digits" or family(name) is not None:
        images, labels = _digits_arrays()[split] if name == "digits" else family(name).arrays(
            name, split, data_dir)
        if size != native:
            images = np.stack([resize_and_center_crop(im, size) for im in images])
        return _in_memory(images, labels)

    spec = _TFDS[name]
    source = _tfds_source(name, split, data_dir)
    # ImageNet has no native size: every read is resized; the others only when asked for another size.
    resize = size != native or not spec.in_memory
    shape = (size, size, spec.image_shape[2])
    pool = concurrent.futures.ThreadPoolExecutor(_read_threads())
    if spec.in_memory:
        with pool:
            return _in_memory(*_decode(source, np.arange(len(source)), shape, resize, pool))
    return Split(num_examples=len(source), image_shape=shape,
                 read=lambda indices: _decode(source, np.asarray(indices), shape, resize, pool))
