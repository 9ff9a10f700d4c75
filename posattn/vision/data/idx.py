"""IDX files (the format of the MNIST family's original releases) and the datasets served from them offline.

Fashion-MNIST (Xiao, Rasul and Vollgraf 2017: 60,000 training and 10,000 test grayscale 28 x 28 images,
10 classes) ships as the Debian package `dataset-fashion-mnist`, which puts the four gzipped IDX files
of the original release under /usr/share/datasets/fashion-mnist/. They are served here under the tfds
name `fashion_mnist` with tfds's splits ("train": train-*, "test": t10k-*), labels and shape, read with
numpy (30 MB: held in memory, no TensorFlow). tfds builds its `fashion_mnist` from the same four files,
so both sources hold the same examples with the same labels (in another order: tfds shuffles on write).

An IDX file is a big-endian header (two zero bytes, a type code, the number of dimensions, one uint32
per dimension) followed by the array, row-major (http://yann.lecun.com/exdb/mnist/).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import os

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data.tfds_datasets import check_local_data_dir

# IDX type code -> numpy dtype (big-endian where it matters)
_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str) -> np.ndarray:
    """The array of an IDX file (gzipped if its name ends in .gz); ConfigError if it is not one."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:  # a gzip file cut short raises EOFError
        raise ConfigError(f"cannot read IDX file {path}: {e}") from e
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in _DTYPES:
        raise ConfigError(
            f"{path} is not an IDX file (it does not start with 0x0000 and a type code)"
        )
    ndim = data[3]
    header = 4 + 4 * ndim
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_DTYPES[data[2]])
    if len(data) != header + dtype.itemsize * int(np.prod(shape)):
        raise ConfigError(
            f"IDX file {path} holds {len(data) - header} bytes of data, its header "
            f"{shape} of {dtype} needs {dtype.itemsize * int(np.prod(shape))}"
        )
    return np.frombuffer(data, dtype, offset=header).reshape(shape)


@dataclasses.dataclass(frozen=True)
class IdxSpec:
    """A dataset of IDX files: its classes and image shape, where its files lie and how to get them."""

    num_classes: int
    image_shape: tuple[int, int, int]
    files: dict  # "train" | "test" -> (images file, labels file)
    default_dir: str
    env: str  # the environment variable that overrides default_dir
    install: str  # the command that installs the files in default_dir


_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
# tfds name -> its IDX files. Adding a dataset of the MNIST family is one line.
IDX_DATASETS = {
    "fashion_mnist": IdxSpec(
        10,
        (28, 28, 1),
        _MNIST_FILES,
        "/usr/share/datasets/fashion-mnist",
        "POSATTN_FASHION_MNIST_DIR",
        "apt-get install dataset-fashion-mnist",
    ),
}


def directory(name: str, idx_dir: str | None = None) -> str:
    """Where the IDX files of `name` are looked for: `idx_dir` (config.idx_dir), else the environment
    variable of its spec, else the Debian package's directory; ConfigError if that is not local
    (`tfds_datasets.check_local_data_dir`)."""
    spec = IDX_DATASETS[name]
    check_local_data_dir(idx_dir, "--config.idx_dir")
    check_local_data_dir(None if idx_dir else os.environ.get(spec.env), f"${spec.env}")
    return os.path.expanduser(idx_dir or os.environ.get(spec.env) or spec.default_dir)


def present(name: str, directory_: str) -> bool:
    """Whether `directory_` holds all the IDX files of `name`."""
    return all(
        os.path.isfile(os.path.join(directory_, f))
        for pair in IDX_DATASETS[name].files.values()
        for f in pair
    )


def arrays(name: str, directory_: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Split `split` of `name` from its IDX files in `directory_`: (images_NxHxWxC uint8, labels_N int32),
    read once per process (read-only). ConfigError if the files do not hold such a split."""
    return _arrays(name, os.path.abspath(directory_), split)


@functools.cache
def _arrays(name: str, directory_: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    spec = IDX_DATASETS[name]
    image_file, label_file = (os.path.join(directory_, f) for f in spec.files[split])
    images, labels = read_idx(image_file), read_idx(label_file)
    if images.dtype != np.uint8 or images.shape[1:] != spec.image_shape[:2]:
        raise ConfigError(
            f"{image_file} holds {images.dtype} images of shape {images.shape[1:]}; "
            f"{name} has uint8 images of {spec.image_shape[0]} x {spec.image_shape[1]}"
        )
    if (
        labels.shape != images.shape[:1]
        or labels.min(initial=0) < 0
        or labels.max(initial=0) >= spec.num_classes
    ):
        raise ConfigError(
            f"{label_file} does not hold {len(images)} labels in [0, {spec.num_classes})"
        )
    images, labels = images.reshape(-1, *spec.image_shape), labels.astype(np.int32)
    for a in (images, labels):
        a.setflags(write=False)
    return images, labels
