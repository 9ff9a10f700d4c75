"""Seeds of an image config in one vmapped program (posattn.vision.seeds): the numbers of separate runs,
checkpoints that resume bitwise and restore and resume as a separate run's, the refusals (nothing in
the workdirs changed) and the fall-back to separate runs (sweep.run_seeds), on the 8 simulated devices."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from posattn import cli, run_record, signals
from posattn.errors import ConfigError
from posattn.vision import config as config_lib
from posattn.vision import device_memory, resume, runs, seeds, sweep, train
from posattn.vision.data import pipeline
from tests import envs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tiny(seed: int, **overrides):
    """digits:quick (ViT test/2, batch 16), 24 steps, logged every 4, evaluated and saved at the end."""
    c = cli.load_config(str(ROOT / "tpu_configs" / "digits.py"), "quick", config_lib.SCHEMA)
    c.seed, c.total_steps, c.log_every, c.eval_every, c.checkpoint_every = seed, 24, 4, 0, 0
    for key, value in overrides.items():
        c[key] = value
    return c


def records(workdir, key: str) -> list[float]:
    lines = (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()
    return [r[key] for r in map(json.loads, lines) if key in r]


def listing(root: pathlib.Path) -> dict:
    """Every file under `root` with its size and modification time (what a refusal must not change; the
    workdirs themselves are made and probed for writing first, as `train.train` does)."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.mark.slow
def test_vmapped_seeds_give_the_losses_and_accuracies_of_separate_runs(tmp_path):
    """3 seeds x 24 steps: every logged training loss and accuracy, and the final test accuracy and loss,
    of the vmapped run equal the separate runs' to rtol 1e-5. Not bitwise: XLA orders the batched
    matmuls' sums otherwise (measured: losses within ~1e-7 relative, parameters within ~2e-5)."""
    configs = [tiny(s) for s in (0, 1, 2)]
    vmapped = seeds.train_seeds(configs, [tmp_path / f"v{s}" for s in (0, 1, 2)])
    for s, c in enumerate(configs):
        alone = train.train_and_evaluate(c, str(tmp_path / f"s{s}"))
        for key in ("train_loss", "train_accuracy"):
            assert len(records(tmp_path / f"v{s}", key)) == 6
            np.testing.assert_allclose(
                records(tmp_path / f"v{s}", key), records(tmp_path / f"s{s}", key), rtol=1e-5
            )
        for key in ("test_accuracy", "test_loss", "train_loss"):
            np.testing.assert_allclose(vmapped[s][key], alone[key], rtol=1e-5)
        assert vmapped[s]["steps"] == alone["steps"] == 24 and vmapped[s]["vmapped_seeds"] == 3
        # the same record as a separate run's: every field it writes, the same settings as applied
        assert set(vmapped[s]) - {"vmapped_seeds"} == set(alone)
        assert vmapped[s]["augmentation"] == alone["augmentation"]
        # the workdir of a seed records its own run, as a separate run's does
        assert resume.read_record(tmp_path / f"v{s}") == run_record.as_json(c)
        assert json.loads((tmp_path / f"v{s}" / "summary.json").read_text()) == vmapped[s]
    assert (
        len({v["test_loss"] for v in vmapped}) == 3
    )  # each seed its own init and data, not one run thrice


def steps_saved(workdir) -> list[int]:
    return sorted(
        int(p.name) for p in (pathlib.Path(workdir) / "checkpoints").iterdir() if p.name.isdigit()
    )


@pytest.mark.slow
def test_a_preempted_vmapped_run_saves_every_seed_resumes_bitwise_and_a_seed_resumes_alone(
    tmp_path, monkeypatch
):
    configs = [tiny(s, total_steps=16, checkpoint_every=8) for s in (0, 1)]
    straight, stopped = [tmp_path / f"a{s}" for s in (0, 1)], [tmp_path / f"b{s}" for s in (0, 1)]
    seeds.train_seeds(configs, straight)
    original = pipeline.train_batches

    def with_a_signal(
        split, *, seed, start_step=0, **kwargs
    ):  # SIGTERM as seed 1's batch of step 5 is drawn
        batches = original(split, seed=seed, start_step=start_step, **kwargs)
        for step, batch in enumerate(batches, start_step + 1):
            if step == 5 and seed == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            yield batch

    monkeypatch.setattr(pipeline, "train_batches", with_a_signal)
    with pytest.raises(
        signals.RunStopped, match=r"^preemption notice \(SIGTERM\) at step 5: saved "
    ):
        seeds.train_seeds(configs, stopped)
    monkeypatch.undo()
    assert [steps_saved(d) for d in stopped] == [
        [5],
        [5],
    ]  # every seed saved at the step it stopped
    resumed = seeds.train_seeds(configs, stopped)
    assert [r["resumed_from_step"] for r in resumed] == [5, 5]
    for a, b in zip(straight, stopped):
        # the records of the same steps (the preempted one's, at step 5, is kept), none twice
        assert records(b, "step") == records(a, "step")[:1] + [5] + records(a, "step")[1:]
        x, y = (jax.tree.leaves(runs.restore_run(d)[1]) for d in (a, b))
        assert len(x) == len(y) > 10
        for u, v in zip(x, y):
            np.testing.assert_array_equal(
                np.asarray(u), np.asarray(v)
            )  # bitwise: params, Adam moments, step
    # a seed's workdir continues as a separate run (a longer schedule), from the vmapped run's checkpoint
    longer = train.train_and_evaluate(tiny(1, total_steps=20, checkpoint_every=8), str(stopped[1]))
    assert (
        longer["resumed_from_step"] == 16
        and longer["steps"] == 20
        and "vmapped_seeds" not in longer
    )


@pytest.mark.slow
def test_a_diverging_seed_stops_every_seed_naming_its_workdir_and_last_good_checkpoint(tmp_path):
    configs = [tiny(s, total_steps=4, checkpoint_every=1) for s in (0, 1)]
    for c in configs:
        c.optimizer.lr = 1e30  # step 1 runs at lr 0 (the warm-up's start), step 2 diverges
    where = re.escape(str(tmp_path / "a"))
    with pytest.raises(
        train.NonFiniteLoss,
        match=rf"at step 2; the run stopped there, the last good "
        rf"checkpoint \(step 1\) stays in {where}/checkpoints",
    ):
        seeds.train_seeds(configs, [tmp_path / "a", tmp_path / "b"])
    assert [steps_saved(tmp_path / d) for d in "ab"] == [
        [1],
        [1],
    ]  # no checkpoint holds a broken state
    assert (
        not (tmp_path / "a" / "summary.json").exists()
        and not (tmp_path / "b" / "summary.json").exists()
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"model.attention": "vanilla"},
            "differs from configs[0] in more than the seed (model.attention",
        ),
        ({"seed": 0}, "seeds [0, 0]: a seed given twice"),
    ],
)
def test_seeds_that_one_program_cannot_train_together_are_refused_in_one_line(
    tmp_path, change, message
):
    other = tiny(1)
    for key, value in change.items():
        node, *path = key.split(".")
        (other[node] if path else other)[path[0] if path else node] = value
    with pytest.raises(ConfigError, match=re.escape(message)):
        seeds.train_seeds([tiny(0), other], [tmp_path / "a", tmp_path / "b"])
    assert not list(tmp_path.iterdir())


def test_one_workdir_per_seed_is_required():
    with pytest.raises(ConfigError, match="give each seed a workdir of its own"):
        seeds.check_seed_configs([tiny(0), tiny(1)], ["/tmp/x", "/tmp/x/"])
    with pytest.raises(ConfigError, match="2 configs and 1 workdirs"):
        seeds.check_seed_configs([tiny(0), tiny(1)], ["/tmp/x"])


def test_the_footprint_fits_within_nine_tenths_of_the_free_memory_and_says_its_numbers():
    assert device_memory.Footprint(2, 2**20, 9 * 2**20, 10 * 2**20).fits
    tight = device_memory.Footprint(2, 2**20, 10 * 2**20, 10 * 2**20)
    assert not tight.fits
    assert str(tight) == (
        "2 seeds, 5.0 MiB per seed and device (train state 1.0 MiB, the rest batches and "
        "activations): 10.0 MiB of 10.0 MiB free per device"
    )
    assert (
        device_memory.Footprint(2, 2**20, None, 10).fits
        and device_memory.Footprint(2, 2**20, 10, None).fits
    )


@pytest.mark.parametrize(
    "error",
    [
        seeds.NotVmapped("the seeds' checkpoints are at steps [2, 0]"),
        device_memory.OutOfMemory("out of memory (RESOURCE_EXHAUSTED)"),
    ],
)
def test_the_sweep_trains_the_seeds_separately_where_the_vmapped_run_is_refused_or_runs_out_of_memory(
    tmp_path, monkeypatch, error
):
    def vmapped(configs, workdirs, dataset=None):
        raise error

    monkeypatch.setattr(seeds, "train_seeds", vmapped)
    monkeypatch.setattr(
        train, "train_and_evaluate", lambda c, workdir, dataset=None: {"seed": c.seed}
    )
    said = []
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert sweep.run_seeds([tiny(0), tiny(1)], dirs, said.append) == [{"seed": 0}, {"seed": 1}]
    assert said == [
        f"== 2 seeds in one vmapped program: {dirs[0]}, {dirs[1]}",
        f"== separate runs instead: {error}",
        f"== {dirs[0]}",
        f"== {dirs[1]}",
    ]
    with pytest.raises(
        ConfigError, match="2 configs and 1 workdirs"
    ):  # zip would drop a seed unsaid
        sweep.run_seeds([tiny(0), tiny(1)], dirs[:1], said.append)


@pytest.mark.slow
def test_seeds_at_different_checkpoints_are_refused_unchanged_and_run_separately_by_the_sweep(
    tmp_path,
):
    configs = [tiny(s, total_steps=4) for s in (0, 1)]
    dirs = [str(tmp_path / f"seed{s}") for s in (0, 1)]
    train.train_and_evaluate(
        tiny(0, total_steps=2), dirs[0]
    )  # seed 0 holds checkpoint 2, seed 1 nothing
    before = listing(tmp_path)
    with pytest.raises(seeds.NotVmapped, match=r"checkpoints are at steps \[2, 0\]"):
        seeds.train_seeds(configs, dirs)
    assert listing(tmp_path) == before
    said = []
    summaries = sweep.run_seeds(configs, dirs, said.append)
    assert said[1].startswith(
        "== separate runs instead: the seeds' checkpoints are at steps [2, 0]"
    )
    assert [s["resumed_from_step"] for s in summaries] == [2, None]
    assert all(s["steps"] == 4 and "vmapped_seeds" not in s for s in summaries)
    said.clear()  # finished: read back, nothing trained
    assert sweep.run_seeds(configs, dirs, said.append) == summaries and not said


@pytest.mark.slow
def test_seeds_whose_programs_do_not_fit_in_memory_run_separately_and_the_log_says_why(
    tmp_path, monkeypatch
):
    # 0.5 MiB free per device; the programs of 2 seeds take 0.8 MiB
    monkeypatch.setattr(device_memory, "free_bytes", lambda device: 2**19)
    configs = [tiny(s, total_steps=2) for s in (0, 1)]
    dirs = [str(tmp_path / f"seed{s}") for s in (0, 1)]
    said = []
    summaries = sweep.run_seeds(configs, dirs, said.append)
    assert said[0] == f"== 2 seeds in one vmapped program: {dirs[0]}, {dirs[1]}"
    assert said[1].startswith(
        "== separate runs instead: the vmapped programs do not fit: 2 seeds, "
    )
    assert said[1].endswith(
        "of 0.5 MiB free per device; train the seeds separately (or fewer at once)"
    )
    assert [s["steps"] for s in summaries] == [2, 2] and not any(
        "vmapped_seeds" in s for s in summaries
    )


@pytest.mark.slow
def test_compare_attention_vmaps_each_kinds_seeds_to_the_accuracies_of_separate_runs(tmp_path):
    flags = [
        "--config=tpu_configs/digits.py:quick",
        "--config.seeds=2",
        "--config.total_steps=4",
        "--config.optimizer.warmup_steps=1",
        "--config.checkpoint_every=0",
        "--config.eval_every=0",
    ]
    runs = {}
    for way in ("--config.vmap_seeds=True", "--config.vmap_seeds=False"):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "experiments.compare_attention",
                *flags,
                way,
                f"--workdir={tmp_path / way.rsplit('=', 1)[1]}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=envs.devices(1, PYTHONPATH=str(ROOT)),
        )
        assert r.returncode == 0, r.stderr[-2000:]
        runs[way] = json.loads((tmp_path / way.rsplit("=", 1)[1] / "summary.json").read_text())[
            "accuracy"
        ]
        vmapped = r.stdout.count("== 2 seeds in one vmapped program: ")
        assert vmapped == (2 if way.endswith("True") else 0), (
            r.stdout
        )  # one program per attention kind
        assert r.stdout.count("vmapped: 2 seeds, ") == vmapped
    for attention in ("vanilla", "positional"):
        np.testing.assert_allclose(
            runs["--config.vmap_seeds=True"][attention]["values"],
            runs["--config.vmap_seeds=False"][attention]["values"],
            rtol=1e-5,
        )
