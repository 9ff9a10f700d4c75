"""Where a compiled step spends its time: a `jax.profiler` trace of a few calls, summarised as the
device's busiest operations (issue 37: the profile behind a missed goal, in a few lines).

The trace's Perfetto JSON (`create_perfetto_trace=True`) holds one process per device; on a GPU its
"XLA Ops" thread names the HLO operations (fusion.12, a cuBLAS or cuDNN custom call, ...) and its
stream threads the kernels. Operations are grouped by their name without the trailing number
(fusion.12 and fusion.40 are both "fusion") and ranked by total time. On the CPU, where no device
process exists, the XLA client's threads stand in for it (the Python thread is left out).
"""

import collections
import glob
import gzip
import json
import os
import re

import jax


def trace(fn, calls: int, log_dir: str) -> str:
    """Run `fn()` `calls` times under the profiler (after one untraced call); the Perfetto JSON's path."""
    jax.block_until_ready(fn())
    with jax.profiler.trace(log_dir, create_perfetto_trace=True):
        for _ in range(calls):
            out = fn()
        jax.block_until_ready(out)
    paths = sorted(
        glob.glob(os.path.join(log_dir, "**", "perfetto_trace.json.gz"), recursive=True),
        key=os.path.getmtime,
    )
    if not paths:
        raise FileNotFoundError(f"the profiler wrote no perfetto_trace.json.gz under {log_dir}")
    return paths[-1]


def _group(name: str) -> str:
    return re.sub(r"[._]\d+$", "", name)


def busiest(path: str, top: int = 8) -> tuple[str, float, list[tuple[str, float, float]]]:
    """(which thread was read, its total busy ms, [(operation group, ms, share of the total)] of the
    `top` busiest groups) of one trace."""
    with gzip.open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    meta = lambda kind: {
        (e["pid"], e.get("tid")) if kind == "thread_name" else e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == kind
    }
    processes, threads = meta("process_name"), meta("thread_name")
    busy = collections.defaultdict(collections.Counter)  # thread label -> op group -> microseconds
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        process, thread = processes.get(e["pid"], ""), threads.get((e["pid"], e.get("tid")), "")
        if process.startswith("/device:") or (thread != "python" and "XLA" in thread):
            busy[f"{process} {thread}".strip()][_group(e["name"])] += e["dur"]
    if not busy:
        raise ValueError(f"{path}: no device or XLA thread events in the trace")
    # The HLO operations where the device names them, else the busiest thread (a GPU stream, a CPU client)
    label = next(
        (k for k in busy if k.startswith("/device:") and k.endswith("XLA Ops")),
        max(busy, key=lambda k: sum(busy[k].values())),
    )
    total = sum(busy[label].values())
    return (
        label,
        total / 1e3,
        [(name, us / 1e3, us / total) for name, us in busy[label].most_common(top)],
    )


def summary_lines(path: str, calls: int, top: int = 8) -> list[str]:
    """The busiest operations of a trace of `calls` calls, one markdown bullet each, per call."""
    label, total_ms, ops = busiest(path, top)
    return [f"- {label}: {total_ms / calls:.2f} ms busy per call; busiest:"] + [
        f"  - `{name}` {ms / calls:.2f} ms ({100 * share:.0f}%)" for name, ms, share in ops
    ]
