"""Saving checkpoints during a run: in the background, and stopping the run at the first save that fails.

Orbax writes a checkpoint in background threads while the next steps compute. A save that fails there
(a full disk: ENOSPC; a disk turned read-only: EROFS) surfaces only when the manager is next asked,
and orbax logs it as a traceback from each thread. `Saver` asks at every step and stops the run with
one `SaveFailed` line naming the last complete checkpoint to resume from; `close` closes a manager on
every way out of a run, also after a failed save; `orbax_errors_reported` leaves out orbax's own
tracebacks of a failure that the run reports in its one line.
"""

import contextlib
import errno
import logging
import os
import re

import jax
import orbax.checkpoint as ocp

from posattn.errors import ConfigError
from posattn.vision import checkpoint


class SaveFailed(ConfigError):
    """A checkpoint could not be written (a full or read-only disk): the run stopped at once."""


def _errno(e: BaseException) -> int | None:
    """The errno of a failed write: an OSError's, or the one tensorstore puts in its message
    (`[os_error_code='28']`)."""
    if getattr(e, "errno", None):
        return e.errno
    m = re.search(r"os_error_code='?(\d+)", str(e))
    return int(m.group(1)) if m else None


# What to do about a failed save, by errno (else: both).
_REMEDY = {
    errno.ENOSPC: "free space on the disk of {}",
    errno.EDQUOT: "free space in your quota for {}",
    errno.EROFS: "make {} writable again",
    errno.EACCES: "make {} writable again",
    errno.EPERM: "make {} writable again",
}


class Saver:
    """Saves the state in the background (orbax's async checkpointing) and turns a failed save into
    `SaveFailed` at the first step that learns of it, so the run stops at once instead of training on
    without checkpoints.

    `save(state, step)` starts a save (after the previous one completed); `poll(step)` at every step
    raises if a save that finished failed (one process only: on a multi-process run every host must
    stop at the same step, so the hosts learn of it together at the next save or at `wait`); `wait(step)`
    waits for the save in flight. A save counts as done only when its folder is a committed checkpoint
    on disk (`survey`), whatever orbax reports.
    """

    def __init__(self, mngr: ocp.CheckpointManager, workdir):
        self.mngr, self.workdir, self.pending = mngr, workdir, None

    def save(self, state: dict, step: int) -> None:
        self.wait(step)
        try:
            checkpoint.save(self.mngr, state)
        except Exception as e:  # noqa: BLE001 - whatever the file system raises, the save failed
            raise self._failed(step, step, e) from e
        self.pending = step

    def poll(self, step: int) -> None:
        if (
            self.pending is not None
            and jax.process_count() == 1
            and not self.mngr.is_saving_in_progress()
        ):
            self.wait(step)

    def wait(self, step: int) -> None:
        if self.pending is None:
            return
        saving, self.pending = self.pending, None
        try:
            self.mngr.wait_until_finished()
        except Exception as e:  # noqa: BLE001
            raise self._failed(saving, step, e) from e
        if saving not in checkpoint.survey(self.mngr.directory).complete:
            raise self._failed(saving, step, None)

    def _failed(self, saving: int, step: int, e: BaseException | None) -> SaveFailed:
        code = None if e is None else _errno(e)
        reason = (
            "orbax did not commit it"
            if e is None
            else f"{os.strerror(code)}, errno {code}"
            if code
            else checkpoint.short_error(e)
        )
        last = checkpoint.survey(self.mngr.directory).latest
        where = (
            f"the last complete checkpoint, step {last}, stays in {self.mngr.directory}"
            if last is not None
            else "no checkpoint was saved before it"
        )
        resume = f"resume from step {last}" if last is not None else "start again"
        return SaveFailed(
            f"saving checkpoint {saving} failed ({reason}); the run stopped at step {step}, {where}: "
            f"{_REMEDY.get(code, 'make {} writable, with free space').format(self.workdir)}, then "
            f"rerun the same command to {resume}"
        )


def close(mngr: ocp.CheckpointManager) -> None:
    """Close `mngr`, finishing a save in flight, also after a failed save: orbax raises a failed
    background save's error again from `close` (once) before it has closed its threads, which would
    otherwise run on into the interpreter's shutdown ("cannot schedule new futures after interpreter
    shutdown"). The error was reported where the save failed."""
    for _ in range(2):
        try:
            mngr.close()
            return
        except Exception:  # noqa: BLE001
            pass


class _DropOrbaxErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}orbax{os.sep}" not in record.pathname


@contextlib.contextmanager
def orbax_errors_reported():
    """While quiet (absl's verbosity at ERROR or above, as the binaries set it unless --verbosity is
    given), leave out orbax's own error logs: each failed background write logs a traceback per
    thread (hundreds of lines on a full disk), and the run reports the same failure in one line
    (`SaveFailed`, `CheckpointError`)."""
    logger = logging.getLogger("absl")
    quiet = logger.getEffectiveLevel() >= logging.ERROR
    drop = _DropOrbaxErrors()
    if quiet:
        logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
