"""How much device memory a compiled program needs, from XLA's buffer assignment (`program_bytes`), how
much a device has free (`free_bytes`), whether S vmapped seeds fit (`Footprint`), and a run that does
not fit stopped with one line (`out_of_memory_stops`).
"""

import contextlib
import dataclasses

import jax

from posattn.errors import ConfigError, first_line
from posattn.vision import checkpoint


@dataclasses.dataclass(frozen=True)
class Footprint:
    """Bytes per device of the vmapped programs of `seeds` seeds, from XLA's buffer assignment
    (arguments + outputs + temporaries - donated aliases; the larger of the train and eval programs),
    beside the bytes free there (None: unknown). `state_bytes` is one seed's train state."""

    seeds: int
    state_bytes: int
    program_bytes: int | None
    free_bytes: int | None

    @property
    def fits(self) -> bool:
        """Whether the programs take at most 90% of the memory free (the rest for XLA's own buffers and
        fragmentation); True where either number is unknown (the run then stops with `OutOfMemory` if
        they do not fit)."""
        if self.program_bytes is None or self.free_bytes is None:
            return True
        return self.program_bytes <= 0.9 * self.free_bytes

    def __str__(self) -> str:
        mib = lambda n: f"{n / 2**20:,.1f} MiB"  # noqa: E731
        if self.program_bytes is None:
            return f"{self.seeds} seeds, train state {mib(self.state_bytes)} per seed, program size unknown"
        free = "unknown" if self.free_bytes is None else mib(self.free_bytes)
        return (
            f"{self.seeds} seeds, {mib(self.program_bytes / self.seeds)} per seed and device (train "
            f"state {mib(self.state_bytes)}, the rest batches and activations): "
            f"{mib(self.program_bytes)} of {free} free per device"
        )


def program_bytes(compiled) -> int | None:
    m = compiled.memory_analysis()
    if m is None:
        return None
    return int(
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        + m.temp_size_in_bytes
        - m.alias_size_in_bytes
    )


def free_bytes(device) -> int | None:
    """Memory free on `device`: its allocator's limit less what is in use; for a CPU device, the host's
    available memory (/proc/meminfo) shared by the process's local devices; None where unknown."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None
    return kib * 1024 // len(jax.local_devices())


class OutOfMemory(ConfigError):
    """The run's programs do not fit the devices' memory: the run stops; its batch or model must shrink."""


@contextlib.contextmanager
def out_of_memory_stops(config, mesh, workdir):
    """XLA's RESOURCE_EXHAUSTED (a batch too large for the devices) as one `OutOfMemory` line."""
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        last = checkpoint.survey(checkpoint.checkpoints_dir(workdir)).latest
        kept = (
            "nothing was saved, so the corrected command may reuse this --workdir"
            if last is None
            else f"the last checkpoint, step {last}, stays in {workdir}/checkpoints"
        )
        raise OutOfMemory(
            f"out of memory ({first_line(e)[:160]}): global_batch_size="
            f"{config.global_batch_size} and eval_batch_size={config.eval_batch_size} over "
            f"{mesh.devices.size} devices do not fit; lower them (or use more devices, a smaller "
            f"model, compute_dtype='bfloat16', or shard the state with mesh.fsdp); {kept}"
        ) from e
