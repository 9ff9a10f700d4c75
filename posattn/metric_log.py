"""The metrics record of every run: JSON lines in `metrics.jsonl` and TensorBoard events beside them,
with one schema for the theory and the image regimes (docs/metrics.md).

Every record is a flat dict of scalars with an integer "step". Keys shared by both regimes:

    step            int, the optimiser step the record describes (0 = before the first update)
    train_loss      the training objective: the theory run's risk (E) or (P); the image run's mean
                    loss over the steps since the last log
    train_accuracy  fraction of training examples classified right (image runs)
    test_loss       mean loss on the test set (theory: its fixed `n_test` samples)
    test_error      fraction of test examples classified wrong, in [0, 1]
    test_accuracy   1 - test_error

A study's binary that runs no optimiser of its own (shallow_vit, token_grid, how_vits_work) writes one
record per stage, cell or model, its "step" that record's place in the run, and may nest its results
(TensorBoard takes the top-level numbers).

Anything else a regime measures keeps its own name (theory: alpha, A_within, patch_association_share,
...; images: train_grad_norm, train_lr, images_per_second, ...). `from_theory` and `paired_test_metrics` put a
regime's own names into this schema; `MetricLog` writes a record to both (process 0 only).
TensorBoard (`tensorboard --logdir WORKDIR`) reads the events in WORKDIR/tensorboard/, written by
tensorboardX.

On a store that cannot append (an `etils.epath` URL such as gs://), the JSON lines go into numbered
chunks, metrics.jsonl.d/000000.jsonl, ... (`posattn.chunked_log`, which says why), and each event file is
written on the local disk and copied whole; `read` joins the chunks in order.
"""

import math
import numbers

from etils import epath

from posattn import chunked_log, io

TENSORBOARD_DIR = "tensorboard"
METRICS_FILE = "metrics.jsonl"
METRICS_CHUNKS = chunked_log.chunks_dir(
    METRICS_FILE
).name  # its chunks, where it cannot be appended


def read(workdir) -> list[dict]:
    """Every record of `workdir`'s metrics.jsonl (and of its chunks, `chunked_log.read_jsonl`), in
    order (`io.read_jsonl`: a last line cut short by a kill is left out; a damaged line before it is a
    ConfigError); [] where the run wrote none."""
    return chunked_log.read_jsonl(epath.Path(workdir) / METRICS_FILE)


def paired_test_metrics(record: dict) -> dict:
    """`record` with test_error and test_accuracy both present when either is (1 - the other)."""
    out = dict(record)
    if "test_error" in out and "test_accuracy" not in out:
        out["test_accuracy"] = 1.0 - float(out["test_error"])
    elif "test_accuracy" in out and "test_error" not in out:
        out["test_error"] = 1.0 - float(out["test_accuracy"])
    return out


def from_theory(entry: dict) -> dict:
    """A history entry of `posattn.theory.gd` in the shared schema: its risk "loss" is "train_loss"."""
    record = {("train_loss" if k == "loss" else k): v for k, v in io.jsonable(entry).items()}
    return paired_test_metrics(record)


class MetricLog:
    """Appends records to `workdir/metrics.jsonl` and to TensorBoard events in `workdir/tensorboard`
    (on a store that cannot append: chunks, and event files copied whole; module docstring).

    `fresh=True` empties metrics.jsonl first (a run that starts over). A run that continues from step
    `start_step` (0: from its start) keeps the records of the steps up to it and drops the later ones,
    which it is about to run again (those of a run killed after its last checkpoint, or stopped by a
    diverged step), in metrics.jsonl and in TensorBoard (`purge_step`); without either, records are
    appended. Only the writing process (`io.is_writer`) opens the event file, so the same calls are
    safe on every host.
    """

    def __init__(self, workdir, *, fresh: bool = False, start_step: int | None = None):
        self.path = f"{workdir}/{METRICS_FILE}"
        if fresh:
            chunked_log.clear(self.path)
        elif start_step is not None:
            chunked_log.keep(self.path, lambda r: r["step"] <= start_step)
        self._lines = self._events = None
        if not io.is_writer():
            return
        self._lines = chunked_log.JsonlWriter(self.path)
        purge = None if start_step is None else start_step + 1
        logdir = f"{workdir}/{TENSORBOARD_DIR}"
        if io.is_local(workdir):
            from tensorboardX import SummaryWriter  # imported here: only a writing process needs it

            self._events = SummaryWriter(logdir=logdir, flush_secs=30, purge_step=purge)
        else:
            self._events = chunked_log.UploadedEvents(logdir, purge_step=purge)

    def write(self, record: dict) -> None:
        """Append one record (it must have "step"); its finite numbers become TensorBoard scalars."""
        record = io.jsonable(record)
        if "step" not in record:
            raise ValueError(f"a metrics record needs a 'step'; got keys {sorted(record)}")
        if self._lines is None:
            return
        self._lines.write(record)
        # A non-finite value (a diverged run) is in the JSON lines; TensorBoard would drop it.
        scalars = {
            k: v
            for k, v in record.items()
            if k != "step"
            and isinstance(v, numbers.Real)
            and not isinstance(v, bool)
            and math.isfinite(v)
        }
        step = int(record["step"])
        if isinstance(self._events, chunked_log.UploadedEvents):
            self._events.write(step, scalars)
        else:
            for key, value in scalars.items():
                self._events.add_scalar(key, value, step)

    def close(self) -> None:
        """Flush and close the event file (the JSON lines are written as they come)."""
        if self._events is not None:
            self._events.close()
            self._events = None
