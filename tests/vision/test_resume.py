"""Train -> SIGKILL -> restart on the same workdir: bitwise the parameters of an uninterrupted run."""
import importlib.util
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import jax
import numpy as np

from posattn.vision import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS, EVERY = 300, 25
FLAGS = ["--config=tpu_configs/digits.py:local", f"--config.total_steps={STEPS}", "--config.log_every=50",
         f"--config.checkpoint_every={EVERY}", "--config.eval_every=0", "--config.keep_checkpoints=2"]


def command(workdir):
    return [sys.executable, "-m", "experiments.train_images", *FLAGS, f"--workdir={workdir}"]


def saved_steps(workdir: pathlib.Path) -> list[int]:
    ckpts = workdir / "checkpoints"
    return sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) if ckpts.is_dir() else []


def test_sigkill_then_restart_resumes_to_bitwise_the_same_parameters(tmp_path):
    # The three runs share a compilation cache, so the restarted runs skip recompiling the step (the
    # cached executable is the same program, which bitwise reproducibility needs anyway).
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax_cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    proc = subprocess.Popen(command(killed), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    for _ in range(12_000):  # poll every 20 ms, for 4 minutes at most, until the first checkpoint
        if saved_steps(killed) or proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, proc.stderr.read()
    at_kill = saved_steps(killed)
    assert at_kill and at_kill[-1] < STEPS, at_kill  # killed mid-run, after its first checkpoint

    resumed = subprocess.run(command(killed), cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["resumed_from_step"] >= at_kill[-1]
    assert f"resumed from step {summary['resumed_from_step']}" in resumed.stdout

    done = subprocess.run(command(straight), cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr

    assert saved_steps(killed)[-1] == saved_steps(straight)[-1] == STEPS
    a, b = (train.restore(_config(), str(d)) for d in (killed, straight))
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b) > 10
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))  # bitwise: params, Adam moments, step


def _config():
    """The config the binary runs with FLAGS (what `train.restore` needs to rebuild the state's shape)."""
    spec = importlib.util.spec_from_file_location("digits", ROOT / "tpu_configs" / "digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config("local")
    c.total_steps, c.checkpoint_every, c.keep_checkpoints = STEPS, EVERY, 2
    return c
