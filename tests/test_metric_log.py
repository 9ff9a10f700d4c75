"""The metrics record: JSON lines and TensorBoard events with one schema for both regimes."""

import json
import struct

import numpy as np
import pytest
from tensorboardX.proto import event_pb2

from posattn import io
from posattn.errors import ConfigError
from posattn.metric_log import TENSORBOARD_DIR, MetricLog, from_theory, paired_test_metrics


def events(directory):
    """The events of the TFRecord event files in `directory` (length, crc, data, crc), in order."""
    for path in sorted(directory.iterdir()):
        data, i = path.read_bytes(), 0
        while i < len(data):
            (length,) = struct.unpack("<Q", data[i : i + 8])
            yield event_pb2.Event.FromString(data[i + 12 : i + 12 + length])
            i += 12 + length + 4


def read_events(directory) -> dict:
    """{tag: [(step, value)]} of the scalars in `directory`'s event files."""
    scalars = {}
    for event in events(directory):
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_both_regimes_share_the_schema_and_tensorboard_reads_it(tmp_path):
    theory = from_theory(
        {
            "step": np.int32(50),
            "loss": np.float32(0.25),
            "test_error": 0.125,
            "alpha": np.float32(1.5),
        }
    )
    assert theory == {
        "step": 50,
        "train_loss": 0.25,
        "test_error": 0.125,
        "test_accuracy": 0.875,
        "alpha": 1.5,
    }
    image = paired_test_metrics({"step": 4, "test_accuracy": 0.75, "test_loss": 0.5})
    assert image["test_error"] == 0.25 and not set(theory) - set(image) - {"train_loss", "alpha"}

    log = MetricLog(tmp_path, fresh=True)
    log.write(theory)
    log.write({"step": 60, "train_loss": float("nan"), "images_per_second": None})
    log.close()
    lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[0] == theory and lines[1]["step"] == 60 and np.isnan(lines[1]["train_loss"])
    events = read_events(tmp_path / TENSORBOARD_DIR)
    assert events["train_loss"] == [(50, 0.25)]  # the NaN stays in the JSON lines only
    assert events["test_accuracy"] == [(50, 0.875)] and "images_per_second" not in events


def test_a_run_that_continues_from_a_step_drops_the_records_after_it(tmp_path):
    log = MetricLog(tmp_path, fresh=True)
    for step in (1, 2, 3, 4, 5):
        log.write({"step": step, "train_loss": 1.0 / step})
    log.close()
    # killed after step 5, resumed from its checkpoint at step 3: steps 4 and 5 run again
    log = MetricLog(tmp_path, start_step=3)
    log.write({"step": 4, "train_loss": 0.5})
    log.close()
    lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["train_loss"]) for r in lines] == [
        (1, 1.0),
        (2, 0.5),
        (3, 1 / 3),
        (4, 0.5),
    ]
    # TensorBoard hides the first series' events from step 4 on (a SessionLog START at the purge step)
    starts = [
        e.step
        for e in events(tmp_path / TENSORBOARD_DIR)
        if e.HasField("session_log") and e.session_log.status == event_pb2.SessionLog.START
    ]
    assert starts == [4]


def test_a_record_cut_short_by_a_kill_is_left_out_when_the_run_resumes(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "train_loss": 1.0}\n{"step": 2, "train_lo')
    log = MetricLog(tmp_path, start_step=2)
    log.write({"step": 3, "train_loss": 0.5})
    log.close()
    lines = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 3]
    (tmp_path / "bad.jsonl").write_text('{"step": 1\n{"step": 2}\n')  # not at the end: an error
    with pytest.raises(
        ConfigError,
        match=r"bad.jsonl line 1 \(of 2\) is not a JSON record \(Expecting ',' "
        r"delimiter\): repair or delete that line, then rerun$",
    ):
        io.read_jsonl(tmp_path / "bad.jsonl")


def test_read_gives_every_record_of_a_run_and_none_for_a_run_that_wrote_none(tmp_path):
    from posattn import metric_log

    assert metric_log.read(tmp_path) == []
    log = MetricLog(tmp_path, fresh=True)
    log.write({"step": 0, "stage": "attention", "band": {"low": 0.1}})  # a study's nested record
    log.write({"step": 1, "train_loss": 0.5})
    log.close()
    assert metric_log.read(tmp_path) == [
        {"step": 0, "stage": "attention", "band": {"low": 0.1}},
        {"step": 1, "train_loss": 0.5},
    ]
