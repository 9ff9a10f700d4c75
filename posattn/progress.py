"""Progress lines of every loop (the theory fit, the image trainer, the studies' stages and grids, the
PK22 measurements): printed one way (`say`: by the process that writes the run's records, flushed so
that a log file follows the run) with one format of the time left (`eta`).
"""

import math

from posattn import io


def say(message: str) -> None:
    """Print `message` on the writing process (every process of a multi-host run computes the same
    line; one prints it), flushed."""
    if io.is_writer():
        print(message, flush=True)


def eta(seconds: float | None) -> str:
    """The time left as H:MM:SS; "?" where it is not known yet (None, NaN or infinite)."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
