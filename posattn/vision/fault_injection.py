"""Faults injected on purpose into the image trainer's checkpoint saves, for its fault drill
(benchmarks/faults.py) and its tests: a disk that fills up or turns read-only while a run trains.

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
    manager_save, handler_save = ocp.CheckpointManager.save, ocp.StandardCheckpointHandler.async_save
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
        ocp.CheckpointManager.save, ocp.StandardCheckpointHandler.async_save = manager_save, handler_save
