"""Train -> SIGKILL -> restart on the same workdir: bitwise the parameters of an uninterrupted run; a
workdir is resumed only with its run's config (up to the resumable fields), and sweeps read back a cell
only of the same config."""

import json
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from posattn import cli, run_record
from posattn.errors import ConfigError
from posattn.vision import config as config_lib
from posattn.vision import resume, runs, sweep, train
from tests import envs

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS, EVERY = 120, 20  # killed after the first checkpoint, with 100 steps still to go
FLAGS = [
    "--config=tpu_configs/digits.py:quick",
    f"--config.total_steps={STEPS}",
    "--config.log_every=50",
    f"--config.checkpoint_every={EVERY}",
    "--config.eval_every=0",
    "--config.keep_checkpoints=2",
]


def command(workdir):
    return [sys.executable, "-m", "experiments.train_images", *FLAGS, f"--workdir={workdir}"]


def saved_steps(workdir: pathlib.Path) -> list[int]:
    ckpts = workdir / "checkpoints"
    return (
        sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) if ckpts.is_dir() else []
    )


@pytest.mark.slow
def test_sigkill_then_restart_resumes_to_bitwise_the_same_parameters(tmp_path):
    # The three runs share the test run's compilation cache (tests/conftest.py), so the restarted runs
    # skip recompiling the step (the cached executable is the same program, which bitwise
    # reproducibility needs anyway).
    env = envs.devices(1)
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    proc = subprocess.Popen(
        command(killed), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    for _ in range(12_000):  # poll every 20 ms, for 4 minutes at most, until the first checkpoint
        if saved_steps(killed) or proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, proc.stderr.read()
    at_kill = saved_steps(killed)
    assert at_kill and at_kill[-1] < STEPS, at_kill  # killed mid-run, after its first checkpoint

    resumed = subprocess.run(
        command(killed), cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["resumed_from_step"] >= at_kill[-1]
    assert f"resumed from step {summary['resumed_from_step']}" in resumed.stdout

    done = subprocess.run(
        command(straight), cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr

    assert saved_steps(killed)[-1] == saved_steps(straight)[-1] == STEPS
    # the records of steps the kill made run twice are not in metrics.jsonl twice
    steps = [
        [json.loads(line)["step"] for line in (d / "metrics.jsonl").read_text().splitlines()]
        for d in (killed, straight)
    ]
    assert steps[0] == steps[1] and steps[1][-1] == STEPS
    a, b = (runs.restore_run(d)[1] for d in (killed, straight))
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b) > 10
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(
            np.asarray(x), np.asarray(y)
        )  # bitwise: params, Adam moments, step


def _config():
    """The config the binary runs with FLAGS (as its config.json records it)."""
    c = cli.load_config(str(ROOT / "tpu_configs" / "digits.py"), "quick", config_lib.SCHEMA)
    c.total_steps, c.checkpoint_every, c.keep_checkpoints = STEPS, EVERY, 2
    return c


# ---------------------------------------------------------------------------------- resuming with a config


def _short(**fields):
    """digits:quick (ViT test/2) for a few steps, checkpointing at the end only."""
    c = _config()
    c.total_steps, c.checkpoint_every, c.log_every = 2, 0, 1
    for path, value in fields.items():  # "optimizer__lr" sets c.optimizer.lr
        *parents, leaf = path.split("__")
        node = c
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    return c


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A workdir holding a finished 2-step run of `_short()` (checkpoint at step 2)."""
    workdir = tmp_path_factory.mktemp("trained")
    train.train(_short(), str(workdir), devices=jax.devices()[:1])
    return workdir


@pytest.fixture
def workdir(trained, tmp_path):
    """A fresh copy of `trained`, for a test to resume (or fail to resume) in."""
    return pathlib.Path(shutil.copytree(trained, tmp_path / "run"))


def test_another_model_is_refused_and_the_workdir_keeps_its_record(workdir):
    before = {
        p: (workdir / p).read_bytes() for p in ("config.json", "summary.json", "metrics.jsonl")
    }
    vanilla = _short(model__attention="vanilla", eval_every=1)
    refused = r"another config \(model.attention 'positional' -> 'vanilla'\)"
    with pytest.raises(ConfigError, match=refused) as err:
        train.train(vanilla, str(workdir), devices=jax.devices()[:1])
    assert "\n" not in str(err.value) and "eval_every" not in str(
        err.value
    )  # only the refused fields
    assert {p: (workdir / p).read_bytes() for p in before} == before
    assert saved_steps(workdir) == [2]


def test_total_steps_below_the_checkpoint_is_refused(workdir):
    config_json = (workdir / "config.json").read_bytes()
    with pytest.raises(
        ConfigError,
        match=r"checkpoint at step 2, beyond total_steps=1: resume with "
        r"--config.total_steps=2 or more",
    ):
        train.train(_short(total_steps=1), str(workdir), devices=jax.devices()[:1])
    assert (workdir / "config.json").read_bytes() == config_json and saved_steps(workdir) == [2]


def test_a_longer_total_steps_resumes_and_is_recorded(workdir, capsys):
    # 6 steps: the step program of tests/vision/test_faults.py's runs, already in the test run's cache
    longer = _short(total_steps=6, keep_checkpoints=5)
    _, summary = train.train(longer, str(workdir), devices=jax.devices()[:1])
    assert (summary["resumed_from_step"], summary["steps"], summary["steps_this_run"]) == (2, 6, 4)
    assert saved_steps(workdir) == [2, 6]
    assert json.loads((workdir / "config.json").read_text())["total_steps"] == 6
    assert (
        "resumed from step 2; changed from its config.json: keep_checkpoints 2 -> 5, total_steps 2 -> 6"
        in capsys.readouterr().out
    )


def test_an_older_workdir_lacking_later_fields_resumes_with_the_schema_values(workdir, capsys):
    # A workdir written before init_from, validation_examples, evaluate_test and attention_options
    # existed ran as their defaults do: resumed at those values, it continues, and no field it lacked
    # is reported as changed; config.json then records every field.
    recorded = json.loads((workdir / "config.json").read_text())
    del recorded["init_from"], recorded["validation_examples"], recorded["evaluate_test"]
    del recorded["model"]["attention_options"]
    (workdir / "config.json").write_text(json.dumps(recorded))
    longer = _short(total_steps=6, keep_checkpoints=5)
    _, summary = train.train(longer, str(workdir), devices=jax.devices()[:1])
    assert (summary["resumed_from_step"], summary["steps"]) == (2, 6)
    assert (
        "changed from its config.json: keep_checkpoints 2 -> 5, total_steps 2 -> 6\n"
        in capsys.readouterr().out
    )
    assert json.loads((workdir / "config.json").read_text()) == run_record.as_json(longer)


def test_an_older_record_is_completed_from_the_schema_at_the_values_it_ran_with():
    base = run_record.as_json(config_lib.base_config())
    old = json.loads(json.dumps(base))
    del old["init_from"], old["channel_mean"], old["model"]["pos_init_std"]
    old["model"]["attention"] = "vanilla"
    completed = config_lib.SCHEMA.complete(old)
    assert completed["init_from"] == "" and completed["channel_mean"] == []  # JSON's shape
    assert completed["model"]["pos_init_std"] == 1.0  # its default when the run was made
    assert completed["model"]["attention"] == "vanilla"  # what the run recorded wins
    assert "init_from" not in old  # the record itself is left as it was
    assert run_record.differing_fields(completed, base) == {
        "model.attention": ("vanilla", "positional"),
        "model.pos_init_std": (1.0, 0.02),
    }


def test_check_resume_allows_only_the_resumable_fields():
    c = _short()
    stored = run_record.as_json(c)
    assert resume.check_resume(stored, c, 2, "w") == []
    assert (
        resume.check_resume(None, _short(seed=1), None, "w") == []
    )  # a fresh workdir takes any run
    changed = _short(data_dir="/data", optimizer__lr=float("nan"), optimizer__grad_clip=0.5)
    assert resume.check_resume(stored, changed, 2, "w") == [
        "data_dir None -> '/data'",
        "optimizer.grad_clip 1.0 -> 0.5",
        "optimizer.lr 0.001 -> nan",
    ]
    nan_stored = run_record.as_json(
        changed
    )  # NaN equals NaN here: the run diverged and is resumed as is
    assert resume.check_resume(nan_stored, changed, 2, "w") == []
    for refused in (
        _short(optimizer__grad_clip=0.0),  # clipping off changes the optimizer state
        _short(seed=1),
        _short(augment__flip=True),
        _short(optimizer__warmup_steps=2),
    ):
        with pytest.raises(ConfigError, match="another config"):
            resume.check_resume(stored, refused, 2, "w")
    del stored["model"]["pos_init_std"]  # a record written before a field existed: it ran at 1.0
    assert resume.check_resume(stored, _short(model__pos_init_std=1.0), 2, "w") == []
    with pytest.raises(ConfigError, match=r"model.pos_init_std 1.0 -> 0.5"):
        resume.check_resume(stored, _short(model__pos_init_std=0.5), 2, "w")


def test_sweep_reads_back_a_cell_only_of_the_same_config(tmp_path, monkeypatch):
    c = _short()
    (tmp_path / "config.json").write_text(json.dumps(run_record.as_json(c)))
    (tmp_path / "summary.json").write_text(
        json.dumps({"steps": c.total_steps, "test_accuracy": 0.5})
    )
    monkeypatch.setattr(
        train, "train_and_evaluate", lambda config, workdir, dataset=None: {"trained": True}
    )
    assert sweep.run_cell(c, str(tmp_path), say=lambda _: None) == {
        "steps": 2,
        "test_accuracy": 0.5,
    }
    assert sweep.run_cell(
        _short(model__attention="vanilla"), str(tmp_path), say=lambda _: None
    ) == {"trained": True}


def test_a_launch_without_a_checkpoint_is_a_failed_launch_for_any_other_config():
    stored = run_record.as_json(_short())
    assert not resume.failed_launch(stored, _short(), None)  # the same run starts again
    assert resume.failed_launch(
        stored, _short(optimizer__lr=1e-4), None
    )  # even a change a resume allows
    assert not resume.failed_launch(
        stored, _short(seed=1), 2
    )  # a checkpoint: a resume, refused or not
    assert not resume.failed_launch(None, _short(seed=1), None)


def test_a_run_recorded_before_a_field_existed_reads_back_with_its_default(tmp_path):
    # A finished run of an older version lacks fields added since (init_from, attention_options,
    # pos_init_std): it was trained as their defaults then said, so reading it (to measure or resume it)
    # fills them in (pos_init_std at its former default: `config.FORMER_DEFAULTS`).
    recorded = config_lib.base_config().to_dict()
    del recorded["init_from"], recorded["model"]["attention_options"]
    del recorded["model"]["pos_init_std"]
    recorded["model"]["attention"] = "vanilla"
    (tmp_path / "config.json").write_text(json.dumps(recorded))
    config = runs.run_config(tmp_path)
    assert config.init_from == "" and config.model.attention_options == ""
    assert config.model.pos_init_std == 1.0 and config.channel_mean == ()
    assert config.model.attention == "vanilla"  # what the run recorded wins
    config_lib.check_schema(config)
    # another binary's record (a theory run) is returned as it is, for its reader to refuse
    (tmp_path / "config.json").write_text(json.dumps({"theory": {"D": 8}, "gd": {"steps": 10}}))
    with pytest.raises(ConfigError, match="has no"):
        config_lib.check_schema(runs.run_config(tmp_path))
