"""Two processes with 4 CPU devices each, joined by jax.distributed on loopback, train like one with 8."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

from posattn import cli
from posattn.vision import config as config_lib
from posattn.vision import runs, train
from tests import multiprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
# 6 steps: the in-process run of 8 devices is then the program test_train.py compiles for its 8-device
# run (the test run's compilation cache, tests/conftest.py).
STEPS = 6
FLAGS = [
    "--config=tpu_configs/digits.py:quick",
    f"--config.total_steps={STEPS}",
    "--config.log_every=3",
    "--config.checkpoint_every=3",
    "--config.eval_every=0",
]


def digits_quick():
    c = cli.load_config(str(ROOT / "tpu_configs" / "digits.py"), "quick", config_lib.SCHEMA)
    c.total_steps, c.log_every, c.checkpoint_every, c.eval_every = STEPS, 3, 3, 0
    return c


@pytest.mark.slow
@pytest.mark.parametrize(
    "mesh",
    [
        [],
        ["--config.mesh.data=2", "--config.mesh.fsdp=4"],
        ["--config.mesh.data=1", "--config.mesh.fsdp=8"],
    ],
    ids=["data", "2x4x1", "1x8x1"],
)
def test_two_processes_of_four_devices_match_one_process_of_eight(tmp_path, mesh):
    """Data parallel; the state sharded over fsdp within each process (2, 4, 1); and over both
    processes (1, 8, 1), where each process holds, saves and restores only its half of the state."""
    outputs = multiprocess.run_two_processes(
        "experiments.train_images", [*FLAGS, *mesh, f"--workdir={tmp_path / 'two'}"], tmp_path
    )
    assert "2 processes" in outputs[0] and "summary:" in outputs[0]
    assert (
        "summary:" not in outputs[1] and f"step {STEPS}/{STEPS}" not in outputs[1]
    )  # only process 0 reports

    c = digits_quick()
    state8, summary8 = train.train(c, str(tmp_path / "one"))
    summary2 = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert (summary2["processes"], summary2["devices"], summary8["processes"]) == (2, 8, 1)
    assert (
        summary2["test_examples"] == summary8["test_examples"] == 360
    )  # each test digit once over both
    assert abs(summary2["test_accuracy"] - summary8["test_accuracy"]) <= 1 / 360
    state2 = runs.restore_run(tmp_path / "two")[1]
    assert int(state2["step"]) == STEPS
    # Leaves agree to ~1e-7 except the attention key biases: softmax ignores them, their gradient is 0 up
    # to rounding, and Adam turns that rounding noise (which depends on the reduction order) into ~1e-6
    # steps. A wrong data-parallel step (e.g. a gradient of one process's half batch) differs by ~1e-3.
    for a, b in zip(jax.tree.leaves(state2["params"]), jax.tree.leaves(state8["params"])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=2e-5)


def test_start_up_is_jax_s_own_detection_and_refuses_incomplete_arguments(monkeypatch):
    monkeypatch.delenv("JAX_COORDINATOR_ADDRESS", raising=False)
    # jax.distributed must start before the backend does: in a fresh process, as a binary would.
    code = (
        "from posattn import mesh; import jax; from posattn.errors import ConfigError\n"
        "mesh.initialize_distributed()\n"  # no cluster detected here: a single process
        "assert not jax.distributed.is_initialized()\n"
        "try:\n    mesh.initialize_distributed(num_processes=2, process_id=0)\n"
        "except ConfigError as e:\n    print(e)\n"
        "assert not jax.distributed.is_initialized() and jax.process_count() == 1\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT)),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert (
        "coordinator_address should be defined" in out.stdout
        and "docs/distributed.md" in out.stdout
    )
