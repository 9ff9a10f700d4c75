"""XLA options for the programs a run compiles and then runs only once or a few times.

On a CPU, LLVM optimisation level 3 (XLA's default) makes such programs spend far longer compiling
than running; level 1 compiles them 2-4x faster (measured: the digits ResNet's init 20.8 -> 5.1 CPU-s,
its PK22 Hessian 19.0 -> 14.6, the theory paper preset's draw 4.2 -> 2.1 and final test 4.7 -> 3.2;
docs/how_vits_work.md and docs/benchmarks.md). Random draws and initial parameters stay bit-identical;
floating-point reductions may change in the last digits. Programs whose run time matters (the GD chunk,
the image train step) keep the default. Other platforms: XLA's defaults. A smoke run, and
`experiments.shallow_vit` (each of its stages is one program run once), compile every program of the
process at level 1 (`fast_compile_everywhere`).

Everything this process tells XLA and JAX's backends lives here, so that one module owns the levers:
before JAX starts its backends (the binaries' first act), the CPU device count (`use_cpu_cores`), a
smoke run's optimisation level for every program (`fast_compile_everywhere`, through XLA_FLAGS, read
only when the backends start) and the persistent compilation cache (`enable_compilation_cache`); per
program, `run_once`'s options.
"""

import functools
import os

import jax

RUN_ONCE_LEVEL = 1  # LLVM optimisation level of run-once programs on a CPU
# XLA_FLAGS of a smoke run (`fast_compile_everywhere`): `run_once`'s level for every program
FAST_COMPILE_FLAG = f"--xla_backend_optimization_level={RUN_ONCE_LEVEL}"


def run_once(platform: str | None = None) -> dict | None:
    """`compiler_options` for a run-once program on `platform` (default: JAX's default backend, which
    this call starts: choose the devices first): LLVM level 1 on CPU, None (XLA's defaults) elsewhere."""
    return (
        {"xla_backend_optimization_level": RUN_ONCE_LEVEL}
        if (platform or jax.default_backend()) == "cpu"
        else None
    )


def jit_run_once(fn, **static):
    """`fn` compiled with `static` bound as keyword arguments, with `run_once`'s options: one compiled
    program per (fn, static), kept (the static values must be hashable, e.g. frozen configs)."""
    return _jit_run_once(fn, tuple(sorted(static.items())))


@functools.lru_cache(maxsize=64)
def _jit_run_once(fn, static: tuple):
    return jax.jit(functools.partial(fn, **dict(static)), compiler_options=run_once())


def fast_compile_everywhere() -> bool:
    """Compile every program of this process at LLVM level 1, through XLA_FLAGS: what a smoke run
    (`--config=FILE:quick`, `posattn.cli`) asks for, since its programs run briefly and compiling is most
    of its time (`experiments.shallow_vit` with `:quick`: 79.6 s -> 44.7 s wall on 2 cores, empty cache,
    docs/shallow_vit_results.md). XLA reads XLA_FLAGS when JAX starts its backends, so call it before
    (`posattn.cli` does, while it parses the command line); where XLA_FLAGS already sets the level,
    nothing changes. Returns whether the flag was added."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" in flags:
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {FAST_COMPILE_FLAG}".strip()
    return True


DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def use_cpu_cores(count: int | None = None) -> None:
    """Give JAX's CPU backend `count` devices (default: one per core this process may run on), so that
    code sharded over "data" runs on every core.

    XLA's CPU backend runs one device's program on one core at a time where its operations are small
    (the theory regime's tile and pattern loops), so on a CPU the devices are the way to use the other
    cores (docs/decisions.md, "CPU devices"). Call it before JAX starts its backends (the binaries do, first
    thing); a choice made already wins and is left as it is: an XLA_FLAGS device count (the tests
    simulate 8 devices), `jax_num_cpu_devices` set by the user, or backends that are already running
    (then the library runs on the devices they have, one included). No effect on other platforms'
    devices.
    """
    if DEVICE_COUNT_FLAG in os.environ.get("XLA_FLAGS", "") or jax.config.jax_num_cpu_devices >= 0:
        return
    try:
        jax.config.update("jax_num_cpu_devices", count or len(os.sched_getaffinity(0)))
    except RuntimeError:  # backends already started: keep their devices
        pass


# a directory, or "off" (any of CACHE_OFF); a binary's --compilation_cache wins over it
CACHE_ENV = "POSATTN_COMPILATION_CACHE"
CACHE_OFF = ("off", "0", "false", "no", "none")


def enable_compilation_cache(setting: str | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache (on by default in every binary, via `posattn.cli.run`); returns
    its directory, or None when `setting` (else $POSATTN_COMPILATION_CACHE) says "off".

    Most of a short run is XLA compiling (`experiments.reproduce` with `:quick`: about 40 of ~60 s), and the
    programs of a run depend on its shapes and settings, not on its seed, so a second run finds them
    compiled. Every program is kept, however fast it compiled: a run compiles dozens of small ones.
    """
    setting = os.environ.get(CACHE_ENV, "") if setting is None else setting
    if setting.strip().lower() in CACHE_OFF:
        return None
    default = os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "posattn", "jax"
    )
    path = setting or jax.config.jax_compilation_cache_dir or default
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path
