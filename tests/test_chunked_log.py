"""Records on a store that cannot append (issue 49 item 5): every record a run writes, through gs:// as
etils.epath serves it (fsspec), on a fake gs:// that refuses mode "a" (`tests.fake_gcs`). The trainer
end to end (written, killed, resumed, read back) is tests/vision/test_object_store.py."""

import json

import numpy as np
import pytest
from etils import epath

from posattn import chunked_log, io, metric_log, run_record
from posattn.errors import ConfigError
from posattn.metric_log import METRICS_FILE, TENSORBOARD_DIR, MetricLog
from tests import fake_gcs
from tests.test_metric_log import events, read_events

RUN = "gs://bucket/run"


@pytest.fixture
def gs(tmp_path, monkeypatch):
    """gs:// served from tmp_path/gs without append; 3 records a chunk (so that chunks fill)."""
    fake = fake_gcs.install(tmp_path / "gs")
    monkeypatch.setattr(chunked_log, "CHUNK_RECORDS", 3)
    yield fake
    fake_gcs.uninstall()


def on_disk(tmp_path, url=RUN):
    return epath.Path(fake_gcs.local(url, tmp_path / "gs"))


def test_the_fake_is_what_epath_uses_for_gs_and_it_refuses_append(gs, tmp_path):
    path = epath.Path(f"{RUN}/x.txt")
    path.parent.mkdir(parents=True)
    path.write_text("one\n")
    assert (on_disk(tmp_path) / "x.txt").read_text() == "one\n"
    with pytest.raises(OSError, match="cannot append"):
        with path.open("a") as f:
            f.write("two\n")
    with pytest.raises(ValueError, match="only a local file is appended to"):
        io.append_jsonl(path, {"step": 1})  # never reaches the store
    assert path.read_text() == "one\n" and gs.appends_refused == 1


def test_metrics_go_into_chunks_and_a_new_log_continues_them(gs, tmp_path):
    log = MetricLog(RUN, fresh=True)
    for step in range(1, 6):
        log.write({"step": step, "train_loss": 1.0 / step})
    log.close()
    disk = on_disk(tmp_path)
    assert not (disk / METRICS_FILE).exists()
    chunks = sorted(p.name for p in (disk / f"{METRICS_FILE}.d").iterdir())
    assert chunks == ["000000.jsonl", "000001.jsonl"]  # 3 + 2 records, each file whole
    # a new log (a process that continues the run) fills the last chunk, then starts the next
    log = MetricLog(RUN)
    for step in (6, 7):
        log.write({"step": step, "train_loss": 1.0 / step})
    log.close()
    assert [len(io.read_jsonl(p)) for p in chunked_log.chunks(f"{RUN}/{METRICS_FILE}")] == [3, 3, 1]
    assert [(r["step"], r["train_loss"]) for r in metric_log.read(RUN)] == [
        (s, 1.0 / s) for s in range(1, 8)
    ]
    assert gs.appends_refused == 0


def test_a_resumed_run_drops_the_records_after_its_step_in_every_chunk(gs, tmp_path):
    log = MetricLog(RUN, fresh=True)
    for step in range(1, 8):
        log.write({"step": step})
    log.close()
    # killed after step 7, resumed from its checkpoint at step 2: chunk 1 loses a record, chunk 2 goes
    log = MetricLog(RUN, start_step=2)
    assert [r["step"] for r in metric_log.read(RUN)] == [1, 2]
    log.write({"step": 3})
    log.close()
    assert [r["step"] for r in metric_log.read(RUN)] == [1, 2, 3]
    names = sorted(p.name for p in (on_disk(tmp_path) / f"{METRICS_FILE}.d").iterdir())
    assert names == ["000000.jsonl"]
    # a run that starts over empties the log
    MetricLog(RUN, fresh=True).close()
    assert metric_log.read(RUN) == [] and not (on_disk(tmp_path) / f"{METRICS_FILE}.d").exists()


def test_a_kill_mid_write_loses_only_that_record_and_a_damaged_chunk_is_named(gs, tmp_path):
    log = MetricLog(RUN, fresh=True)
    for step in (1, 2):
        log.write({"step": step})
    # a kill during the next upload leaves the temporary file and the chunk's previous version whole
    folder = on_disk(tmp_path) / f"{METRICS_FILE}.d"
    (folder / "000000.jsonl.tmp").write_text('{"step": 1}\n{"step": 2}\n{"st')
    assert [r["step"] for r in metric_log.read(RUN)] == [1, 2]
    assert [r["step"] for r in metric_log.read(RUN)] == [1, 2]
    (folder / "000000.jsonl").write_text('{"step": 1\n{"step": 2}\n')  # altered by hand
    with pytest.raises(ConfigError, match=r"000000.jsonl line 1 \(of 2\) is not a JSON record"):
        metric_log.read(RUN)


def test_a_local_log_appends_to_one_file_unless_it_holds_chunks(tmp_path):
    log = MetricLog(tmp_path, fresh=True)
    log.write({"step": 1})
    log.close()
    assert (tmp_path / METRICS_FILE).read_text() == '{"step": 1}\n'  # the file a researcher tails
    assert not (tmp_path / f"{METRICS_FILE}.d").exists()
    # a run written on a bucket and copied here continues in chunks, after the file's records
    (tmp_path / f"{METRICS_FILE}.d").mkdir()
    (tmp_path / f"{METRICS_FILE}.d" / "000000.jsonl").write_text('{"step": 2}\n')
    log = MetricLog(tmp_path)
    log.write({"step": 3})
    log.close()
    assert (tmp_path / METRICS_FILE).read_text() == '{"step": 1}\n'
    assert [r["step"] for r in metric_log.read(tmp_path)] == [1, 2, 3]


def test_tensorboard_events_on_gs_are_whole_files_that_tensorboard_reads(gs, tmp_path):
    log = MetricLog(RUN, fresh=True)
    for step in range(1, 6):
        log.write({"step": step, "train_loss": 1.0 / step, "nan": float("nan"), "name": "x"})
    log.close()
    logdir = on_disk(tmp_path) / TENSORBOARD_DIR
    files = sorted(p.name for p in logdir.iterdir())
    # a new file after 3 records; no temporary left, none with "tfevents" in its name
    assert len(files) == 2 and all(".out.tfevents." in f for f in files)
    float32 = lambda x: float(np.float32(x))
    assert read_events(logdir) == {"train_loss": [(s, float32(1.0 / s)) for s in range(1, 6)]}
    # a resumed run's first file hides the later steps of the earlier ones from TensorBoard
    log = MetricLog(RUN, start_step=2)
    log.write({"step": 3, "train_loss": 0.25})
    log.close()
    from tensorboardX.proto import event_pb2

    starts = [
        e.step
        for e in events(logdir)
        if e.HasField("session_log") and e.session_log.status == event_pb2.SessionLog.START
    ]
    assert starts == [3] and len(list(logdir.iterdir())) == 3


def test_run_record_summary_and_marker_are_written_and_read_back(gs):
    config = {"lr": np.float32(0.5), "model": {"depth": 2}}
    run_record.write_config(RUN, config)
    run_record.write_run(RUN, {"name": "digits"})
    io.write_json(f"{RUN}/summary.json", {"test_accuracy": np.float64(0.75)})
    assert run_record.read_config(RUN) == {"lr": 0.5, "model": {"depth": 2}}
    assert run_record.read_run(RUN)["name"] == "digits"
    assert json.loads(epath.Path(f"{RUN}/summary.json").read_text()) == {"test_accuracy": 0.75}
    assert not any(p.name.endswith(".tmp") for p in epath.Path(RUN).iterdir())
