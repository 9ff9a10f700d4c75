"""Preemption notices and interrupts for the image trainer: on SIGTERM or SIGINT (Ctrl-C), save at the
current step, stop, resume later.

A scheduler (a TPU pod's maintenance event, Slurm, Kubernetes) announces an eviction with SIGTERM and
follows with SIGKILL after a grace period; a user at a terminal stops a run with Ctrl-C (SIGINT). Both
are a request to stop, not a crash: the run saves at its current step and stops with one line. On a
multi-process run JAX's preemption service (started by `jax.distributed.initialize`) catches SIGTERM on
whichever host gets it and agrees with every host on one step at which all of them save
(`jax.experimental.multihost_utils.reached_preemption_sync_point`, which orbax's
`CheckpointManager.reached_preemption` wraps); it installs its own SIGTERM handler, so none is installed
there (nor one for SIGINT: a stop that one host alone saw would leave the others waiting for it). A
single process has no such service: a Python handler records the signal and the loop polls it once per
step.

Exit status of a stopped run: 128 + the signal (143 for SIGTERM, 130 for SIGINT), what a shell reports
for a process the signal ended, so a scheduler or a retry loop sees an unfinished run (not 0: done; not
2: bad input).
"""

import signal
import threading

import jax
import orbax.checkpoint as ocp

from posattn.errors import RunStopped

SIGNALS = {signal.SIGTERM: "preemption notice (SIGTERM)", signal.SIGINT: "interrupted (SIGINT)"}
EXIT_STATUS = 128 + signal.SIGTERM


class Preempted(RunStopped):
    """The run received a preemption notice or an interrupt, saved a checkpoint at its current step and
    stopped; `exit_status` is 128 + the signal."""

    exit_status = EXIT_STATUS

    def __init__(self, message: str, signum: int = signal.SIGTERM):
        super().__init__(message)
        self.exit_status = 128 + int(signum)


class Watcher:
    """Context manager: `reached(step, mngr)` is True once a stop was asked for (SIGTERM or SIGINT on
    this process, or a preemption notice on any host of a multi-process run, at the step they agreed on).

    `signum` is the signal received (SIGTERM for the multi-host service). The previous handlers are
    restored on exit, so a test or notebook that calls `train` keeps its own (and Ctrl-C its
    KeyboardInterrupt outside the run). A signal that came after the last step's poll (during the final
    evaluation or save) was not acted on by the run, which finished: on a normal exit it is passed on to
    the previous handler, so that whatever runs `train` (the next cell of a sweep or grid, a binary's
    own handler) stops too instead of losing the request. Off the main thread (where Python cannot
    install handlers) only the multi-host service is polled.
    """

    def __init__(self):
        self._previous = {}
        self.signum = None
        self._acted_on = False

    def _on_signal(self, signum, frame):  # runs between bytecodes: only record it
        self.signum = self.signum or signum

    def __enter__(self):
        if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._on_signal) for s in SIGNALS}
        return self

    def __exit__(self, exc_type, exc, traceback):
        for s, previous in self._previous.items():
            signal.signal(s, previous)
        unanswered = bool(self._previous) and self.signum is not None and not self._acted_on
        self._previous = {}
        if (
            unanswered and exc_type is None
        ):  # (an exception on its way out says more than the signal)
            signal.raise_signal(self.signum)
        return False

    def reached(self, step: int, mngr: ocp.CheckpointManager) -> bool:
        """Whether to save and stop at `step`; call it at every step, on every process, in step order."""
        if self.signum is None and jax.process_count() > 1 and mngr.reached_preemption(step):
            self.signum = signal.SIGTERM
        return self.signum is not None

    def stopped(self, step: int, saved_in) -> Preempted:
        """The exception that ends the run at `step`, saved in checkpoints folder `saved_in`."""
        self._acted_on = True
        return Preempted(
            f"{SIGNALS[self.signum]} at step {step}: saved checkpoint {step} in {saved_in}; "
            f"rerun the same command to resume from step {step}",
            self.signum,
        )
