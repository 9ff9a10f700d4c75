"""Faults the image trainer survives (fast versions of drills/faults.py's drill): a preemption
notice or an interrupt saves and resumes bitwise; a corrupted latest checkpoint falls back to the newest
good one and is moved aside, not deleted; a step folder orbax never committed is skipped and set aside;
a resume checks everything before it changes a file; a launch that stopped before its first checkpoint
is set aside for the corrected one; a failed save stops the run at once; a workdir that cannot take a
checkpoint stops the run before any work; a NaN injected at a chosen step stops the run at that step;
out of memory and a stopped run end the binary with one line.

The tests that read damaged checkpoints or fail saves turn an unraisable exception (an orbax coroutine
or thread left behind) into a failure."""

import errno
import json
import logging
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from etils import epath

from posattn import signals
from posattn import workdir as workdir_lib
from posattn.errors import ConfigError
from posattn.mesh import data_mesh, replicated
from posattn.vision import checkpoint, device_memory, saving, train, train_step
from posattn.vision.data import device_prefetch
from tests.vision import fault_injection
from tests.vision.test_train import tiny_digits

ROOT = pathlib.Path(__file__).resolve().parents[2]
ONE = jax.devices()[:1]
no_leaks = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")


def run(config, workdir):
    return train.train(config, str(workdir), devices=ONE)


def steps_in(workdir) -> list[int]:
    return sorted(
        int(p.name) for p in (pathlib.Path(workdir) / "checkpoints").iterdir() if p.name.isdigit()
    )


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


def signal_at_step(monkeypatch, signum: int, at: int) -> None:
    """Send `signum` to this process, once, as step `at` of a run from step 0 takes its batch (from the
    device prefetch, which drew it earlier: the notice arrives during step `at`, however far the
    pipeline reads ahead)."""
    original, sent = device_prefetch.prefetch, []

    def prefetch_with_a_signal(batches, put, size=2):
        for step, batch in enumerate(original(batches, put, size), 1):
            if step == at and not sent:
                sent.append(step)
                os.kill(os.getpid(), signum)
            yield batch

    monkeypatch.setattr(device_prefetch, "prefetch", prefetch_with_a_signal)


@pytest.mark.slow
@no_leaks
def test_sigterm_saves_at_the_current_step_and_the_restart_ends_bitwise_equal(
    straight, tmp_path, monkeypatch, capsys
):
    config = tiny_digits(total_steps=6, checkpoint_every=3, log_every=3)
    handler = signal.getsignal(signal.SIGTERM)
    signal_at_step(monkeypatch, signal.SIGTERM, 2)
    with pytest.raises(
        signals.RunStopped,
        match=r"^preemption notice \(SIGTERM\) at step 2: saved checkpoint 2 "
        r".* rerun the same command to resume from step 2$",
    ) as err:
        run(config, tmp_path)
    assert err.value.exit_status == 143
    assert signal.getsignal(signal.SIGTERM) is handler  # the caller's handler is back
    assert (
        steps_in(tmp_path) == [2] and not (tmp_path / "summary.json").exists()
    )  # nothing looks done
    monkeypatch.undo()

    # One restart checks two faults (each restart compiles, so the suite stays fast): the newest
    # checkpoint on disk, step 3 (the uninterrupted run's), was bit-flipped; the restart skips it.
    shutil.copytree(straight[0] / "checkpoints" / "3", tmp_path / "checkpoints" / "3")
    fault_injection.damage_checkpoint(tmp_path / "checkpoints" / "3", "bitflip")
    state, summary = run(config, tmp_path)
    assert "checkpoint 3 restores other arrays than were saved" in capsys.readouterr().out
    assert (summary["resumed_from_step"], summary["steps"]) == (2, 6)
    assert [m["step"] for m in summary["checkpoints_moved_aside"]] == [3]
    assert (tmp_path / "checkpoints_unreadable" / "3").is_dir() and steps_in(tmp_path) == [3, 6]
    assert_bitwise_equal(jax.device_get(state), straight[1])


def test_sigint_is_a_stop_request_too_it_saves_and_exits_130_not_a_keyboardinterrupt(
    tmp_path, monkeypatch
):
    handler = signal.getsignal(signal.SIGINT)
    signal_at_step(monkeypatch, signal.SIGINT, 2)
    with pytest.raises(
        signals.RunStopped,
        match=r"^interrupted \(SIGINT\) at step 2: saved checkpoint 2 .* "
        r"rerun the same command to resume from step 2$",
    ) as err:
        run(tiny_digits(total_steps=6, checkpoint_every=3, log_every=3), tmp_path)
    assert err.value.exit_status == 130 and steps_in(tmp_path) == [2]
    assert (
        signal.getsignal(signal.SIGINT) is handler
    )  # Ctrl-C raises KeyboardInterrupt again outside the run


@no_leaks
@pytest.mark.parametrize("damage", ["truncate", "bitflip"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_newest_good_one_and_is_kept(
    straight, tmp_path, damage
):
    workdir = pathlib.Path(shutil.copytree(straight[0], tmp_path / "run"))
    fault_injection.damage_checkpoint(workdir / "checkpoints" / "6", damage)
    mngr = checkpoint.manager(str(workdir), keep=3)
    abstract = checkpoint.abstract_like(jax.device_get(straight[1]), replicated(data_mesh(ONE)))
    with pytest.raises(
        checkpoint.CheckpointError, match="checkpoint 6 .*(does not restore|checksum mismatch)"
    ):
        checkpoint.restore(mngr, abstract)  # an explicit load says why, in one line
    state, skipped = checkpoint.restore_latest_good(mngr, abstract)
    mngr.close()
    assert int(state["step"]) == 3 and [s.step for s in skipped] == [6]
    expected = "checksum mismatch" if damage == "bitflip" else "does not restore"
    assert expected in skipped[0].reason
    assert skipped[0].moved_to == str(workdir / "checkpoints_unreadable" / "6")
    assert (workdir / "checkpoints_unreadable" / "6").is_dir() and steps_in(workdir) == [3]


def truncate_array_data(step_dir: pathlib.Path) -> None:
    """Cut the largest data file of checkpoint `step_dir`'s OCDBT database, which holds its arrays, to 100
    bytes (issue 45's restart: files of the newest step truncated to 100 bytes). Every array read
    fails, each in one of orbax's concurrent reads."""
    data = max((step_dir / "default").glob("ocdbt.process_*/d/*"), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:100])


@no_leaks
def test_a_damaged_step_is_found_before_orbax_reads_it(straight, tmp_path, monkeypatch):
    # orbax's concurrent reads of a damaged step failed with others still in flight on a closed event loop:
    # one restart in three printed thousands of lines of tracebacks after the right fallback
    workdir = pathlib.Path(shutil.copytree(straight[0], tmp_path / "run"))
    truncate_array_data(workdir / "checkpoints" / "6")
    abstract = checkpoint.abstract_like(straight[1], replicated(data_mesh(ONE)))
    with checkpoint.manager(str(workdir), read_only=True) as reader:
        asked, restore = [], reader.restore
        monkeypatch.setattr(
            reader, "restore", lambda step, **kw: asked.append(step) or restore(step, **kw)
        )
        state, skipped = checkpoint.latest_good(reader, abstract)
    assert int(state["step"]) == 3 and asked == [3]  # orbax never read step 6
    assert [s.step for s in skipped] == [6] and "\n" not in skipped[0].reason
    assert re.fullmatch(
        r"does not restore \([\w.]+: ValueError: OUT_OF_RANGE: .*value of size 100\)",
        skipped[0].reason,
    ), skipped[0].reason


RESUMES = """
import pathlib, shutil, sys
import jax
from absl import logging
from posattn import compile_options
from posattn.vision import train
from tests.vision.test_train import tiny_digits
compile_options.enable_compilation_cache()  # the test run's: the straight run's programs are compiled
logging.set_verbosity(logging.ERROR)  # as the binary does
damaged = pathlib.Path(sys.argv[1])
for i in range(int(sys.argv[2])):
    workdir = shutil.copytree(damaged, damaged.parent / f"resume{i}")
    train.train(tiny_digits(total_steps=6, checkpoint_every=3, log_every=3), str(workdir), devices=jax.devices()[:1])
"""


@pytest.mark.slow
def test_a_restart_over_a_truncated_checkpoint_says_one_line_and_no_traceback_ten_times(
    straight, tmp_path
):
    damaged = pathlib.Path(shutil.copytree(straight[0], tmp_path / "damaged"))
    truncate_array_data(damaged / "checkpoints" / "6")
    out = subprocess.run(
        [sys.executable, "-c", RESUMES, str(damaged), "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = (out.stdout + out.stderr).splitlines()
    assert out.returncode == 0, out.stderr[-3000:]
    fallbacks = [line for line in lines if line.startswith("checkpoint 6 does not restore (")]
    assert len(fallbacks) == 10 and all(
        line.endswith(", resuming from step 3") for line in fallbacks
    )
    # nothing else but the run's own lines: no traceback of a read left behind
    said = [
        line
        for line in lines
        if not line.startswith(
            ("checkpoint 6 ", "digits: ", "augmentation: ", "input: ", "step ", "summary: ")
        )
    ]
    assert said == [], "\n".join(said[:40])
    assert sum("; resumed from step 3" in line for line in lines) == 10


@no_leaks
def test_no_checkpoint_restores_nothing_is_moved_and_the_error_lists_each(straight, tmp_path):
    workdir = pathlib.Path(shutil.copytree(straight[0], tmp_path / "run"))
    for step in (3, 6):
        fault_injection.damage_checkpoint(workdir / "checkpoints" / str(step), "truncate")
    mngr = checkpoint.manager(str(workdir), keep=3)
    with pytest.raises(
        checkpoint.CheckpointError,
        match=r"no checkpoint .* restores \(step 6 does not "
        r"restore .*; step 3 does not restore",
    ) as err:
        checkpoint.restore_latest_good(
            mngr, checkpoint.abstract_like(straight[1], replicated(data_mesh(ONE)))
        )
    mngr.close()
    assert "\n" not in str(err.value) and steps_in(workdir) == [3, 6]
    assert not (workdir / "checkpoints_unreadable").exists()
    # the advice keeps the checkpoints: never "move them away to start from step 0"
    assert "nothing was changed" in str(err.value) and "step 0" not in str(err.value)
    assert "TensorStore details" not in str(err.value)


def _uncommitted_copy(workdir: pathlib.Path, step: int, new: int) -> None:
    """Checkpoint `step` copied to `new` without orbax's commit record: the files a save left unfinished
    (on a file system where orbax writes in place, e.g. gs://, an interrupted save looks like this)."""
    dest = workdir / "checkpoints" / str(new)
    shutil.copytree(workdir / "checkpoints" / str(step), dest)
    (dest / "commit_success.txt").unlink()
    metadata = json.loads((dest / "_CHECKPOINT_METADATA").read_text())
    del metadata["commit_timestamp_nsecs"]
    (dest / "_CHECKPOINT_METADATA").write_text(json.dumps(metadata))


@no_leaks
def test_step_folders_orbax_never_committed_are_skipped_not_counted_against_the_good_ones(
    straight, tmp_path
):
    workdir = pathlib.Path(shutil.copytree(straight[0], tmp_path / "run"))
    (workdir / "checkpoints" / "35").mkdir()  # a stray folder above the good steps 3 and 6
    _uncommitted_copy(workdir, 6, 9)
    (
        workdir / "checkpoints" / "12.orbax-checkpoint-tmp-1"
    ).mkdir()  # a save in progress when killed
    found = checkpoint.survey(workdir / "checkpoints")
    assert found.complete == (3, 6) and found.temporary == ("12.orbax-checkpoint-tmp-1",)
    assert found.incomplete == {
        9: "was never committed by orbax (a save that did not finish)",
        35: "is an empty folder",
    }
    abstract = checkpoint.abstract_like(straight[1], replicated(data_mesh(ONE)))
    with checkpoint.manager(str(workdir), read_only=True) as reader:
        assert int(checkpoint.restore(reader, abstract)["step"]) == 6  # the newest committed one
        with pytest.raises(checkpoint.CheckpointError, match="checkpoint 35 .* is an empty folder"):
            checkpoint.restore(reader, abstract, step=35)
        state, skipped = checkpoint.latest_good(reader, abstract)
    assert int(state["step"]) == 6 and [(u.step, u.moved_to) for u in skipped] == [
        (35, None),
        (9, None),
    ]
    assert (workdir / "checkpoints" / "35").is_dir()  # reading moved nothing


@no_leaks
def test_a_restart_resumes_from_the_newest_committed_checkpoint_past_a_stray_folder(
    straight, tmp_path, capsys
):
    workdir = pathlib.Path(shutil.copytree(straight[0], tmp_path / "run"))
    (workdir / "checkpoints" / "35").mkdir()
    (workdir / "checkpoints" / "12.orbax-checkpoint-tmp-1").mkdir()
    state, summary = run(tiny_digits(total_steps=6, checkpoint_every=3, log_every=3), workdir)
    out = capsys.readouterr().out
    assert (
        f"checkpoint 35 is an empty folder: moved to {workdir}/checkpoints_unreadable/35, resuming from "
        "step 6" in out
    )
    assert "removed 12.orbax-checkpoint-tmp-1 from" in out
    assert summary["resumed_from_step"] == 6 and [
        m["step"] for m in summary["checkpoints_moved_aside"]
    ] == [35]
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["3", "6"]
    assert_bitwise_equal(jax.device_get(state), straight[1])


def test_a_cut_line_in_the_middle_of_metrics_jsonl_stops_the_resume_before_any_file_changes(
    straight, tmp_path
):
    workdir = pathlib.Path(shutil.copytree(straight[0], tmp_path / "run"))
    lines = (workdir / "metrics.jsonl").read_text().splitlines(keepends=True)
    (workdir / "metrics.jsonl").write_text(lines[0][:30] + "\n" + "".join(lines[1:]))
    before = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    with pytest.raises(
        ConfigError,
        match=rf"^{workdir}/metrics.jsonl line 1 \(of {len(lines)}\) is not a JSON "
        r"record \(.*\): repair or delete that line, then rerun$",
    ):
        run(tiny_digits(total_steps=9, checkpoint_every=3, log_every=3), workdir)
    assert {
        p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()
    } == before  # summary.json too


def test_a_launch_that_stopped_before_its_first_checkpoint_is_set_aside_for_the_corrected_one(
    straight, tmp_path, capsys
):
    failing = tiny_digits(
        total_steps=6, checkpoint_every=3, log_every=1, seed=1, optimizer__lr=1e30
    )
    with pytest.raises(train.NonFiniteLoss, match="at step 2; .*no checkpoint was saved"):
        run(failing, tmp_path)
    left = sorted(p.name for p in tmp_path.iterdir())
    # the corrected command (another seed: a change a resume would refuse) takes the workdir
    state, summary = run(tiny_digits(total_steps=6, checkpoint_every=3, log_every=3), tmp_path)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("failed-")]
    assert len(aside) == 1 and sorted(p.name for p in aside[0].iterdir()) == left
    assert json.loads((aside[0] / "config.json").read_text())["seed"] == 1  # kept, not deleted
    assert (aside[0] / "metrics.jsonl").read_text().count(
        '"step": 1'
    ) == 1  # its record of what went wrong
    assert f"its files are set aside in {aside[0]}; starting afresh" in capsys.readouterr().out
    assert summary["resumed_from_step"] is None and steps_in(tmp_path) == [3, 6]
    assert_bitwise_equal(
        jax.device_get(state), straight[1]
    )  # nothing of the failed launch leaked in


@no_leaks
def test_a_save_that_fails_in_the_background_stops_the_run_at_the_first_step_that_learns_of_it(
    tmp_path, caplog
):
    logging.getLogger("absl").setLevel(logging.ERROR)  # as the binaries run: quiet library logs
    try:
        with (
            fault_injection.failing_saves(errno.ENOSPC, at="background"),
            saving.orbax_errors_reported(),
        ):
            mngr = checkpoint.manager(str(tmp_path), keep=2)
            saver = saving.Saver(mngr, tmp_path)
            saver.save({"step": np.int32(3), "w": np.arange(4.0)}, 3)
            for _ in range(1000):
                if not mngr.is_saving_in_progress():
                    break
                time.sleep(0.01)
            with pytest.raises(
                saving.SaveFailed,
                match=re.escape(
                    "saving checkpoint 3 failed (No space left on device, errno 28); the run stopped at step 4, "
                    f"no checkpoint was saved before it: free space on the disk of {tmp_path}, then rerun the "
                    "same command to start again"
                ),
            ):
                saver.poll(4)
            saving.close(mngr)  # after the failure too, with no thread left running
    finally:
        logging.getLogger("absl").setLevel(logging.NOTSET)
    assert not [r for r in caplog.records if "orbax" in r.pathname and r.levelno >= logging.ERROR]
    assert (
        checkpoint.survey(tmp_path / "checkpoints").complete == ()
    )  # the tmp folder is not a checkpoint


@pytest.mark.slow
@no_leaks
def test_a_failed_final_save_stops_with_one_line_and_the_rerun_resumes_bitwise(
    straight, tmp_path, capsys
):
    config = tiny_digits(total_steps=6, checkpoint_every=3, log_every=3)
    with fault_injection.failing_saves(errno.ENOSPC, from_step=6, at="background"):
        with pytest.raises(
            saving.SaveFailed,
            match=r"^saving checkpoint 6 failed \(No space left on device, "
            r"errno 28\); the run stopped at step 6, the last complete "
            r"checkpoint, step 3, stays in .*resume from step 3$",
        ):
            run(config, tmp_path)
    assert steps_in(tmp_path) == [3] and not (tmp_path / "summary.json").exists()
    state, summary = run(config, tmp_path)
    assert "removed 6.orbax-checkpoint-tmp" in capsys.readouterr().out
    assert summary["resumed_from_step"] == 3 and steps_in(tmp_path) == [3, 6]
    assert_bitwise_equal(jax.device_get(state), straight[1])


@no_leaks
def test_a_save_refused_by_a_read_only_disk_stops_the_run_with_no_step_after_it(tmp_path):
    config = tiny_digits(total_steps=6, checkpoint_every=3, log_every=1)
    with fault_injection.failing_saves(errno.EROFS, from_step=3, at="start"):
        with pytest.raises(
            saving.SaveFailed,
            match=r"^saving checkpoint 3 failed \(Read-only file system, "
            r"errno 30\); the run stopped at step 3, no checkpoint was "
            rf"saved before it: make {tmp_path} writable again",
        ):
            run(config, tmp_path)
    logged = [
        json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert logged == [1, 2, 3] and steps_in(tmp_path) == []


def test_out_of_memory_stops_the_run_with_one_line(tmp_path, monkeypatch):
    def make_train_step(setup):
        def step(state, batch, hyper):
            raise jax.errors.JaxRuntimeError(
                "RESOURCE_EXHAUSTED: Out of memory allocating 9 bytes.\nmore"
            )

        return step

    monkeypatch.setattr(train_step, "make_train_step", make_train_step)
    with pytest.raises(
        device_memory.OutOfMemory,
        match=r"^out of memory \(RESOURCE_EXHAUSTED: Out of memory allocating 9 "
        r"bytes.\): global_batch_size=16 and eval_batch_size=16 over 1 "
        r"devices do not fit; .*nothing was saved, so the corrected command "
        r"may reuse this --workdir$",
    ):
        run(tiny_digits(), tmp_path)


def test_a_workdir_that_cannot_take_a_checkpoint_stops_the_run_before_any_work(
    tmp_path, monkeypatch
):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match=r"cannot be written \(Not a directory\)"):
        run(tiny_digits(), tmp_path / "a_file" / "run")
    monkeypatch.setattr(workdir_lib, "free_bytes", lambda path: 1000)
    with pytest.raises(
        ConfigError, match=r"has 0.0 MiB free, one checkpoint needs about 0.2 MiB"
    ) as err:
        run(tiny_digits(), tmp_path / "full")
    assert (
        "\n" not in str(err.value) and list((tmp_path / "full").iterdir()) == []
    )  # nothing written


def test_a_probe_that_fails_with_a_file_systems_own_error_is_one_line_too(tmp_path, monkeypatch):
    class PermissionDeniedError(Exception):  # as TensorFlow's file system raises for gs:// paths
        pass

    def refuse(self, text):
        raise PermissionDeniedError("no write access to bucket\nmore detail")

    monkeypatch.setattr(type(epath.Path(tmp_path)), "write_text", refuse)
    with pytest.raises(
        ConfigError,
        match=r"cannot be written \(PermissionDeniedError: no write access to "
        r"bucket\): choose a writable directory$",
    ):
        workdir_lib.check_writable(tmp_path / "run")


def test_the_free_space_asked_for_is_the_checkpoints_kept_and_the_next(tmp_path):
    assert (
        workdir_lib.checkpoint_copies(keep=3, saves=10) == 4
    )  # 3 kept, and the 4th while it is written
    assert (
        workdir_lib.checkpoint_copies(keep=3, saves=10, saved=3) == 1
    )  # a resume: 3 are on the disk
    assert workdir_lib.checkpoint_copies(keep=0, saves=5) == 5  # every save kept
    assert workdir_lib.checkpoint_copies(keep=3, saves=1) == 1  # only the final one
    (tmp_path / "checkpoints" / "4").mkdir(parents=True)
    (tmp_path / "checkpoints" / "6.orbax-checkpoint-tmp-1").mkdir()
    assert (
        workdir_lib.saved_checkpoints(tmp_path) == 1
        and workdir_lib.saved_checkpoints(tmp_path / "no") == 0
    )


def test_checkpoint_bytes_counts_every_array_of_the_state():
    shapes = {
        "a": jax.ShapeDtypeStruct((10, 10), np.float32),
        "b": jax.ShapeDtypeStruct((5,), np.int8),
    }
    assert workdir_lib.tree_bytes(shapes) == 405
    assert workdir_lib.checkpoint_bytes(shapes) == int(405 * 1.1)


@pytest.mark.slow
def test_a_nan_injected_at_a_chosen_step_stops_the_run_there(tmp_path, monkeypatch):
    monkeypatch.setattr(
        train_step, "make_train_step", fault_injection.nan_at_step(train_step.make_train_step, 4)
    )
    with pytest.raises(
        train.NonFiniteLoss,
        match=r"non-finite loss nan .* at step 4; .*checkpoint "
        r"\(step 2\)",
    ):
        run(tiny_digits(total_steps=6, checkpoint_every=2, log_every=1), tmp_path)
    assert steps_in(tmp_path) == [2] and not (tmp_path / "summary.json").exists()
    logged = [
        json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert logged == [1, 2, 3]  # nothing is logged from the broken step on


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_run_ends_the_binary_with_one_line_and_its_exit_status(signum, status):
    program = (
        "from posattn import cli\nfrom posattn.signals import RunStopped\n"
        "cli.define_workdir('w')\n"
        "def main(config, workdir):\n"
        f"    raise RunStopped('notice at step 7: rerun to resume', {int(signum)})\n"
        "cli.run(main)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, "--workdir=/nonexistent"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=120,
    )
    assert done.returncode == status
    assert done.stderr == "stopped: notice at step 7: rerun to resume\n"


def test_a_stop_that_came_after_the_last_poll_is_passed_on_not_lost():
    # SIGTERM during a run's final evaluation or save: the run finishes (it was at its last step), and
    # the request reaches the previous handler, so the next cell of a grid does not start. Once lost,
    # a token grid signalled there ran every remaining cell and exited 0 (the fault drill's case 24).
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        with signals.Watch() as watcher:
            signal.raise_signal(signal.SIGTERM)
            assert watcher.signum == signal.SIGTERM and calls == []  # recorded, not yet passed on
        assert calls == [signal.SIGTERM]
        with signals.Watch() as watcher:  # acted on (saved and stopped): not passed on again
            signal.raise_signal(signal.SIGTERM)
            stopped = watcher.stopped(7, "/tmp/x")
        assert calls == [signal.SIGTERM] and stopped.exit_status == 143
        with (
            pytest.raises(ValueError),
            signals.Watch(),
        ):  # a crash on its way out keeps its own story
            signal.raise_signal(signal.SIGTERM)
            raise ValueError("boom")
        assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
