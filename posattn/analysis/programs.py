"""Compile a model's analysis programs ahead of time, two at a time, and time compilation apart from
running (docs/how_vits_work.md, Time).

On a CPU, XLA's compilation of one program runs on one core and takes most of a PK22 measurement's
time on the small digits models; the programs of one model are independent, so they are traced one
after another (tracing holds the Python lock) and compiled concurrently (XLA releases it). On a CPU they compile at
LLVM optimisation level 1 (`posattn.compile_options.run_once`): each runs once or a few times, and level 1 halves the
compiling of the CNNs' Hessian and forward programs at the cost of a change in the last digits
(docs/how_vits_work.md, Time).
"""

import concurrent.futures
import time
from collections.abc import Callable

from posattn import compile_options


def compile_all(programs: dict[str, tuple[Callable, tuple]], workers: int = 2) -> tuple[dict, dict]:
    """{name: (jitted function, example args)} -> ({name: compiled program}, {name: compile seconds}).

    The compiled programs take the same arguments (or any of the same shapes and types) and never
    retrace. The seconds are each compilation's wall clock, concurrent ones overlapping.
    """
    lowered = {name: fn.lower(*args) for name, (fn, args) in programs.items()}
    options = compile_options.run_once()

    def compile_one(low):
        t = time.perf_counter()
        return low.compile(compiler_options=options), time.perf_counter() - t

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(compile_one, low) for name, low in lowered.items()}
        done = {name: f.result() for name, f in futures.items()}
    return {n: c for n, (c, _) in done.items()}, {n: s for n, (_, s) in done.items()}
