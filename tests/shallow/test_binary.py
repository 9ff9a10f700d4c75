"""`python -m experiments.shallow_vit` end to end on a tiny problem, and its refusals of bad input."""

import json
import os
import subprocess
import sys

import pytest

from tests import envs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = [
    "--config.seeds=2",
    "--config.n_stars=6,8,10",
    "--config.Ns=5,20",
    "--config.taus=1,0",
    "--config.sigmas=0,1",
    "--config.deltas=0,1",
    "--config.sgd.steps=20",
    "--config.sgd.eval_every=10",
    "--config.sgd.n_test=50",
    "--config.sgd.N=40",
    "--config.remove=3",
    "--config.sparsify_noisy_tokens=3",
]


def run(*args):
    env = envs.devices(1)
    return subprocess.run(
        [sys.executable, "-m", "experiments.shallow_vit", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_tiny_run_writes_every_output(tmp_path):
    out = run(*TINY, f"--workdir={tmp_path}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ETA" in out.stdout and "run-steps/s" in out.stdout
    for name in (
        "config.json",
        "run.json",
        "metrics.jsonl",
        "summary.json",
        "summary.md",
        "phase_maps.png",
        "boundary_sweeps.png",
        "attention.png",
        "sparsification.png",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["rows"]) == 9 and all(r["verdict"] for r in summary["rows"])
    assert (
        len(summary["maps"]["vit"]["success_rate"]) == 3 and len(summary["maps"]["free"]["N"]) == 2
    )
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["stage"] for r in records] == [
        "attention",
        "grid vit",
        "grid free",
        "sparsification",
        "exact population",
    ]
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]  # one schema: `posattn.metric_log`
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["sgd"]["steps"] == 20
    assert config["grids"]["taus"] == [0, 1]  # given as 1,0: a sweep is read in ascending order
    assert "| claim | paper | ours | verdict |" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize(
    "args, words",
    [
        # one relevant token against one confusion token (I1 itself has none)
        (["--config.n_stars=1", "--config.tokens.alpha_conf=0.0334"], "majority vote"),
        (["--config.Ns=0,10"], "Ns=(0, 10)"),
        (["--config.taus=0,-1"], "taus=(0, -1)"),
        (["--config.remove=30"], "remove=30"),
        (["--config.model.m_a=4"], "m_a=4"),
        (["--config.sgd.success=always"], "success='always'"),
        (["--config.tokens.tau=nan"], "tau=nan"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, args, words):
    out = run(*args, f"--workdir={tmp_path}")
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and words in last, last


@pytest.mark.parametrize(
    "args, words",
    [
        (["--config=tpu_configs/shallow_settle.py:nope"], "'nope'"),
        (["--config.seeds=1"], "seeds=1"),
    ],
)
def test_settle_bad_input_exits_2_with_one_line(tmp_path, args, words):
    env = envs.devices(1)
    out = subprocess.run(
        [sys.executable, "-m", "experiments.shallow_settle", *args, f"--workdir={tmp_path}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and words in last, last
