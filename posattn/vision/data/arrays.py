"""A dataset of your own numpy arrays: `from_arrays`.

The result is a `posattn.vision.data.datasets.Dataset` held in memory. It is passed as it is to
`posattn.vision.train.train(config, workdir, dataset=...)`, `posattn.vision.sweep.run_cell`,
`posattn.vision.setup.resolve` and `posattn.papers.pk22.suite.measure`, with `config.dataset` set to its
name; nothing is registered under that name. The run records what loading it needs (classes, image
shape, channel statistics: run.json), so `posattn.vision.checkpoint.load_run` rebuilds and normalises
it in a new process without the arrays.
"""
from __future__ import annotations

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data import datasets


def _images(x, what: str) -> np.ndarray:
    """uint8 (N, H, W, C) from uint8 pixels 0..255 or floats in [0, 1] (rounded to the nearest of the
    256 levels the pipeline holds), (N, H, W) taken as grayscale."""
    x = np.asarray(x)
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or x.shape[-1] not in (1, 3) or 0 in x.shape[:3]:
        raise ConfigError(f"{what} have shape {x.shape}: give (N, H, W) grayscale or (N, H, W, C) images "
                          "with C = 1 or 3 and N, H, W > 0")
    if x.shape[1] != x.shape[2]:
        raise ConfigError(f"{what} are {x.shape[1]} x {x.shape[2]}: the models take square images; crop or "
                          "resize them to a square first")
    if x.dtype == np.uint8:
        return x.copy()  # (the dataset is read-only, the caller's array stays theirs)
    if not np.issubdtype(x.dtype, np.floating):
        raise ConfigError(f"{what} have dtype {x.dtype}: give uint8 pixels (0..255) or floats in [0, 1] "
                          "(e.g. x.astype(np.uint8) for integer pixels 0..255)")
    low, high = float(np.min(x)), float(np.max(x))
    if not (np.isfinite(low) and np.isfinite(high) and 0.0 <= low and high <= 1.0):
        raise ConfigError(f"{what} are floats in [{low}, {high}]: float images must lie in [0, 1] (divide "
                          "pixels 0..255 by 255, or pass them as uint8)")
    return np.round(x * 255.0).astype(np.uint8)


def _labels(y, n: int, num_classes: int, what: str) -> np.ndarray:
    y = np.asarray(y)
    if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
        raise ConfigError(f"{what} have shape {y.shape} and dtype {y.dtype}: give {n} integer labels, one per image")
    if y.min() < 0 or y.max() >= num_classes:
        raise ConfigError(f"{what} lie in [{y.min()}, {y.max()}]: labels must lie in [0, num_classes={num_classes})")
    return y.astype(np.int32)


def from_arrays(train_images, train_labels, test_images, test_labels, *, num_classes: int,
                name: str = "arrays", mean=None, std=None) -> datasets.InMemoryDataset:
    """A dataset of numpy arrays (validated; ConfigError with what to change on any fault).

    Images: uint8 (pixels 0..255) or float in [0, 1] (stored as uint8: round(255 x)), shape (N, H, W)
    or (N, H, W, C) with C in {1, 3}, square, the same shape in both splits. Labels: integers in
    [0, num_classes), one per image. `mean` and `std` (per channel, [0, 1] scale) normalise the inputs;
    by default they are computed from the training images. `name` is what config.dataset must say; it
    may not be one of the names the library serves itself.
    """
    if not isinstance(name, str) or not name or name in datasets.local_names() or datasets.family(name):
        raise ConfigError(f"name={name!r}: give the arrays a name of their own (not one of "
                          f"{', '.join(datasets.local_names())})")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        raise ConfigError(f"num_classes={num_classes!r} must be a positive integer")
    train_x, test_x = _images(train_images, "train_images"), _images(test_images, "test_images")
    if train_x.shape[1:] != test_x.shape[1:]:
        raise ConfigError(f"train_images are {train_x.shape[1:]} and test_images {test_x.shape[1:]}: both "
                          "splits need images of one shape")
    splits = {"train": (train_x, _labels(train_labels, len(train_x), num_classes, "train_labels")),
              "test": (test_x, _labels(test_labels, len(test_x), num_classes, "test_labels"))}
    for array in (a for pair in splits.values() for a in pair):
        array.setflags(write=False)
    stats = datasets.check_stats(mean, std, train_x.shape[-1], ("mean", "std"))
    return datasets.InMemoryDataset(name, int(num_classes), tuple(train_x.shape[1:]), splits.__getitem__, stats)
