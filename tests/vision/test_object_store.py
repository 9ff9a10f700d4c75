"""The image trainer on a store that cannot append (issue 49 item 5): a run on --workdir=gs://... is
written, killed with SIGKILL after its first checkpoint, resumed, and read back, on the fake gs:// of
`tests.fake_gcs` (fsspec, as etils.epath serves gs:// without TensorFlow; mode "a" refused).

What it proves: every record of the run (workdir.json, config.json, run.json, the metrics, TensorBoard's
events, summary.json, curves.png) goes through the gs:// code path (`etils.epath` -> fsspec) and never
appends; the kill loses nothing that the resume does not write again; the metrics read back
(`metric_log.read`) are each step's once, in order, equal to an uninterrupted run's; TensorBoard's
events are whole files with the resume's purge mark; `runs.load_run` reads the run back from gs://.

What it does not: orbax writes the checkpoints through tensorstore, whose gs:// driver speaks to Google
Cloud Storage itself and cannot be pointed at an fsspec file system. Here the checkpoints folder of the
gs:// workdir is mapped to the same folder on the local disk (`checkpoint.checkpoints_dir` patched), so
orbax takes its local route (a temporary folder renamed) where on a bucket it writes a commit file;
only a real bucket checks that route, and gcsfs's own behaviour (consistency, retries, rate limits of
a rewritten object). docs/distributed.md says so too.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest
from etils import epath

from posattn import metric_log, ownership
from posattn.errors import ConfigError
from posattn.vision import checkpoint, runs
from posattn.vision.data import datasets, tfds_datasets
from tests import fake_gcs
from tests.test_metric_log import events

ROOT = pathlib.Path(__file__).resolve().parents[2]
URL = "gs://bucket/run"
CHUNK = 4  # records a chunk in the runs here, so that a run fills several

# The binary in a process whose gs:// is the fake in ROOT_DIR (argv[1]) and whose checkpoints of a gs://
# workdir lie in the same folder on the local disk.
PROGRAM = """
import runpy, sys
from etils import epath
from tests import fake_gcs
from posattn import chunked_log
from posattn.vision import checkpoint
root = sys.argv.pop(1)
fake_gcs.install(root)
chunked_log.CHUNK_RECORDS = {chunk}
original = checkpoint.checkpoints_dir
def checkpoints_dir(workdir):
    if str(workdir).startswith("gs://"):
        return epath.Path(fake_gcs.local(str(workdir), root)) / checkpoint.CHECKPOINTS_DIR
    return original(workdir)
checkpoint.checkpoints_dir = checkpoints_dir
sys.argv[0] = "train_images"
runpy.run_module("experiments.train_images", run_name="__main__")
""".format(chunk=CHUNK)

FLAGS = [
    "--config=tpu_configs/digits.py:quick",
    "--config.total_steps=200",
    "--config.checkpoint_every=10",
    "--config.keep_checkpoints=2",
    "--config.log_every=5",
    "--config.eval_every=100",
]
# what a step computes (a resumed run's equal an uninterrupted one's); not the timings
COMPUTED = ("step", "train_loss", "train_accuracy", "train_grad_norm", "test_loss", "test_error")


def launch(root, workdir, out) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(root), *FLAGS, f"--workdir={workdir}"],
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def committed(folder: pathlib.Path) -> list[int]:
    """The checkpoint steps in `folder` that orbax has committed."""
    if not folder.is_dir():
        return []
    return sorted(
        int(p.name)
        for p in folder.iterdir()
        if p.name.isdigit() and (p / "_CHECKPOINT_METADATA").exists()
    )


@pytest.fixture
def gs(tmp_path, monkeypatch):
    root = tmp_path / "gs"
    fake = fake_gcs.install(root)
    original = checkpoint.checkpoints_dir
    monkeypatch.setattr(
        checkpoint,
        "checkpoints_dir",
        lambda w: (
            epath.Path(fake_gcs.local(str(w), root)) / checkpoint.CHECKPOINTS_DIR
            if str(w).startswith("gs://")
            else original(w)
        ),
    )
    yield root, fake
    fake_gcs.uninstall()


@pytest.mark.slow
def test_a_run_on_gs_is_killed_resumes_and_reads_back_every_record(gs, tmp_path):
    root, fake = gs
    disk = pathlib.Path(fake_gcs.local(URL, root))
    proc = launch(root, URL, subprocess.PIPE)
    said = b""
    # the run logs every 5 steps: its own lines pace the wait for the first committed checkpoint
    for line in iter(proc.stdout.readline, b""):
        said += line
        if committed(disk / "checkpoints"):
            break
    proc.send_signal(signal.SIGKILL)
    proc.stdout.close()
    assert proc.wait(timeout=60) == -signal.SIGKILL, said.decode()[-3000:]
    killed_at = committed(disk / "checkpoints")[-1]
    assert killed_at < 200  # killed mid-run

    with open(tmp_path / "second.out", "w") as out:
        assert launch(root, URL, out).wait(timeout=600) == 0, (tmp_path / "second.out").read_text()[
            -3000:
        ]
    said = (tmp_path / "second.out").read_text()
    resumed = int(re.search(r"resumed from step (\d+)", said).group(1))
    assert resumed >= killed_at

    # the same run uninterrupted, on the local disk (metrics.jsonl appended)
    straight = tmp_path / "straight"
    with open(tmp_path / "straight.out", "w") as out:
        assert launch(root, straight, out).wait(timeout=600) == 0

    # each record once, in order (a step that evaluates has a training and a test record), as the
    # uninterrupted run's to the last bit
    records, expected = metric_log.read(URL), metric_log.read(straight)
    assert [r["step"] for r in expected] == sorted([*range(5, 201, 5), 100, 200])
    computed = lambda rs: [{k: r[k] for k in COMPUTED if k in r} for r in rs]
    assert computed(records) == computed(expected)
    chunks = sorted(p.name for p in (disk / metric_log.METRICS_CHUNKS).iterdir())
    assert len(chunks) >= len(records) // CHUNK and chunks[0] == "000000.jsonl"
    assert not (disk / metric_log.METRICS_FILE).exists()
    assert not (
        straight / metric_log.METRICS_CHUNKS
    ).exists()  # the local run's: one file, appended

    # TensorBoard: whole event files, every logged step, each launch's purge mark at its next step
    tensorboard = disk / metric_log.TENSORBOARD_DIR
    assert all(".out.tfevents." in p.name for p in tensorboard.iterdir())
    seen = list(events(tensorboard))
    assert {e.step for e in seen if any(v.tag == "train_loss" for v in e.summary.value)} == set(
        r["step"] for r in records if "train_loss" in r
    )
    assert [e.step for e in seen if e.HasField("session_log")] == [1, resumed + 1]

    # the run's records read back from gs://
    assert ownership.read_marker(URL)["status"] == ownership.COMPLETE
    assert json.loads(epath.Path(f"{URL}/summary.json").read_text())["steps"] == 200
    assert (disk / "curves.png").stat().st_size > 0
    loaded = runs.load_run(URL)
    assert loaded.config.total_steps == 200 and loaded.preprocess.info.name == "digits"
    assert fake.appends_refused == 0  # (in this process; the runs' would have failed)
    assert not [p for p in disk.rglob("*.tmp")]


@pytest.mark.parametrize(
    "name, where, env",
    [
        ("cifar10", {"data_dir": "gs://b/tfds"}, {}),
        ("fashion_mnist", {"idx_dir": "gs://b/fashion"}, {}),
        ("cifar10", {}, {"TFDS_DATA_DIR": "s3://b/tfds"}),
        ("fashion_mnist", {}, {"POSATTN_FASHION_MNIST_DIR": "gs://b/fashion"}),
    ],
)
def test_a_data_dir_on_an_object_store_is_refused_naming_the_routes_that_work(
    name, where, env, monkeypatch
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    (flag, url), *_ = [(f"--config.{k}", v) for k, v in where.items()] or [
        (f"${k}", v) for k, v in env.items()
    ]
    with pytest.raises(ConfigError) as refused:
        datasets.get(name, **where)
    assert str(refused.value) == (
        f"{flag}={url} is not on this machine's disk, and the data are read from local files: copy "
        f"them to the host's disk (gcloud storage cp -r {url} /data) and pass that folder, or mount "
        "the bucket with gcsfuse (gcsfuse --implicit-dirs BUCKET /mnt/BUCKET) and pass the path "
        "under the mount"
    )
    assert tfds_datasets.check_local_data_dir("/mnt/bucket/tfds") == "/mnt/bucket/tfds"


def test_the_binary_refuses_a_gs_data_dir_in_one_line_with_status_2_and_touches_nothing(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.train_images",
            "--config=tpu_configs/digits.py:quick",
            "--config.dataset=fashion_mnist",
            "--config.idx_dir=gs://bucket/fashion",
            f"--workdir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert "--config.idx_dir=gs://bucket/fashion is not on this machine's disk" in line
    assert "gcsfuse" in line and not (tmp_path / "run").exists()
