"""Training and evaluation batches: deterministic in (seed, step), split per process, pixel blocks permuted.

The global training batch of step t is a pure function of (seed, t): the examples at positions
t*B .. t*B + B - 1 of the endless sequence that visits the training set once per epoch, epoch e in the
order of a permutation drawn from a numpy Generator seeded by (seed, e). A run resumed at step t therefore
sees exactly the batches an uninterrupted run would. Process p of P takes rows [p*B/P, (p+1)*B/P) of each
global batch, so the processes' batches concatenated in process order are the global batch.

Evaluation walks the split in order in global batches of `eval_batch_size` (the last one padded and
masked), each process again taking its contiguous slice: every example appears exactly once over all
processes and batches, and every process yields the same number of batches (collectives stay in step).

Figure 5 of JSL22 (SPEC 2.2) permutes the g x g pixel blocks of every train and test image by one fixed
random permutation; `permute_blocks` applies it and `unpermute_blocks` undoes it. Test images are
permuted here; training images are yielded natural and permuted in the train step after augmentation
(`pixel_permutation`, `train.training_inputs`), so crops and flips act on the natural image.
"""
from __future__ import annotations

import functools
import math
from typing import Iterator

import jax
import numpy as np

from posattn.errors import ConfigError
from posattn.vision.datasets import (  # noqa: F401  (re-exported: the data interface lives here)
    DATASETS, DatasetInfo, Split, dataset_info, native_image_size, open_split)


def image_shape(config) -> tuple[int, int, int]:
    """(H, W, C) of the images `train_batches` and `eval_batches` yield for this config."""
    name = config.dataset
    size = config.get("image_size", 0) or native_image_size(name)
    return (size, size, 1 if name == "digits" else 3)


# ---------------------------------------------------------------------------------- block permutation

def block_permutation(image_hw: tuple[int, int], g: int, seed: int) -> np.ndarray:
    """The fixed permutation of the (H/g)*(W/g) pixel blocks of side g, drawn from `seed`.

    Blocks are numbered row-major; g must divide H and W (g = H = W gives the one-block identity).
    """
    h, w = image_hw
    if g <= 0 or h % g or w % g:
        raise ConfigError(f"permute_block={g} must be a positive divisor of the image sides {h} and {w} "
                          "(or 0 for no permutation)")
    return np.random.default_rng(seed).permutation((h // g) * (w // g))


def _blocks(x: np.ndarray, g: int):
    """(..., H, W, C) -> (..., nH*nW, g, g, C), blocks row-major."""
    *lead, h, w, c = x.shape
    x = x.reshape(*lead, h // g, g, w // g, g, c).swapaxes(-4, -3)
    return x.reshape(*lead, (h // g) * (w // g), g, g, c)


def _unblocks(x: np.ndarray, h: int, w: int):
    """Inverse of `_blocks`."""
    *lead, _, g, _, c = x.shape
    x = x.reshape(*lead, h // g, w // g, g, g, c).swapaxes(-4, -3)
    return x.reshape(*lead, h, w, c)


def permute_blocks(images_xHxWxC, g: int, perm):
    """Block k of the output is block perm[k] of the input (blocks of g x g pixels, row-major).

    Works on numpy and jax arrays with any leading axes. The same `perm` acts on any grid with the same
    number of blocks: on a map over the patches of side p (e.g. positional-embedding similarities,
    shape (H/p, W/p, D)), pass g/p.
    """
    h, w = images_xHxWxC.shape[-3:-1]
    return _unblocks(_blocks(images_xHxWxC, g)[..., perm, :, :, :], h, w)


def unpermute_blocks(images_xHxWxC, g: int, perm):
    """Inverse of `permute_blocks`: unpermute_blocks(permute_blocks(x, g, perm), g, perm) == x."""
    return permute_blocks(images_xHxWxC, g, np.argsort(perm))


def pixel_permutation(config, shape: tuple[int, int, int]):
    """The config's block permutation as a function on (numpy or jax) image batches; identity when
    permute_block is 0. Raises ConfigError for a block size that does not divide the image."""
    g = config.get("permute_block", 0)
    if g == 0:
        return lambda images: images
    perm = block_permutation(shape[:2], g, config.get("permute_seed", 0))
    return lambda images: permute_blocks(images, g, perm)


# ---------------------------------------------------------------------------------- batch schedule

@functools.lru_cache(maxsize=4)
def epoch_permutation(seed: int, epoch: int, num_examples: int) -> np.ndarray:
    """The order in which epoch `epoch` visits the training set (read-only; cached: it is pure)."""
    perm = np.random.default_rng([seed, epoch]).permutation(num_examples)
    perm.setflags(write=False)
    return perm


def global_batch_indices(seed: int, step: int, batch_size: int, num_examples: int) -> np.ndarray:
    """Training-set indices of the global batch of `step` (a batch may straddle two epochs)."""
    positions = step * batch_size + np.arange(batch_size, dtype=np.int64)
    epochs, offsets = np.divmod(positions, num_examples)
    indices = np.empty(batch_size, np.int64)
    for epoch in np.unique(epochs):
        rows = epochs == epoch
        indices[rows] = epoch_permutation(seed, int(epoch), num_examples)[offsets[rows]]
    return indices


def _processes(process_index, process_count) -> tuple[int, int]:
    index = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if not 0 <= index < count:
        raise ConfigError(f"process_index {index} must lie in [0, process_count={count})")
    return index, count


def _local_size(config, field: str, count: int) -> int:
    size = config[field]
    if size <= 0 or size % count:
        raise ConfigError(f"{field}={size} must be a positive multiple of the process count {count}")
    return size // count


def train_batches(config, start_step: int = 0, *, process_index: int | None = None,
                  process_count: int | None = None) -> Iterator[dict]:
    """Endless `{"image": uint8 (B_local, H, W, C), "label": int32 (B_local,)}`, from step `start_step`.

    B_local = global_batch_size / process_count; this process's rows of the global batch of each step.
    The images are natural: a permuted config's blocks are permuted after augmentation, in the step.
    """
    index, count = _processes(process_index, process_count)
    local = _local_size(config, "global_batch_size", count)
    if config.seed < 0 or start_step < 0:
        raise ConfigError(f"seed ({config.seed}) and start_step ({start_step}) must be non-negative")
    shape = image_shape(config)
    pixel_permutation(config, shape)  # validated before the (slow) read of the split; applied in the step
    split = open_split(config.dataset, "train", data_dir=config.get("data_dir"),
                       image_size=config.get("image_size", 0))
    rows = slice(index * local, (index + 1) * local)

    def batches():
        step = start_step
        while True:
            indices = global_batch_indices(config.seed, step, config.global_batch_size,
                                           split.num_examples)
            images, labels = split.read(indices[rows])
            yield {"image": images, "label": labels}
            step += 1

    return batches()


def num_eval_batches(num_examples: int, eval_batch_size: int) -> int:
    """Global eval batches of a split of `num_examples`: the last one padded."""
    return math.ceil(num_examples / eval_batch_size)


def eval_batches(config, split: str = "test", *, process_index: int | None = None,
                 process_count: int | None = None) -> Iterator[dict]:
    """Finite `{"image", "label", "mask"}` batches of B_local = eval_batch_size / process_count rows.

    Over all processes and batches every example of `split` ("train" | "test"; ImageNet's "test" is its
    labelled validation split) appears exactly once with mask True; padding rows are zero images with
    label 0 and mask False. Every process yields the same number of batches.
    """
    index, count = _processes(process_index, process_count)
    local = _local_size(config, "eval_batch_size", count)
    shape = image_shape(config)
    permute = pixel_permutation(config, shape)
    source = open_split(config.dataset, split, data_dir=config.get("data_dir"),
                        image_size=config.get("image_size", 0))
    n = source.num_examples

    def batches():
        for b in range(num_eval_batches(n, config.eval_batch_size)):
            positions = b * config.eval_batch_size + index * local + np.arange(local)
            mask = positions < n
            images = np.zeros((local, *shape), np.uint8)
            labels = np.zeros((local,), np.int32)
            images[mask], labels[mask] = source.read(positions[mask])
            yield {"image": np.ascontiguousarray(permute(images)), "label": labels, "mask": mask}

    return batches()
