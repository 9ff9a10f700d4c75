"""A stop signal that reaches a binary outside its run: while it starts (imports, flags, config) or
after its run has ended.

Python's default SIGINT handler raises KeyboardInterrupt wherever the process is: during the imports of
a binary's first seconds that is a long traceback, a segmentation fault inside an extension module's
initialisation, or nothing at all when a garbage-collection callback swallows it and the run goes on
(each seen by sending SIGINT 0.3-3 s after `train_images` started). Nothing of a run exists yet, so the
right answer is to end at once in one line with the status a shell reports for the signal (130 for
SIGINT, 143 for SIGTERM). The handler is installed first thing by the binaries' package, before any
heavy import; `posattn.ownership` replaces it while a run holds its workdir and puts it back after.
Standard library only, so that installing it imports nothing else.
"""

import os
import signal


def _stop(signum, frame):
    del frame
    os.write(
        2,
        f"stopped: {signal.Signals(signum).name} outside a run (while the binary started or "
        "ended): nothing to save\n".encode(),
    )
    os._exit(128 + signum)


def install() -> None:
    """End the process in one line on SIGINT or SIGTERM (unless the signal is ignored, as `nohup` and
    background shells ignore SIGINT)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _stop)
