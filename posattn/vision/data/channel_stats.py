"""Per-channel statistics of an image dataset on the [0, 1] pixel scale, which normalise its inputs:
the published constants (`KNOWN`), computed from a training split (`of_split`), or given by a config
or one's own arrays and checked (`check`).
"""

from __future__ import annotations

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data.split import Split

# Per-channel statistics of the training sets on the [0, 1] scale: the usual published constants (the
# CIFAR std is the per-pixel std, not the frequently copied per-image 0.2023/0.1994/0.2010), and
# Fashion-MNIST's over its 60,000 training images, so that both of its sources normalise alike.
KNOWN = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "svhn_cropped": ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970)),
    "imagenet2012": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
}
# Statistics of a training split larger than this are computed on a fixed random sample of this many images.
STATS_EXAMPLES = 10_000


def check(mean, std, channels: int, fields=("channel_mean", "channel_std")):
    """(mean, std) as tuples of floats, None if both are empty; ConfigError unless each has one finite
    number per channel (std positive) or both are empty. `fields` name them in the message."""
    empty = [v is None or np.size(v) == 0 for v in (mean, std)]
    if all(empty):
        return None
    out = []
    for field, values, positive in zip(fields, (mean, std), (False, True)):
        try:
            v = np.asarray([] if values is None else values, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            v = np.full(1, np.nan)
        if v.shape != (channels,) or not np.isfinite(v).all() or (positive and (v <= 0).any()):
            raise ConfigError(
                f"{field}={values!r} must be {channels} finite{' positive' if positive else ''} "
                f"number(s), one per channel on the [0, 1] pixel scale (set both {fields[0]} and "
                f"{fields[1]}, or neither to use the dataset's)"
            )
        # pixels in [0, 1] have a mean in [0, 1] and a std of at most 1/2 (1 allowed: "no scaling"); a
        # larger number is a statistic of the 0-255 scale, which would leave the inputs near-constant
        if (v < 0).any() or (v > 1).any():
            raise ConfigError(
                f"{field}={values!r} lies outside [0, 1]: the statistics are on the [0, 1] "
                "pixel scale (divide statistics of 0..255 pixels by 255)"
            )
        out.append(tuple(float(a) for a in v))
    return tuple(out)


def of_split(split: Split, chunk: int = 1024) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of a training split's pixels on the [0, 1] scale.

    Over every image of a split of up to `STATS_EXAMPLES` images, else over a fixed random sample of that
    many (numpy seed 0): the sample's standard error (~1e-3 of the std) is far below what normalisation
    is sensitive to, and a split read by index costs one decode per sampled image. Accumulated in float64
    over chunks (a float copy of a large uint8 split at once would take 8 times its memory).
    """
    n = split.num_examples
    indices = (
        np.arange(n)
        if n <= STATS_EXAMPLES
        else np.sort(np.random.default_rng(0).choice(n, STATS_EXAMPLES, replace=False))
    )
    C = split.image_shape[-1]
    total, squares, count = np.zeros(C), np.zeros(C), 0
    for start in range(0, len(indices), chunk):
        x = split.read(indices[start : start + chunk])[0].reshape(-1, C).astype(np.float64) / 255.0
        total, squares, count = total + x.sum(0), squares + (x * x).sum(0), count + len(x)
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean * mean, 0.0))
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)
