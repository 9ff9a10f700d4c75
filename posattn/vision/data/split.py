"""One split of an image dataset behind random access (`Split`), and what every source of splits shares:
held in memory, resized to a square side (its per-channel statistics: `channel_stats`).

A `Split` is its size, its image shape and `read(indices_N) -> (images_NxHxWxC uint8, labels_N int32)`.
An in-memory split indexes one uint8 array (`in_memory` True: reading costs nothing, so the input
pipeline runs no worker processes for it); a split too large for memory decodes the examples it is
asked for (`posattn.vision.data.tfds_datasets`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from posattn.errors import ConfigError

# The seed of the draw of validation examples: a constant, so the hold-out never depends on the run's seed.
VALIDATION_SEED = 20221128
# The largest split a source decodes once and holds as one uint8 array (ImageNet's is ~190 GB at
# 224 x 224): reading it then only indexes (`in_memory`), where a larger one decodes every read.
IN_MEMORY_BYTES = 4 << 30


@dataclasses.dataclass(frozen=True)
class Split:
    """One split behind random access: `read(indices_N) -> (images_NxHxWxC uint8, labels_N int32)`.

    `original(i) -> (image_HxWxC uint8, label)` is example i as stored, at full resolution (what a
    random-resized crop takes, `posattn.vision.data.inception_crop`), where the split can give it: a
    split decoded per read (records, tfds' large splits) and one held in memory (its stored image); None
    where it cannot. `in_memory` where a read only indexes arrays held in memory (nothing to decode)."""

    num_examples: int
    image_shape: tuple[int, int, int]
    read: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    original: Callable[[int], tuple[np.ndarray, int]] | None = None
    in_memory: bool = False


def in_memory(images_NxHxWxC: np.ndarray, labels_N: np.ndarray) -> Split:
    """The split of arrays held in memory (indexed, never copied whole)."""

    def read(indices):
        indices = np.asarray(indices, dtype=np.int64)
        return images_NxHxWxC[indices], labels_N[indices]

    return Split(
        num_examples=len(labels_N),
        image_shape=tuple(images_NxHxWxC.shape[1:]),
        read=read,
        original=lambda i: (images_NxHxWxC[int(i)], int(labels_N[int(i)])),
        in_memory=True,
    )


def subset(split: Split, indices_M: np.ndarray) -> Split:
    """The examples `indices_M` of `split`, as a split of their own (example i reads `indices_M[i]`)."""
    indices_M = np.asarray(indices_M, dtype=np.int64)
    return Split(
        num_examples=len(indices_M),
        image_shape=split.image_shape,
        read=lambda indices: split.read(indices_M[np.asarray(indices, dtype=np.int64)]),
        original=None
        if split.original is None
        else lambda i: split.original(int(indices_M[int(i)])),
        in_memory=split.in_memory,
    )


def validation_indices(num_train: int, num_validation: int) -> np.ndarray:
    """The training examples held out for validation: a fixed random `num_validation` of `num_train`,
    sorted, drawn with a constant seed so that every run of a dataset (any config.seed) holds out the
    same examples; ConfigError unless 0 < num_validation < num_train."""
    if not 0 < num_validation < num_train:
        raise ConfigError(
            f"validation_examples={num_validation} must lie between 1 and the training split's "
            f"{num_train - 1} (0 holds out none)"
        )
    return np.sort(np.random.default_rng(VALIDATION_SEED).permutation(num_train)[:num_validation])


def resize_and_center_crop(image_HxWxC: np.ndarray, size: int) -> np.ndarray:
    """Resize so the shorter side is `size` (antialiased bilinear), then take the central size x size.

    uint8 pixels 0..255; or floats in [0, 1] (a run on float arrays), resized as their 256 levels
    round(255 x), as the run's own images were, and given back as floats (levels / 255). ConfigError for
    another dtype or floats outside [0, 1] (PIL would refuse them or clip them to 0..255)."""
    from PIL import Image

    image_HxWxC = np.asarray(image_HxWxC)
    h, w, c = image_HxWxC.shape
    if (h, w) == (size, size):
        return image_HxWxC
    if image_HxWxC.dtype != np.uint8:
        x = image_HxWxC
        floats = np.issubdtype(x.dtype, np.floating) and np.isfinite(x).all()
        if not (floats and 0 <= x.min() <= x.max() <= 1):
            raise ConfigError(
                f"an image of dtype {x.dtype} with values in [{x.min()}, {x.max()}]: resize "
                "uint8 pixels 0..255 or floats in [0, 1]"
            )
        levels = np.round(x * 255.0).astype(np.uint8)
        return resize_and_center_crop(levels, size).astype(np.float32) / np.float32(255.0)
    scale = size / min(h, w)
    new_h, new_w = max(size, round(h * scale)), max(size, round(w * scale))
    pil = Image.fromarray(image_HxWxC[..., 0] if c == 1 else image_HxWxC)
    resized = np.asarray(pil.resize((new_w, new_h), Image.BILINEAR)).reshape(new_h, new_w, c)
    top, left = (new_h - size) // 2, (new_w - size) // 2
    return resized[top : top + size, left : left + size]


def resized(images_NxHxWxC: np.ndarray, size: int) -> np.ndarray:
    """Every image at size x size (`resize_and_center_crop`); the array itself if already so."""
    if images_NxHxWxC.shape[1:3] == (size, size):
        return images_NxHxWxC
    return np.stack([resize_and_center_crop(image, size) for image in images_NxHxWxC])
