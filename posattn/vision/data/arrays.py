"""A dataset of your own numpy arrays: `from_arrays`.

The result is a `posattn.vision.data.datasets.Dataset` held in memory. It is passed as it is to
`posattn.vision.train.train(config, workdir, dataset=...)`, `posattn.vision.sweep.run_cell`,
`posattn.vision.setup.resolve` and `posattn.papers.pk22.suite.measure`, with `config.dataset` set to its
name; nothing is registered under that name. The run records what loading it needs (classes, image
shape, channel statistics, the pixel scale the images were given on: run.json), so
`posattn.vision.runs.load_run` rebuilds and normalises it in a new process without the arrays.
"""

from __future__ import annotations

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data import channel_stats, datasets


def pixel_levels(x, what: str) -> tuple[np.ndarray, str]:
    """(the uint8 levels 0..255 the pipeline holds, the scale of `datasets.PIXEL_SCALES` they were given
    on) of uint8 pixels 0..255 (kept) or floats in [0, 1] (rounded: round(255 x)); ConfigError (one line)
    for another dtype, a NaN or inf, or floats outside [0, 1]."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return x.copy(), "uint8"  # (the dataset is read-only, the caller's array stays theirs)
    if not np.issubdtype(x.dtype, np.floating):
        raise ConfigError(
            f"{what} have dtype {x.dtype}: give uint8 pixels (0..255) or floats in [0, 1] "
            "(e.g. x.astype(np.uint8) for integer pixels 0..255)"
        )
    if not np.isfinite(x).all():
        raise ConfigError(
            f"{what} hold {int(np.sum(~np.isfinite(x)))} NaN or infinite values: give finite "
            "pixels (uint8 0..255 or floats in [0, 1])"
        )
    low, high = (float(x.min()), float(x.max())) if x.size else (0.0, 0.0)
    if not (0.0 <= low and high <= 1.0):
        raise ConfigError(
            f"{what} are floats in [{low}, {high}]: float images must lie in [0, 1] (divide "
            "pixels 0..255 by 255, or pass them as uint8)"
        )
    return np.round(x * 255.0).astype(np.uint8), "float"


def _images(x, what: str) -> tuple[np.ndarray, str]:
    """(uint8 (N, H, W, C), scale) of `pixel_levels`; (N, H, W) taken as one channel (grayscale)."""
    x = np.asarray(x)
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or x.shape[-1] not in (1, 3) or 0 in x.shape[:3]:
        # (N, C, H, W) with C = 1 or 3 is the layout of PyTorch's tensors: say how to move the axis
        channels_first = x.ndim == 4 and x.shape[1] in (1, 3) and x.shape[-1] not in (1, 3)
        raise ConfigError(
            f"{what} have shape {x.shape}: give (N, H, W) grayscale or (N, H, W, C) images "
            "with C = 1 or 3 and N, H, W > 0"
            + (" (channels last: x.transpose(0, 2, 3, 1))" if channels_first else "")
        )
    if x.shape[1] != x.shape[2]:
        raise ConfigError(
            f"{what} are {x.shape[1]} x {x.shape[2]}: the models take square images; crop or "
            "resize them to a square first"
        )
    return pixel_levels(x, what)


def _labels(y, n: int, num_classes: int, what: str) -> np.ndarray:
    y = np.asarray(y)
    if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
        raise ConfigError(
            f"{what} have shape {y.shape} and dtype {y.dtype}: give {n} integer labels, one per image"
        )
    if y.min() < 0 or y.max() >= num_classes:
        raise ConfigError(
            f"{what} lie in [{y.min()}, {y.max()}]: labels must lie in [0, num_classes={num_classes})"
        )
    return y.astype(np.int32)


def from_arrays(
    train_images,
    train_labels,
    test_images,
    test_labels,
    *,
    num_classes: int,
    name: str = "arrays",
    mean=None,
    std=None,
) -> datasets.InMemoryDataset:
    """A dataset of numpy arrays (validated; ConfigError with what to change on any fault).

    Images: uint8 (pixels 0..255) or float in [0, 1] (stored as uint8: round(255 x)), both splits on one
    scale, which the run records (a loaded run's preprocessing takes images on it again); shape (N, H, W)
    (one channel) or (N, H, W, C) with C in {1, 3}, square, the same shape in both splits; no NaN.
    Labels: integers in [0, num_classes), one per image. `mean` and `std` (per channel, [0, 1] scale)
    normalise the inputs; by default they are computed from the training images. `name` is what
    config.dataset must say; it may not be one of the names the library serves itself. Whether a mirror
    image keeps its label is unknown: a run flips these images only where its config sets augment.flip.
    """
    if (
        not isinstance(name, str)
        or not name
        or name in datasets.local_names()
        or datasets.family(name)
    ):
        raise ConfigError(
            f"name={name!r}: give the arrays a name of their own (not one of "
            f"{', '.join(datasets.local_names())})"
        )
    if (
        isinstance(num_classes, bool)
        or not isinstance(num_classes, (int, np.integer))
        or num_classes < 1
    ):
        raise ConfigError(f"num_classes={num_classes!r} must be a positive integer")
    (train_x, scale), (test_x, test_scale) = (
        _images(train_images, "train_images"),
        _images(test_images, "test_images"),
    )
    if scale != test_scale:  # one model reads both: a mixed pair is one split on the wrong scale
        raise ConfigError(
            f"train_images are {datasets.PIXEL_SCALES[scale]}, test_images "
            f"{datasets.PIXEL_SCALES[test_scale]}: give both splits on one scale"
        )
    if train_x.shape[1:] != test_x.shape[1:]:
        raise ConfigError(
            f"train_images are {train_x.shape[1:]} and test_images {test_x.shape[1:]}: both "
            "splits need images of one shape"
        )
    splits = {
        "train": (train_x, _labels(train_labels, len(train_x), num_classes, "train_labels")),
        "test": (test_x, _labels(test_labels, len(test_x), num_classes, "test_labels")),
    }
    for array in (a for pair in splits.values() for a in pair):
        array.setflags(write=False)
    stats = channel_stats.check(mean, std, train_x.shape[-1], ("mean", "std"))
    return datasets.InMemoryDataset(
        name, int(num_classes), tuple(train_x.shape[1:]), splits.__getitem__, stats, pixels=scale
    )
