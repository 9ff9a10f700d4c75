"""The image trainer's clock (big_vision's `u.Chrono`): how each log window's time splits into waiting
for data and computing, images/s, MFU and device memory; and the `profile_steps` trace.

The clock starts after the first step, which compiles; evaluations and checkpoints are left out of the
windows (`pause`, `resume`). Data time is the host's time producing each global batch (`feeding`):
the device may still be computing the previous step meanwhile (dispatch is asynchronous), so it is an
upper bound on the time the device waited for data, and "data 0%" means the feed keeps up.
"""

import contextlib
import time

import jax

from posattn import progress
from posattn.errors import ConfigError
from posattn.vision import utilisation


class Chrono:
    """Times a training loop of `total_steps` steps of `global_batch_size` images (`step_flops` FLOPs
    each, None if not known) on `devices` at compute `dtype`."""

    def __init__(self, *, total_steps, global_batch_size, step_flops, devices, dtype):
        self.total, self.batch, self.step_flops = total_steps, global_batch_size, step_flops
        self.devices, self.dtype = list(devices), dtype
        self.t_start, self.t_go = time.perf_counter(), None
        self.timed_seconds = 0.0  # every window's, for the summary
        self._window_seconds, self._window_steps, self._data_seconds = 0.0, 0, 0.0

    @contextlib.contextmanager
    def feeding(self):
        """Around the production of one batch (counted once the clock runs)."""
        t = time.perf_counter()
        yield
        if self.t_go is not None:
            self._data_seconds += time.perf_counter() - t

    def stepped(self, metrics) -> float | None:
        """After each step's dispatch: for the first step, waits for it and returns the seconds since the
        start (compilation included), and the clock starts; None after that."""
        if self.t_go is None:
            jax.block_until_ready(metrics)
            self.t_go = time.perf_counter()
            return self.t_go - self.t_start
        self._window_steps += 1
        return None

    def pause(self) -> None:
        """Stop the clock (the steps dispatched so far have finished: their metrics were pulled)."""
        dt = time.perf_counter() - self.t_go
        self.timed_seconds += dt
        self._window_seconds += dt

    def resume(self) -> None:
        self.t_go = time.perf_counter()

    def window(self, step: int) -> dict:
        """The measures of the steps since the last window, and a new window: images_per_second,
        data_wait_fraction, mfu, device_memory_bytes (None where not measured) and eta (H:MM:SS)."""
        steps, seconds = self._window_steps, self._window_seconds
        step_seconds = seconds / steps if steps else None
        out = {
            "images_per_second": steps * self.batch / seconds if steps else None,
            "data_wait_fraction": min(self._data_seconds / seconds, 1.0) if steps else None,
            "mfu": None
            if step_seconds is None or self.step_flops is None
            else utilisation.mfu(self.step_flops, step_seconds, self.devices, self.dtype),
            "device_memory_bytes": utilisation.memory_in_use(self.devices),
            "eta": progress.eta((self.total - step) * step_seconds if steps else None),
        }
        self._window_seconds, self._window_steps, self._data_seconds = 0.0, 0, 0.0
        return out

    def run_mfu(self, timed_steps: int) -> float | None:
        """MFU over every window of the run (its `timed_steps`)."""
        if not timed_steps or self.step_flops is None:
            return None
        step_seconds = self.timed_seconds / timed_steps
        return utilisation.mfu(self.step_flops, step_seconds, self.devices, self.dtype)


def line(measures: dict) -> str:
    """The log line's part for `window`'s measures: "1,234 img/s  data 3%  MFU 41.0%  mem 3.1 GiB"."""
    ips, data = measures["images_per_second"], measures["data_wait_fraction"]
    parts = [f"{'?' if ips is None else f'{ips:,.0f}'} img/s"]
    if data is not None:
        parts.append(f"data {100 * data:.0f}%")
    if measures["mfu"] is not None:
        parts.append(f"MFU {100 * measures['mfu']:.1f}%")
    if measures["device_memory_bytes"] is not None:
        parts.append(f"mem {measures['device_memory_bytes'] / 2**30:.1f} GiB")
    return "  ".join(parts)


def profile_window(text: str, total_steps: int) -> tuple[int, int] | None:
    """`config.profile_steps` ("A,B": trace steps A to B, 1 <= A <= B <= total_steps; "" none) as (A, B);
    ConfigError (one line) otherwise."""
    if not text:
        return None
    try:
        first, last = (int(v) for v in str(text).split(","))
    except ValueError:
        first = last = None
    if first is None or not 1 <= first <= last <= total_steps:
        raise ConfigError(
            f"profile_steps={text!r}: give two steps 'A,B' with 1 <= A <= B <= total_steps="
            f"{total_steps} (or '' for no trace)"
        )
    return first, last


class Profile:
    """A `jax.profiler` trace of steps A..B (`profile_window`) into `directory`: call `before(step)`
    before each step's dispatch and `after(step, metrics)` after it."""

    def __init__(self, window: tuple[int, int] | None, directory):
        self.window, self.directory, self.on = window, str(directory), False

    def before(self, step: int) -> None:
        if self.window and step == self.window[0]:
            jax.profiler.start_trace(self.directory)
            self.on = True

    def after(self, step: int, metrics) -> None:
        if self.on and step == self.window[1]:
            jax.block_until_ready(metrics)
            jax.profiler.stop_trace()
            self.on = False
            progress.say(f"profile of steps {self.window[0]}-{step} written to {self.directory}")

    def close(self) -> None:
        """Stops a trace that a stop or an error left running."""
        if self.on:
            jax.profiler.stop_trace()
            self.on = False
