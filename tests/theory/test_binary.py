"""`python -m experiments.theory` end to end on a tiny problem, and its refusals of bad input."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args):
    env = {**os.environ, "XLA_FLAGS": ""}
    return subprocess.run([sys.executable, "-m", "experiments.theory", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_tiny_run_writes_every_output(tmp_path):
    out = run("--preset=small", "--d=16", "--N=2000", "--steps=150", "--eval_every=50",
              "--a0=4", "--n_final_test=10000", f"--workdir={tmp_path}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "steps/s" in out.stdout and "ETA" in out.stdout
    for name in ("config.json", "metrics.jsonl", "summary.json", "summary.md", "attention.png",
                 "dynamics.png", "test_error.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("patch_association", "patch_association_step", "test_error", "label_noise_rate",
                "phases", "steps", "seconds"):
        assert key in summary, key
    assert summary["steps"] == 150
    assert 0 <= summary["label_noise_rate"] < 0.05
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(l)["step"] for l in lines] == [0, 50, 100, 150]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["theory"]["d"] == 16 and config["gd"]["N"] == 2000 and config["seed"] == 0


def test_seeds_run_vmapped_with_one_summary_each(tmp_path):
    out = run("--preset=small", "--d=8", "--N=500", "--steps=20", "--eval_every=10", "--seed=3",
              "--seeds=2", "--n_test=1000", "--n_final_test=10000", f"--workdir={tmp_path}")
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["seed"] == 3 and summary["seeds"]["count"] == 2
    assert [r["seed"] for r in summary["seeds"]["per_seed"]] == [3, 4]
    assert summary["seeds"]["per_seed"][0]["test_error"] == summary["test_error"]
    assert summary["seeds"]["per_seed"][0]["test_error"] != summary["seeds"]["per_seed"][1]["test_error"]
    assert "2 seeds: patch association in" in out.stdout


@pytest.mark.parametrize("args, words", [
    (["--D=18"], "not a multiple of C"),
    (["--D=20", "--C=4"], "square"),
    (["--D=36", "--C=3"], "tile"),
    (["--q=1.5"], "[0, 1]"),
    (["--N=0"], "N=0"),
    (["--preset=huge"], "unknown preset"),
    (["--risk=bayes"], "risk"),
    (["--partition=hex"], "partition"),
    (["--seeds=0"], "seeds=0"),
    (["--risk=population_exact", "--D=64", "--C=4"], "multisets"),
    (["--risk=population_exact", "--overlay_N=1e3"], "overlay_N"),
    (["--n_final_test=15000"], "n_final_test=15000"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, args, words):
    out = run(*args, f"--workdir={tmp_path}")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
