"""Faults injected on purpose into the image trainer, for its fault drill (drills/faults.py) and its
tests: a disk that fills up or turns read-only while a run trains (`failing_saves`), a damaged
checkpoint (`damage_checkpoint`) and an update that diverges at a chosen step (`nan_at_step`).

Neither can be made for real everywhere (a full or read-only file system needs a mount, and root writes
through permission bits), so `failing_saves` makes orbax's save fail as such a disk makes it fail, at
one of the two points where it does: when the save starts and creates the step's folder (`at="start"`,
the error raised by the save call), or while the arrays are written in the background (`at="background"`,
an extra write of the save that fails, so orbax's background commit raises it when the save completes).
"""

import concurrent.futures
import contextlib
import errno as errno_lib
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

WHEN = ("start", "background")


def _oserror(code: int, path) -> OSError:
    return OSError(code, os.strerror(code), str(path))


@contextlib.contextmanager
def failing_saves(code: int = errno_lib.ENOSPC, *, from_step: int = 0, at: str = "background"):
    """Within the block, every checkpoint save of a step >= `from_step` fails with OSError(`code`)
    (ENOSPC: a full disk; EROFS: a read-only one) `at` "start" or in the "background"."""
    if at not in WHEN:
        raise ValueError(f"at={at!r}: one of {WHEN}")
    manager_save, handler_save = (
        ocp.CheckpointManager.save,
        ocp.StandardCheckpointHandler.async_save,
    )
    failing = []  # the step folder whose save is under way and must fail (the handler runs in its thread)

    def save(self, step, *args, **kwargs):
        if step < from_step:
            return manager_save(self, step, *args, **kwargs)
        folder = self.directory / f"{step}{ocp.path.atomicity.TMP_DIR_SUFFIX}"
        if at == "start":
            raise _oserror(code, folder)
        failing.append(folder)
        try:
            return manager_save(self, step, *args, **kwargs)
        finally:
            failing.clear()

    async def async_save(self, *args, **kwargs):
        futures = await handler_save(self, *args, **kwargs) or []
        if failing:
            write = concurrent.futures.Future()
            write.set_exception(_oserror(code, failing[0]))
            futures = [*futures, write]
        return futures

    ocp.CheckpointManager.save, ocp.StandardCheckpointHandler.async_save = save, async_save
    try:
        yield
    finally:
        ocp.CheckpointManager.save, ocp.StandardCheckpointHandler.async_save = (
            manager_save,
            handler_save,
        )


def damage_checkpoint(step_dir, kind: str) -> str:
    """Damage orbax checkpoint `step_dir` in place and return what was damaged.

    "truncate" cuts its largest file in half (orbax then fails to read it). "bitflip" flips one bit in
    the middle of its largest array and writes the item back through orbax, so its files are
    well-formed and orbax alone restores the wrong value without complaint; only the digest the
    checkpoint carries can tell. (Flipping a bit in the files themselves does not do that reliably:
    orbax compresses the arrays, and a flipped bit in a compressed chunk may or may not fail to decode,
    depending on where the chunk lies in the file.)
    """
    step_dir = pathlib.Path(step_dir)
    if kind == "truncate":
        files = sorted(
            (p for p in step_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size
        )
        data = files[-1].read_bytes()
        files[-1].write_bytes(data[: len(data) // 2])
        return str(files[-1])
    if kind != "bitflip":
        raise ValueError(f"unknown damage {kind!r}: 'truncate' or 'bitflip'")
    item = step_dir / "default"
    with ocp.StandardCheckpointer() as checkpointer:
        leaves, treedef = jax.tree.flatten(checkpointer.restore(item))
        i = max(range(len(leaves)), key=lambda i: leaves[i].nbytes)
        leaf = np.array(leaves[i])
        raw = leaf.reshape(-1).view(np.uint8)
        raw[raw.size // 2] ^= 0x10
        leaves[i] = leaf
        checkpointer.save(item, jax.tree.unflatten(treedef, leaves), force=True)
    return f"{item}: leaf {i}"


def nan_at_step(make_train_step, nan_step: int):
    """`make_train_step` whose step `nan_step` turns every parameter and the loss into NaN (an update
    that diverged), for `posattn.vision.train_step.make_train_step`."""

    def make(setup):
        step_fn = make_train_step(setup)

        def step(state, batch, hyper):
            new, metrics = step_fn(state, batch, hyper)
            hit = new["step"] == nan_step
            new["params"] = jax.tree.map(lambda p: jnp.where(hit, jnp.nan, p), new["params"])
            metrics["loss"] = jnp.where(hit, jnp.nan, metrics["loss"])
            return new, metrics

        return step

    return make
