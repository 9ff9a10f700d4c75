"""`python -m experiments.theory` end to end on a tiny problem, and its refusals of bad input."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import envs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args):
    env = envs.devices(1)
    return subprocess.run(
        [sys.executable, "-m", "experiments.theory", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_tiny_run_writes_every_output(tmp_path):
    out = run(
        "--config=tpu_configs/theory.py:small",
        "--config.theory.d=16",
        "--config.gd.N=2000",
        "--config.gd.steps=150",
        "--config.gd.eval_every=50",
        "--config.gd.a0=4",
        "--config.gd.n_final_test=10000",
        f"--workdir={tmp_path}",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "steps/s" in out.stdout and "ETA" in out.stdout
    for name in (
        "config.json",
        "run.json",
        "metrics.jsonl",
        "summary.json",
        "summary.md",
        "attention.png",
        "dynamics.png",
        "test_error.png",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in (
        "patch_association",
        "patch_association_step",
        "test_error",
        "label_noise_rate",
        "phases",
        "steps",
        "seconds",
    ):
        assert key in summary, key
    assert summary["steps"] == 150
    assert 0 <= summary["label_noise_rate"] < 0.05
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(l)["step"] for l in lines] == [0, 50, 100, 150]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["theory"]["d"] == 16 and config["gd"]["N"] == 2000 and config["seed"] == 0


@pytest.mark.slow
def test_seeds_run_vmapped_with_one_summary_each(tmp_path):
    out = run(
        "--config.theory.d=8",
        "--config.gd.N=500",
        "--config.gd.steps=20",
        "--config.gd.eval_every=10",
        "--config.seed=3",
        "--config.seeds=2",
        "--config.gd.n_test=1000",
        "--config.gd.n_final_test=10000",
        f"--workdir={tmp_path}",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["seed"] == 3 and summary["seeds"]["count"] == 2
    assert [r["seed"] for r in summary["seeds"]["per_seed"]] == [3, 4]
    assert summary["seeds"]["per_seed"][0]["test_error"] == summary["test_error"]
    assert (
        summary["seeds"]["per_seed"][0]["test_error"]
        != summary["seeds"]["per_seed"][1]["test_error"]
    )
    assert "2 seeds: patch association in" in out.stdout


@pytest.mark.slow
def test_split_samples_gives_the_one_axis_sweep_s_numbers_on_every_device(tmp_path):
    """2 seeds on 8 devices: a (2, 4) mesh, each seed's samples over 4 devices; the summaries equal
    the one-axis sweep's to float32 round-off (the sums over samples in another order)."""
    summaries = {}
    for split in (False, True):
        workdir = tmp_path / str(split)
        env = envs.devices(8)
        out = subprocess.run(
            [sys.executable, "-m", "experiments.theory", "--config.theory.d=8",
             "--config.gd.N=512", "--config.gd.steps=20", "--config.gd.eval_every=10",
             "--config.seeds=2", f"--config.split_samples={split}", f"--workdir={workdir}"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        summaries[split] = json.loads((workdir / "summary.json").read_text())
    one, two = ([r["final_loss"] for r in summaries[s]["seeds"]["per_seed"]] for s in (False, True))
    np.testing.assert_allclose(two, one, rtol=1e-5)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--config.theory.D=18"], "not a multiple of C"),
        (["--config.theory.D=20", "--config.theory.C=4"], "square"),
        (["--config.theory.D=36", "--config.theory.C=3"], "tile"),
        (["--config.theory.q=1.5"], "[0, 1]"),
        (["--config.gd.N=0"], "N=0"),
        (["--config=tpu_configs/theory.py:huge"], "unknown preset"),
        (["--config.gd.risk=bayes"], "risk"),
        (["--config.theory.partition=hex"], "partition"),
        (["--config.seeds=0"], "seeds=0"),
        (
            ["--config.gd.risk=population_exact", "--config.theory.D=64", "--config.theory.C=4"],
            "multisets",
        ),
        (["--config.gd.risk=population_exact", "--config.overlay_N=1e3"], "overlay_N"),
        (
            [
                "--config.gd.population_method=general",
                "--config.gd.risk=population_exact",
                "--config.theory.D=36",
            ],
            "patterns",
        ),
        (["--config.gd.n_final_test=15000"], "n_final_test=15000"),
        (["--config.theory.foo=1"], "no such config field"),
        (["--config.gd.N=abc"], "--config.gd.N=abc"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, args, words):
    out = run(*args, f"--workdir={tmp_path}")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
