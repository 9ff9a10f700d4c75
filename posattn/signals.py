"""SIGINT and SIGTERM, one handler for the whole process: what a stop request does depends on where
the process is, which the code that knows says by entering a scope.

- Outside any scope (a binary's imports, flags and config, or after its run): end at once in one line
  with the status a shell reports for the signal (130 for SIGINT, 143 for SIGTERM). Python's default
  SIGINT handler would raise KeyboardInterrupt wherever the process is: during a binary's first seconds
  of imports a long traceback, a segmentation fault inside an extension module's initialisation, or
  nothing when a garbage-collection callback swallows it and the run goes on. `install`, first thing in
  the binaries' package, before any heavy import (so this module needs only the standard library).
- While a workdir is claimed (`posattn.ownership`): the claim's function records the run as interrupted
  and says how in one line, then the process ends at once (`os._exit`) rather than by raising into the
  running code: a KeyboardInterrupt can land inside JAX's callbacks, where it is swallowed or leaves
  XLA's threads running into the interpreter's shutdown (a segfault).
- While a loop polls (`Watch`, the image trainer): the signal is recorded; the loop saves at its current
  step and stops with `RunStopped`. A signal it did not act on (it came after the last step's poll) is
  passed on when the loop ends normally, so whatever runs the loop (a binary's claim, the next cell of a
  grid, a notebook's Ctrl-C) stops too instead of losing the request.

Without `install` (a test, a notebook) the first scope installs the handler and the last one puts the
previous handlers back. A signal ignored when the process started (`nohup`, a background job's SIGINT)
stays ignored. Only the main thread of a single-process run takes signals: off the main thread Python
cannot install handlers, and on a multi-process run JAX's preemption service (started by
`jax.distributed.initialize`) catches SIGTERM on whichever host gets it and agrees with every host on one
step at which all save (`CheckpointManager.reached_preemption`, which `Watch.reached` polls); a SIGINT
that one host alone acted on would leave the others waiting for it.
"""

import os
import signal
import sys
import threading

SIGNALS = {signal.SIGTERM: "preemption notice (SIGTERM)", signal.SIGINT: "interrupted (SIGINT)"}

_scopes: list = []  # innermost last: a Watch (records the signal) or a function (says how it ended)
_previous: dict = {}  # {signal: the handler ours replaced}, put back when the last scope is left
_installed = False  # by a binary: ours for the whole process


class RunStopped(Exception):
    """A run stopped on request before its end, its work saved: binaries report it in one line and exit
    with `exit_status`, 128 + the signal, as a shell reports a process the signal ended, so a scheduler
    or a retry loop sees an unfinished run (not 0: done; not 2: bad input)."""

    def __init__(self, message: str, signum: int = signal.SIGTERM):
        super().__init__(message)
        self.exit_status = 128 + int(signum)


def install() -> None:
    """Make the handler the process's for good (binaries, before their heavy imports)."""
    global _installed
    _take_over()
    _installed = True


def _take_over() -> None:
    for signum in SIGNALS:
        if signal.getsignal(signum) not in (signal.SIG_IGN, _handle):
            _previous[signum] = signal.signal(signum, _handle)


def _process_count() -> int:
    import jax  # (here, not at the top: `install` runs before any heavy import)

    return jax.process_count()


def _handles_here() -> bool:
    return _process_count() == 1 and threading.current_thread() is threading.main_thread()


def enter(scope) -> bool:
    """Route stop requests to `scope` (a `Watch`, or a function of the signal that ends the run and
    returns the line to print) until `leave`; whether it was entered (`_handles_here`)."""
    if not _handles_here():
        return False
    if not _scopes and not _installed:
        _take_over()
    _scopes.append(scope)
    return True


def leave(scope) -> None:
    """Stop routing to `scope` (nothing if it was not entered)."""
    if scope in _scopes:
        _scopes.remove(scope)
    if not _scopes and not _installed:
        for signum, handler in _previous.items():
            signal.signal(signum, handler)
        _previous.clear()


def _handle(signum, frame):
    del frame
    scope = _scopes[-1] if _scopes else None
    if isinstance(scope, Watch):  # runs between bytecodes: only record it
        scope.signum = scope.signum or signum
        return
    name = signal.Signals(signum).name
    outside = f"{name} outside a run (while the binary started or ended): nothing to save"
    line = scope(signum) if scope else outside
    try:  # the run's printed lines first; a print it interrupted keeps its own (a reentrant flush)
        sys.stdout.flush()
    except RuntimeError:
        pass
    os.write(2, f"stopped: {line}\n".encode())  # (unbuffered: absl may be writing to sys.stderr)
    os._exit(128 + signum)


class Watch:
    """Context manager: `reached(step, mngr)` is True once a stop was asked for (SIGTERM or SIGINT on
    this process, or a preemption notice on any host of a multi-process run, at the step they agreed
    on); `signum` is the signal (SIGTERM for the multi-host service)."""

    def __init__(self):
        self.signum = None
        self._entered = self._acted_on = False

    def __enter__(self):
        self._entered = enter(self)
        return self

    def __exit__(self, exc_type, exc, traceback):
        leave(self)
        # passed on unless acted on; an exception on its way out says more than the signal
        if self._entered and self.signum and not self._acted_on and exc_type is None:
            signal.raise_signal(self.signum)
        return False

    def reached(self, step: int, mngr) -> bool:
        """Whether to save and stop at `step`; call it at every step, on every process, in step order."""
        if self.signum is None and _process_count() > 1 and mngr.reached_preemption(step):
            self.signum = signal.SIGTERM
        return self.signum is not None

    def stopped(self, step: int, saved_in) -> RunStopped:
        """The exception that ends the run at `step`, saved in checkpoints folder(s) `saved_in`."""
        self._acted_on = True
        return RunStopped(
            f"{SIGNALS[self.signum]} at step {step}: saved checkpoint {step} in {saved_in}; "
            f"rerun the same command to resume from step {step}",
            self.signum,
        )
