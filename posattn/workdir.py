"""The check every run makes of its `--workdir` before any work: it can be written, and it has room.

A workdir that cannot be written (permissions, a read-only or full disk, a path through a file) would
otherwise surface as a traceback at the first save, possibly hours in; `check_writable` turns it into one
`ConfigError` line before the run computes anything. Paths may be local or any `etils.epath` location
(gs:// on a TPU pod): the write probe works on both, the free-space figure only on local disks.
"""

import math
import os
import shutil

import jax
import numpy as np
from etils import epath

from posattn.errors import ConfigError, first_line

# Orbax stores a checkpoint's arrays uncompressed, plus metadata (tree structure, shapes, manifests):
# about 5% of the arrays' bytes for the digits ViT (1.66 MB on disk for 1.63 MB of arrays). A tenth
# on top of the arrays leaves room for that on any model.
CHECKPOINT_OVERHEAD = 0.10


def tree_bytes(tree) -> int:
    """Bytes of the arrays of a pytree of arrays or `jax.ShapeDtypeStruct`s (e.g. an abstract state)."""
    return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def checkpoint_bytes(abstract_state) -> int:
    """The disk space one checkpoint of `abstract_state` needs, estimated from its arrays' bytes: their
    global shapes, whatever their sharding (each array is written once, its shards by the processes
    holding them, into the one shared workdir)."""
    return int(tree_bytes(abstract_state) * (1 + CHECKPOINT_OVERHEAD))


def checkpoint_copies(keep: int, saves: int, saved: int = 0) -> int:
    """How many more checkpoints the disk must hold at once for a run that keeps the `keep` newest
    (all, if keep <= 0) of its `saves` saves: those kept, and the next one while it is written (before
    the oldest is deleted), less the `saved` ones already on the disk."""
    kept = min(keep, saves) if keep > 0 else saves
    return max(1, min(kept + 1, saves) - saved)


def saved_checkpoints(workdir) -> int:
    """The checkpoints already in `workdir`/checkpoints (their space is taken)."""
    path = epath.Path(workdir) / "checkpoints"
    return sum(p.name.isdigit() for p in path.iterdir()) if path.exists() else 0


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def free_bytes(path) -> int | None:
    """Free bytes on the local disk holding `path`; None for remote paths (gs://...)."""
    if "://" in str(path):
        return None
    return shutil.disk_usage(os.fspath(path)).free


def check_writable(workdir, need_bytes: int = 0, need_what: str = "one checkpoint") -> epath.Path:
    """Create `workdir` if needed and raise ConfigError unless a file can be written there and its disk
    has `need_bytes` free (for `need_what`, which the message names); the workdir's path.

    The probe is a real write (an empty file, removed at once): permission bits do not tell whether root
    can write, or whether the disk is mounted read-only. Any failure of the probe is refused, not only
    an OSError: a gs:// path read through TensorFlow's file system raises TensorFlow's own errors.
    """
    path = epath.Path(workdir)
    probe = path / f".write_probe.{os.getpid()}.{jax.process_index()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except Exception as e:  # noqa: BLE001 - whatever the file system raises, the workdir is unusable
        first = first_line(e)
        reason = getattr(e, "strerror", None) or f"{type(e).__name__}: {first}"
        room = " with room for the checkpoints" if need_bytes else ""
        raise ConfigError(
            f"--workdir={workdir} cannot be written ({reason}): choose a writable directory{room}"
        ) from e
    free = free_bytes(path)
    if free is not None and free < need_bytes:
        raise ConfigError(
            f"--workdir={workdir} has {_mib(free)} free, {need_what} needs about "
            f"{_mib(need_bytes)}: free space there or choose another --workdir"
        )
    return path
