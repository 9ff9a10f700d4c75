"""A workdir belongs to one run of one binary, held by one process (`posattn.ownership`): refusals
touch nothing, a second process is refused naming the first's pid, a killed one leaves no lock."""

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from posattn import ownership, workdir_lock
from posattn.errors import ConfigError

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = {"seed": 0, "optimizer": {"lr": 0.1}, "steps": 10}


@pytest.fixture(autouse=True)
def no_claim_left():
    yield
    ownership.release(
        ownership.FAILED
    )  # a test that failed midway must not leave its claim to the next


def files(path: pathlib.Path) -> dict:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def finished(path: pathlib.Path, binary="train_images", config=CONFIG) -> pathlib.Path:
    """A workdir holding a finished run of `binary` with `config`, and a result file."""
    ownership.claim(path, binary, config)
    (path / "config.json").write_text(json.dumps(config))
    (path / "summary.json").write_text("{}")
    ownership.release(ownership.COMPLETE)
    return path


def marker(path: pathlib.Path) -> dict:
    return json.loads((path / ownership.MARKER).read_text())


def test_a_claim_marks_and_locks_the_workdir_and_release_records_the_end(tmp_path):
    path = tmp_path / "new" / "run"
    ownership.claim(path, "theory", CONFIG)
    m = marker(path)
    assert (m["binary"], m["status"], m["pid"], m["config"]) == (
        "theory",
        "running",
        os.getpid(),
        CONFIG,
    )
    assert m["fingerprint"] == ownership.fingerprint(CONFIG)
    assert (
        workdir_lock.is_locked(path)
        and (path / workdir_lock.LOCK).read_text() == f"{os.getpid()}\n"
    )
    (path / "summary.json").write_text("{}")
    assert ownership.release(ownership.COMPLETE)
    assert marker(path)["status"] == "complete" and not workdir_lock.is_locked(path)


@pytest.mark.parametrize(
    "binary, config, words",
    [
        ("theory", CONFIG, "holds a train_images run (complete): theory does not overwrite it"),
        (
            "train_images",
            {**CONFIG, "seed": 1},
            "holds a train_images run (complete) of another config (seed 0 -> 1)",
        ),
    ],
)
def test_another_binary_or_config_is_refused_and_nothing_changes(tmp_path, binary, config, words):
    path = finished(tmp_path)
    before = files(path)
    with pytest.raises(ConfigError) as e:
        ownership.claim(path, binary, config)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert files(path) == before


def test_a_run_without_its_config_json_still_refuses_another_seed(tmp_path):
    path = finished(tmp_path)
    (path / "config.json").unlink()
    with pytest.raises(ConfigError, match=r"of another config \(seed 0 -> 7\)"):
        ownership.claim(path, "train_images", {**CONFIG, "seed": 7}, resumes=True)


def test_fields_a_resumed_run_may_change_are_not_the_config(tmp_path):
    path = finished(tmp_path)
    changed = {**CONFIG, "optimizer": {"lr": 0.2}}
    assert ownership.fingerprint(changed, ["optimizer.lr"]) == ownership.fingerprint(
        CONFIG, ["optimizer.lr"]
    )
    ownership.claim(path, "train_images", changed, may_change=["optimizer.lr"])
    assert marker(path)["config"] == changed


def test_a_run_recorded_before_a_field_existed_is_compared_completed_by_its_schema(tmp_path):
    path = finished(tmp_path)  # its marker and config.json lack "warmup", added to the schema since
    later = {**CONFIG, "warmup": 0}
    complete = lambda stored: {"warmup": 0, **stored}  # the schema's completion (its default 0)
    with pytest.raises(ConfigError, match=r"warmup '\(absent\)' -> 0"):
        ownership.check_claim(path, "train_images", later)
    ownership.check_claim(path, "train_images", later, complete=complete)
    with pytest.raises(ConfigError, match="warmup 0 -> 5"):
        ownership.check_claim(path, "train_images", {**later, "warmup": 5}, complete=complete)
    (path / ownership.MARKER).unlink()  # a run from before markers: its config.json is compared
    ownership.check_claim(path, "train_images", later, complete=complete)


def test_a_failed_run_may_be_replaced_by_another_config_of_its_binary(tmp_path):
    path = tmp_path / "run"
    ownership.claim(path, "theory", CONFIG)
    (path / "metrics.jsonl").write_text("{}\n")
    ownership.release(ownership.FAILED, "a NaN")
    with pytest.raises(ConfigError, match="holds a theory run"):
        ownership.claim(path, "reproduce", CONFIG)
    ownership.claim(path, "theory", {**CONFIG, "seed": 3})


@pytest.mark.parametrize("workdir", ["", "   ", None])
def test_an_empty_workdir_is_refused(workdir):
    with pytest.raises(ConfigError, match="--workdir is (empty|only whitespace): give a directory"):
        ownership.claim(workdir, "theory", CONFIG)


def test_a_workdir_without_marker_is_taken_only_empty_or_with_this_configs_record(tmp_path):
    (tmp_path / "notes.txt").write_text("someone's notes")
    with pytest.raises(
        ConfigError, match=r"holds files \(notes.txt\) but no workdir.json or config.json"
    ):
        ownership.claim(tmp_path, "theory", CONFIG)
    (tmp_path / "config.json").write_text(json.dumps({**CONFIG, "seed": 1}))
    with pytest.raises(ConfigError, match=r"config.json is another config \(seed 1 -> 0\)"):
        ownership.claim(tmp_path, "train_images", CONFIG)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))  # e.g. a run of posattn.vision.train
    ownership.claim(tmp_path, "train_images", CONFIG)


@pytest.mark.parametrize("damage", [b"\x00\xff", b'{"seed": ', b"", b"[1]"])
def test_a_damaged_config_json_is_refused_in_one_line(tmp_path, damage):
    path = finished(tmp_path)
    (path / "config.json").write_bytes(damage)
    before = files(path)
    for call in (
        lambda: ownership.claim(path, "train_images", CONFIG),
        lambda: ownership.check_run(path, "train_images"),
    ):
        with pytest.raises(ConfigError, match="its config.json (is damaged|holds a list)"):
            call()
    assert files(path) == before


def test_a_reader_refuses_another_binarys_run(tmp_path):
    path = finished(tmp_path, binary="theory")
    with pytest.raises(ConfigError, match="holds a theory run, not a train_images run"):
        ownership.check_run(path, "train_images")
    with pytest.raises(ConfigError, match="has no config.json"):
        ownership.check_run(tmp_path / "nothing", "train_images")


def test_a_run_that_wrote_nothing_leaves_the_workdir_as_it_found_it(tmp_path):
    new = tmp_path / "a" / "b"
    ownership.claim(new, "theory", CONFIG)
    assert not ownership.release(ownership.FAILED, "refused later")
    assert not (tmp_path / "a").exists()  # nor the directories it created
    path = finished(tmp_path / "run")
    before = files(path)
    ownership.claim(path, "train_images", CONFIG)
    ownership.release(ownership.INTERRUPTED)
    assert files(path) == before  # the marker and the lock's pid as they were


HOLD = """
import sys, time
from posattn import ownership
ownership.claim(sys.argv[1], "theory", {"seed": 0})
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_process_is_refused_naming_the_first_and_a_killed_one_leaves_no_lock(tmp_path):
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu"),
    )
    try:
        assert first.stdout.readline() == "held\n"
        with pytest.raises(ConfigError, match=rf"is in use by another process \(pid {first.pid}\)"):
            ownership.claim(tmp_path, "theory", {"seed": 0})
        with pytest.raises(ConfigError, match=rf"holds a theory run \(running, pid {first.pid}\)"):
            ownership.claim(tmp_path, "reproduce", {"seed": 0})
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    with pytest.raises(ConfigError, match=r"holds a theory run \(killed while running\)"):
        ownership.claim(tmp_path, "reproduce", {"seed": 0})
    ownership.claim(tmp_path, "theory", {"seed": 0})  # the OS dropped the killed process's lock
    assert marker(tmp_path)["pid"] == os.getpid()


def test_a_bucket_out_of_reach_is_one_line_without_gcsfs_tracebacks(tmp_path, caplog):
    """gcsfs logs every failed attempt with its traceback before it raises; the claim's probe keeps them
    out of the binary's one line (and leaves gcsfs's log as it was for the run)."""
    import logging

    from tests import fake_gcs

    class OutOfReach(fake_gcs.NoAppendFileSystem):
        def exists(self, path, **kwargs):
            try:
                raise ConnectionError("Cannot connect to host storage.googleapis.com:443")
            except ConnectionError:
                logging.getLogger("gcsfs").exception("_request out of retries on exception")
                raise

    fake_gcs.install(tmp_path, OutOfReach)
    try:
        with caplog.at_level(logging.DEBUG, logger="gcsfs"):
            with pytest.raises(ConfigError, match=r"cannot be reached \(ConnectionError: Cannot"):
                ownership.check_claim("gs://bucket/run", "theory", {})
            assert logging.getLogger("gcsfs").level == logging.DEBUG  # as it was
        assert [r for r in caplog.records if r.name == "gcsfs"] == []
    finally:
        fake_gcs.uninstall()
