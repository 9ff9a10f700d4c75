"""A binary run as two processes of 4 CPU devices each, joined by jax.distributed on loopback: a
multi-host run on one machine (docs/distributed.md, "Any other cluster")."""

import pathlib
import signal
import socket
import subprocess
import sys

from tests import envs

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_processes(
    module: str, args: list[str], logs: pathlib.Path, timeout: float = 300
) -> list[str]:
    """`python -m module *args` as processes 0 and 1 of one run; both processes' stdout. Their output
    goes to files in `logs` (process0.out, ...). A hang ends in SIGABRT, whose faulthandler dump of every
    thread (in the failure message) shows where each process stood."""
    port = free_port()
    procs, files = [], []
    for process_id in range(2):
        env = envs.devices(4, PYTHONFAULTHANDLER="1")
        # No cluster that jax.distributed detects on loopback: its own arguments, as flags.
        cluster = [
            f"--coordinator_address=127.0.0.1:{port}",
            "--num_processes=2",
            f"--process_id={process_id}",
        ]
        out, err = (open(logs / f"process{process_id}.{s}", "w+") for s in ("out", "err"))
        files.append((out, err))  # files, not pipes: a full pipe buffer would stall a process
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", module, *args, *cluster],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=err,
                text=True,
            )
        )
    verdict = "exited with status"
    try:
        for p in procs:
            p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        verdict = f"hung for {timeout} s; its threads' stacks below; aborted, status"
        for p in procs:
            p.send_signal(signal.SIGABRT)
            p.wait()
    results = []
    for i, (p, (out, err)) in enumerate(zip(procs, files)):
        with out, err:
            out.seek(0)
            err.seek(0)
            results.append(out.read())
            assert p.returncode == 0, f"process {i} {verdict} {p.returncode}:\n{err.read()[-6000:]}"
    return results
