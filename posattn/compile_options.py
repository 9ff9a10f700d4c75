"""XLA options for the programs a run compiles and then runs only once or a few times.

On a CPU, LLVM optimisation level 3 (XLA's default) makes such programs spend far longer compiling
than running; level 1 compiles them 2-4x faster (measured: the digits ResNet's init 20.8 -> 5.1 CPU-s,
its PK22 Hessian 19.0 -> 14.6, the theory paper preset's draw 4.2 -> 2.1 and final test 4.7 -> 3.2;
docs/how_vits_work.md and docs/benchmarks.md). Random draws and initial parameters stay bit-identical;
floating-point reductions may change in the last digits. Programs whose run time matters (the GD chunk,
the image train step) keep the default. Other platforms: XLA's defaults. A smoke run, and
`experiments.shallow_vit` (each of its stages is one program run once), compile every program of the
process at level 1 (`fast_compile_everywhere`).
"""

import functools
import os

import jax
from jax._src import xla_bridge

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
    docs/shallow_vit_results.md). XLA reads XLA_FLAGS when JAX starts its backends: after that, or where
    XLA_FLAGS already sets the level, nothing changes. Returns whether the flag was added."""
    flags = os.environ.get("XLA_FLAGS", "")
    if xla_bridge.backends_are_initialized() or "xla_backend_optimization_level" in flags:
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {FAST_COMPILE_FLAG}".strip()
    return True
