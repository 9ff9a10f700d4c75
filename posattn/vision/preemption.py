"""Preemption notices for the image trainer: on SIGTERM, save at the current step, stop, resume later.

A scheduler (a TPU pod's maintenance event, Slurm, Kubernetes) announces an eviction with SIGTERM and
follows with SIGKILL after a grace period. On a multi-process run JAX's preemption service (started by
`jax.distributed.initialize`) catches the signal on whichever host gets it and agrees with every host
on one step at which all of them save (`jax.experimental.multihost_utils.reached_preemption_sync_point`,
which orbax's `CheckpointManager.reached_preemption` wraps); it installs its own SIGTERM handler, so
none is installed here. A single process has no such service: a Python handler records the signal and
the loop polls it once per step.

Exit status of a preempted run: 143 (= 128 + SIGTERM), what a shell reports for a process that
SIGTERM ended, so a scheduler or a retry loop sees an unfinished run (not 0: done; not 2: bad input).
"""
import signal
import threading

import jax
import orbax.checkpoint as ocp

from posattn.errors import RunStopped

EXIT_STATUS = 128 + signal.SIGTERM


class Preempted(RunStopped):
    """The run received a preemption notice, saved a checkpoint at its current step and stopped."""

    exit_status = EXIT_STATUS


class Watcher:
    """Context manager: `reached(step)` is True once a preemption notice has arrived (SIGTERM on this
    process, or on any host of a multi-process run at the step they agreed on).

    The previous SIGTERM handler is restored on exit, so a test or notebook that calls `train` keeps
    its own. Off the main thread (where Python cannot install handlers) only the multi-host service
    is polled.
    """

    def __init__(self, mngr: ocp.CheckpointManager):
        self._mngr = mngr
        self._previous = None
        self.signalled = False

    def _on_sigterm(self, signum, frame):  # runs between bytecodes: only record it
        self.signalled = True

    def __enter__(self):
        if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        return False

    def reached(self, step: int) -> bool:
        """Whether to save and stop at `step`; call it at every step, on every process, in step order."""
        return self.signalled or (jax.process_count() > 1 and self._mngr.reached_preemption(step))
