"""What every binary goes through (`posattn.cli.run`): the persistent compilation cache switch, and the
workdir check before any work."""
import os
import pathlib
import subprocess
import sys

import jax
import pytest

from posattn import cli
from tests import envs

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def restore_cache_dir():
    before = jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs
    yield
    jax.config.update("jax_compilation_cache_dir", before[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])


def test_cache_goes_where_the_flag_or_environment_says(tmp_path, monkeypatch, restore_cache_dir):
    monkeypatch.setenv(cli.CACHE_ENV, str(tmp_path / "env"))
    assert cli.enable_compilation_cache(str(tmp_path / "flag")) == str(tmp_path / "flag")
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "flag")
    assert cli.enable_compilation_cache() == str(tmp_path / "env")
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "env")


def test_cache_turned_off_leaves_jax_alone(monkeypatch, restore_cache_dir):
    before = jax.config.jax_compilation_cache_dir
    assert cli.enable_compilation_cache("off") is None
    monkeypatch.setenv(cli.CACHE_ENV, "0")
    assert cli.enable_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir == before


@pytest.mark.parametrize("binary", ["theory", "phase_three", "reproduce", "shallow_vit", "token_grid"])
def test_binaries_refuse_an_unwritable_workdir_before_any_work(binary, tmp_path):
    (tmp_path / "file").write_text("")
    out = subprocess.run([sys.executable, "-m", f"experiments.{binary}", f"--workdir={tmp_path}/file/run"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=envs.devices(1))
    assert out.returncode == 2 and out.stderr == (
        f"error: --workdir={tmp_path}/file/run cannot be written (Not a directory): choose a writable "
        "directory\n"), out.stderr


@pytest.mark.parametrize("args, words", [
    (["--preset=fig2"], "dataset='gaussian_cnn' has no exact population risk"),
    (["--q="], "--q=: give probabilities"),
    (["--q=0.4,2"], "q=2.0 is a probability"),
])
def test_phase_three_refuses_problems_it_cannot_run_before_any_work(args, words, tmp_path):
    out = subprocess.run([sys.executable, "-m", "experiments.phase_three", f"--workdir={tmp_path}/run", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env=envs.devices(1))
    assert out.returncode == 2 and out.stderr.startswith("error: ") and words in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
