"""The theory binary's seed sweep as two processes of 4 CPU devices each, joined by jax.distributed on
loopback, ends with the numbers of one process of 8 devices."""

import json
import subprocess
import sys

import pytest

from tests import envs, multiprocess

# A tiny problem; 8 seeds, so each of the 8 devices trains one (`posattn.mesh.map_runs`).
FLAGS = [
    "--config.theory.D=16",
    "--config.theory.d=8",
    "--config.gd.N=256",
    "--config.gd.steps=4",
    "--config.gd.eval_every=2",
    "--config.seeds=8",
    "--config.gd.n_test=256",
    "--config.gd.n_final_test=1000",
]


def results(workdir) -> tuple[dict, list[dict]]:
    """summary.json without its wall-clock seconds, and metrics.jsonl."""
    summary = json.loads((workdir / "summary.json").read_text())
    del summary["seconds"]
    return summary, [
        json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()
    ]


@pytest.mark.slow
def test_seed_sweep_of_two_processes_of_four_devices_matches_one_process_of_eight(tmp_path):
    two, one = tmp_path / "two", tmp_path / "one"
    outputs = multiprocess.run_two_processes(
        "experiments.theory", [*FLAGS, f"--workdir={two}"], tmp_path
    )
    assert (
        "8 seeds:" in outputs[0] and "step" not in outputs[1] and "8 seeds:" not in outputs[1]
    )  # only 0 reports
    assert (
        len(json.loads((two / "run.json").read_text())["jax_devices"]) == 8
    )  # the processes joined
    assert json.loads((two / "workdir.json").read_text())["status"] == "complete"
    assert (two / "attention.png").stat().st_size > 0

    single = subprocess.run(
        [sys.executable, "-m", "experiments.theory", *FLAGS, f"--workdir={one}"],
        cwd=multiprocess.ROOT,
        env=envs.devices(8),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr[-2000:]
    summary, metrics = results(two)
    assert [r["seed"] for r in summary["seeds"]["per_seed"]] == list(range(8)) and len(metrics) == 3
    # Exactly equal: every device runs the same program on the same seed's draws (from the same keys)
    # in both runs, and the per-seed results are gathered, not reduced, so no sum changes its order.
    assert (summary, metrics) == results(one)
