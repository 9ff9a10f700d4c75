"""SIGINT and SIGTERM: one handler for the process, whose answer depends on the scope it is in.

- No scope (a binary's imports, flags and config, or after its run): end at once in one line with the
  status a shell reports for the signal (130, 143). Python's KeyboardInterrupt would be a long
  traceback, a segfault in an extension's initialisation, or nothing (swallowed by a garbage-collection
  callback). Binaries `install` the handler first thing, so this module needs only the standard library.
- A claimed workdir (`posattn.ownership`): its function marks the run interrupted and gives the line;
  the process ends at once (`os._exit`): a KeyboardInterrupt raised into JAX's callbacks is swallowed
  or leaves XLA's threads running into the interpreter's shutdown (a segfault).
- A polling loop (`Watch`, the image trainer): the signal is recorded, and the loop saves and stops
  with `RunStopped`. One it did not act on (after the last step's poll) is passed on when the loop ends
  normally, so what runs the loop (a claim, a grid's next cell, a notebook) stops too.

Without `install` (tests, notebooks) the first scope takes the signals and the last one gives them
back. An ignored signal (`nohup`, a background job's SIGINT) stays ignored. Only the main thread of a
single-process run enters scopes: a multi-process run leaves SIGTERM to JAX's preemption service, which
agrees with every host on a step to save at (`Watch.reached` polls it), and a SIGINT that one host
alone acted on would leave the others waiting.
"""

import contextlib
import os
import signal
import sys
import threading

SIGNALS = {signal.SIGTERM: "preemption notice (SIGTERM)", signal.SIGINT: "interrupted (SIGINT)"}

_scopes: list = []  # innermost last: a Watch (records the signal) or a function (says how it ended)
_previous: dict = {}  # {signal: the handler ours replaced}, put back when the last scope is left
_installed = False  # by a binary: ours for the whole process


class RunStopped(Exception):
    """A run stopped on request, its work saved: binaries say it in one line and exit 128 + the signal,
    as a shell reports it, so a scheduler sees an unfinished run (not 0: done; not 2: bad input)."""

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


def enter(scope) -> bool:
    """Route stop requests to `scope` (a `Watch`, or a function of the signal that ends the run and
    returns the line to print) until `leave`; whether it was entered (main thread, one process)."""
    if _process_count() > 1 or threading.current_thread() is not threading.main_thread():
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
    with contextlib.suppress(RuntimeError):  # (a reentrant flush: the print it interrupted)
        sys.stdout.flush()  # the run's printed lines first
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
