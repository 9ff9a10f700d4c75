"""Faults the image trainer survives (fast versions of benchmarks/faults.py's drill): a preemption
notice saves and resumes bitwise; a corrupted latest checkpoint falls back to the newest good one and is
moved aside, not deleted; a workdir that cannot take a checkpoint stops the run before any work; a NaN
injected at a chosen step stops the run at that step; a stopped run ends the binary with one line."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
from etils import epath

from benchmarks import injections
from posattn import workdir as workdir_lib
from posattn.errors import ConfigError
from posattn.mesh import data_mesh, replicated
from posattn.vision import checkpoint, preemption, train
from posattn.vision.setup import Setup
from tests.vision.test_train import tiny_digits

ROOT = pathlib.Path(__file__).resolve().parents[2]
ONE = jax.devices()[:1]


def run(config, workdir):
    return train.train(config, str(workdir), devices=ONE)


def steps_in(workdir) -> list[int]:
    return sorted(int(p.name) for p in (pathlib.Path(workdir) / "checkpoints").iterdir() if p.name.isdigit())


def assert_bitwise_equal(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b) > 10
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted 6-step run, checkpoints at 3 and 6: (workdir, final state)."""
    workdir = tmp_path_factory.mktemp("straight")
    state, _ = run(tiny_digits(total_steps=6, checkpoint_every=3, log_every=3), workdir)
    return workdir, jax.device_get(state)


def test_sigterm_saves_at_the_current_step_and_the_restart_ends_bitwise_equal(straight, tmp_path, monkeypatch,
                                                                            capsys):
    config = tiny_digits(total_steps=6, checkpoint_every=3, log_every=3)
    handler = signal.getsignal(signal.SIGTERM)
    original = Setup.train_batches

    def batches_with_a_notice(self, start_step=0, **processes):  # SIGTERM as step 2's batch is drawn
        for step, batch in enumerate(original(self, start_step, **processes), start_step + 1):
            if step == 2:
                os.kill(os.getpid(), signal.SIGTERM)
            yield batch

    monkeypatch.setattr(Setup, "train_batches", batches_with_a_notice)
    with pytest.raises(preemption.Preempted, match=r"at step 2: saved checkpoint 2 .* rerun the same "
                                                   r"command to resume from step 2") as err:
        run(config, tmp_path)
    assert err.value.exit_status == 143 and "\n" not in str(err.value)
    assert signal.getsignal(signal.SIGTERM) is handler  # the caller's handler is back
    assert steps_in(tmp_path) == [2] and not (tmp_path / "summary.json").exists()  # nothing looks done
    monkeypatch.undo()

    # One restart checks two faults (each restart compiles, so the suite stays fast): the newest
    # checkpoint on disk, step 3 (the uninterrupted run's), was bit-flipped; the restart skips it.
    shutil.copytree(straight[0] / "checkpoints" / "3", tmp_path / "checkpoints" / "3")
    injections.damage_checkpoint(tmp_path / "checkpoints" / "3", "bitflip")
    state, summary = run(config, tmp_path)
    assert "checkpoint 3 restores other arrays than were saved" in capsys.readouterr().out
    assert (summary["resumed_from_step"], summary["steps"]) == (2, 6)
    assert [m["step"] for m in summary["checkpoints_moved_aside"]] == [3]
    assert (tmp_path / "checkpoints_unreadable" / "3").is_dir() and steps_in(tmp_path) == [3, 6]
    assert_bitwise_equal(jax.device_get(state), straight[1])


@pytest.mark.parametrize("damage", ["truncate", "bitflip"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_newest_good_one_and_is_kept(straight, tmp_path,
                                                                                  damage):
    workdir = pathlib.Path(shutil.copytree(straight[0], tmp_path / "run"))
    injections.damage_checkpoint(workdir / "checkpoints" / "6", damage)
    mngr = checkpoint.manager(str(workdir), keep=3)
    abstract = checkpoint.abstract_like(jax.device_get(straight[1]), replicated(data_mesh(ONE)))
    with pytest.raises(checkpoint.CheckpointError, match="checkpoint 6 .*(does not restore|SHA-256)"):
        checkpoint.restore(mngr, abstract)  # an explicit load says why, in one line
    state, skipped = checkpoint.restore_latest_good(mngr, abstract)
    mngr.close()
    assert int(state["step"]) == 3 and [s.step for s in skipped] == [6]
    expected = "SHA-256 mismatch" if damage == "bitflip" else "does not restore"
    assert expected in skipped[0].reason
    assert skipped[0].moved_to == str(workdir / "checkpoints_unreadable" / "6")
    assert (workdir / "checkpoints_unreadable" / "6").is_dir() and steps_in(workdir) == [3]


def test_no_checkpoint_restores_nothing_is_moved_and_the_error_lists_each(straight, tmp_path):
    workdir = pathlib.Path(shutil.copytree(straight[0], tmp_path / "run"))
    for step in (3, 6):
        injections.damage_checkpoint(workdir / "checkpoints" / str(step), "truncate")
    mngr = checkpoint.manager(str(workdir), keep=3)
    with pytest.raises(checkpoint.CheckpointError, match=r"no checkpoint .* restores \(step 6 does not "
                                                         r"restore .*; step 3 does not restore") as err:
        checkpoint.restore_latest_good(mngr, checkpoint.abstract_like(straight[1], replicated(data_mesh(ONE))))
    mngr.close()
    assert "\n" not in str(err.value) and steps_in(workdir) == [3, 6]
    assert not (workdir / "checkpoints_unreadable").exists()


def test_a_workdir_that_cannot_take_a_checkpoint_stops_the_run_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match=r"cannot be written \(Not a directory\)"):
        run(tiny_digits(), tmp_path / "a_file" / "run")
    monkeypatch.setattr(workdir_lib, "free_bytes", lambda path: 1000)
    with pytest.raises(ConfigError, match=r"has 0.0 MiB free, one checkpoint needs about 0.2 MiB") as err:
        run(tiny_digits(), tmp_path / "full")
    assert "\n" not in str(err.value) and list((tmp_path / "full").iterdir()) == []  # nothing written


def test_a_probe_that_fails_with_a_file_systems_own_error_is_one_line_too(tmp_path, monkeypatch):
    class PermissionDeniedError(Exception):  # as TensorFlow's file system raises for gs:// paths
        pass

    def refuse(self, text):
        raise PermissionDeniedError("no write access to bucket\nmore detail")

    monkeypatch.setattr(type(epath.Path(tmp_path)), "write_text", refuse)
    with pytest.raises(ConfigError, match=r"cannot be written \(PermissionDeniedError: no write access to "
                                          r"bucket\): choose a writable directory$"):
        workdir_lib.check(tmp_path / "run")


def test_the_free_space_asked_for_is_the_checkpoints_kept_and_the_next(tmp_path):
    assert workdir_lib.checkpoint_copies(keep=3, saves=10) == 4  # 3 kept, and the 4th while it is written
    assert workdir_lib.checkpoint_copies(keep=3, saves=10, saved=3) == 1  # a resume: 3 are on the disk
    assert workdir_lib.checkpoint_copies(keep=0, saves=5) == 5  # every save kept
    assert workdir_lib.checkpoint_copies(keep=3, saves=1) == 1  # only the final one
    (tmp_path / "checkpoints" / "4").mkdir(parents=True)
    (tmp_path / "checkpoints" / "6.orbax-checkpoint-tmp-1").mkdir()
    assert workdir_lib.saved_checkpoints(tmp_path) == 1 and workdir_lib.saved_checkpoints(tmp_path / "no") == 0


def test_checkpoint_bytes_counts_every_array_of_the_state():
    shapes = {"a": jax.ShapeDtypeStruct((10, 10), np.float32), "b": jax.ShapeDtypeStruct((5,), np.int8)}
    assert workdir_lib.tree_bytes(shapes) == 405
    assert workdir_lib.checkpoint_bytes(shapes) == int(405 * 1.1)


def test_a_nan_injected_at_a_chosen_step_stops_the_run_there(tmp_path, monkeypatch):
    monkeypatch.setattr(train, "make_train_step", injections.nan_at_step(train.make_train_step, 4))
    with pytest.raises(train.NonFiniteLoss, match=r"non-finite loss nan .* at step 4; .*checkpoint "
                                                  r"\(step 2\)"):
        run(tiny_digits(total_steps=6, checkpoint_every=2, log_every=1), tmp_path)
    assert steps_in(tmp_path) == [2] and not (tmp_path / "summary.json").exists()
    logged = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3]  # nothing is logged from the broken step on


def test_a_stopped_run_ends_the_binary_with_one_line_and_its_exit_status():
    program = ("from posattn import cli\nfrom posattn.vision.preemption import Preempted\n"
               "def main(argv):\n    raise Preempted('notice at step 7: rerun to resume')\ncli.run(main)\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert done.returncode == 143
    assert done.stderr == "stopped: notice at step 7: rerun to resume\n"
