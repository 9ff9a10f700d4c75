"""Training and evaluation batches of an opened split: deterministic in (seed, step), split per process.

The global training batch of step t is a pure function of (seed, t): the examples at positions
t*B .. t*B + B - 1 of the endless sequence that visits the training set once per epoch, epoch e in the
order of a permutation drawn from a numpy Generator seeded by (seed, e). A run resumed at step t therefore
sees exactly the batches an uninterrupted run would (nothing of the pipeline is checkpointed: the
resumed run recomputes it from the step). Process p of P takes rows [p*B/P, (p+1)*B/P) of each global
batch, so the processes' batches concatenated in process order are the global batch; it reads only those
rows. Reading and decoding run in the caller's thread or in grain's worker processes (`train_batches`'s
`workers`; docs/decisions.md, "The input pipeline"), with the same batches either way.

Evaluation walks the split in order in global batches of `eval_batch_size` (the last one padded and
masked), each process again taking its contiguous slice: every example appears exactly once over all
processes and batches, and every process yields the same number of batches (collectives stay in step).

Training images are yielded natural: a permuted run (JSL22 Figure 5) permutes their pixel blocks in the
train step, after augmentation (`posattn.vision.setup.Setup.training_inputs`), so crops and flips act
on the natural image. Evaluation images are permuted here, by the `permute` the caller passes.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Callable, Iterator

import jax
import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data.datasets import Split

# The end of the endless step sequence that grain's datasets need (a dataset has a length).
_STEPS_END = 1 << 62


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


def _local_size(size: int, field: str, count: int) -> int:
    if size <= 0 or size % count:
        raise ConfigError(
            f"{field}={size} must be a positive multiple of the process count {count}"
        )
    return size // count


@dataclasses.dataclass(frozen=True)
class StepBatch:
    """This process's rows of the global training batch of a step: `StepBatch(...)(step)`.

    A picklable function of the step alone (what grain's worker processes run): the split is opened in
    each process on its first call (`open_split`, a split or a function of no arguments that opens it:
    a split that holds files or threads open does not pickle). `crop` > 0 draws each example's
    Inception crop at that side from the full-resolution image (`inception_crop.read_cropped`), with the
    entropy (seed, step, row of the global batch), so a crop never depends on the process layout."""

    open_split: Split | Callable[[], Split]
    seed: int
    global_batch_size: int
    rows: slice
    crop: int = 0

    @functools.cached_property
    def split(self) -> Split:
        return self.open_split if isinstance(self.open_split, Split) else self.open_split()

    def __call__(self, step: int) -> dict:
        step = int(step)
        indices = global_batch_indices(
            self.seed, step, self.global_batch_size, self.split.num_examples
        )[self.rows]
        if self.crop:
            from posattn.vision.data import inception_crop

            rows = np.arange(self.global_batch_size, dtype=np.int64)[self.rows]
            entropy = np.stack([np.full_like(rows, self.seed), np.full_like(rows, step), rows], 1)
            images, labels = inception_crop.read_cropped(self.split, indices, entropy, self.crop)
        else:
            images, labels = self.split.read(indices)
        return {"image": images, "label": labels}


def train_batches(
    split: Split | Callable[[], Split],
    *,
    seed: int,
    global_batch_size: int,
    start_step: int = 0,
    workers: int = 0,
    crop: int = 0,
    process_index: int | None = None,
    process_count: int | None = None,
) -> Iterator[dict]:
    """Endless `{"image": uint8 (B_local, H, W, C), "label": int32 (B_local,)}`, from step `start_step`.

    B_local = global_batch_size / process_count; this process's rows of the global batch of each step
    (`StepBatch`; `crop` its Inception crop side, 0 none). `split` is a split or a function of no
    arguments that opens it. `workers` > 0 reads and decodes in that many worker processes (grain's
    `mp_prefetch`, each worker taking every workers-th step, the order kept), 0 in the caller's thread:
    the batches are the same. Close the iterator (`close()`) to stop the workers.
    """
    index, count = _processes(process_index, process_count)
    local = _local_size(global_batch_size, "global_batch_size", count)
    if seed < 0 or start_step < 0 or workers < 0 or crop < 0:
        raise ConfigError(
            f"seed ({seed}), start_step ({start_step}), workers ({workers}) and crop ({crop}) "
            "must be non-negative"
        )
    batch = StepBatch(
        split, seed, global_batch_size, slice(index * local, (index + 1) * local), crop
    )
    if not workers:
        return (batch(step) for step in itertools.count(start_step))
    return _in_workers(batch, start_step, workers)


def _in_workers(batch: StepBatch, start_step: int, workers: int) -> Iterator[dict]:
    import grain
    from absl import flags

    # grain reads an absl flag of its own in the parent process; from a library call (a notebook, a test)
    # no absl app has parsed the command line, so the flags keep their defaults, marked as parsed.
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    # One thread per worker computing at most one batch ahead: an element is a whole batch, so grain's
    # default (16 threads, 500 elements ahead, for single examples) would hold hundreds of batches per
    # worker and its threads would contend for one interpreter; the parallelism is the processes'.
    steps = (
        grain.MapDataset.range(start_step, _STEPS_END)
        .map(batch)
        .to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=1))
    )
    iterator = iter(steps.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers)))
    try:
        for element in iterator:
            # grain hands back views of shared memory; the copy frees it for the workers' next batches
            yield {k: np.array(v) for k, v in element.items()}
    finally:
        iterator.close()


def num_eval_batches(num_examples: int, eval_batch_size: int) -> int:
    """Global eval batches of a split of `num_examples`: the last one padded."""
    return math.ceil(num_examples / eval_batch_size)


def eval_batches(
    split: Split,
    *,
    eval_batch_size: int,
    permute: Callable = lambda images: images,
    process_index: int | None = None,
    process_count: int | None = None,
) -> Iterator[dict]:
    """Finite `{"image", "label", "mask"}` batches of B_local = eval_batch_size / process_count rows.

    Over all processes and batches every example of `split` appears exactly once with mask True; padding
    rows are zero images with label 0 and mask False. Every process yields the same number of batches.
    Images pass through `permute` (a run's block permutation).
    """
    index, count = _processes(process_index, process_count)
    local = _local_size(eval_batch_size, "eval_batch_size", count)
    n = split.num_examples

    def batches():
        for b in range(num_eval_batches(n, eval_batch_size)):
            positions = b * eval_batch_size + index * local + np.arange(local)
            mask = positions < n
            images = np.zeros((local, *split.image_shape), np.uint8)
            labels = np.zeros((local,), np.int32)
            images[mask], labels[mask] = split.read(positions[mask])
            yield {"image": np.ascontiguousarray(permute(images)), "label": labels, "mask": mask}

    return batches()
