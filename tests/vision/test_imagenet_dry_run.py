"""Issue 49's TPU-VM dry run: the ImageNet config's whole input path on a tiny fake ImageNet.

A folder of JPEGs of varying sizes (ImageNet's train/ and val/ of class subfolders) is written as records
by `prepare_images`, then `train_images --config=tpu_configs/imagenet.py:quick` reads it by name: worker
processes decode and draw Inception crops, the device applies flip, RandAugment and mixup, each process
reads its own rows of every global batch. On the 8 simulated devices of one process, and as 2 processes
of 4 devices joined by jax.distributed (tests/multiprocess.py), which must train alike. What only a real
TPU VM shows (its cores' decode rate against its chips, gs:// for the workdir) is docs/distributed.md's.
"""

import json
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest
from PIL import Image

from posattn.vision import runs
from tests import envs, multiprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLASSES, PER_CLASS = 4, 12


def fake_imagenet(root: pathlib.Path) -> pathlib.Path:
    """train/ and val/ of 4 class folders of RGB JPEGs from 40 to 95 px a side, written as records."""
    rng = np.random.default_rng(0)
    for split, count in (("train", PER_CLASS), ("val", 4)):
        for c in range(CLASSES):
            folder = root / "jpegs" / split / f"n0000{c}"
            folder.mkdir(parents=True)
            for k in range(count):
                h, w = rng.integers(40, 96, 2)
                image = np.clip(rng.normal(60 * c, 40, (h, w, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(image).save(folder / f"{k}.JPEG", quality=90)
    out = binary(
        "posattn.experiments.prepare_images",
        f"--source={root / 'jpegs'}",
        f"--out={root / 'records'}",
        devices=1,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return root / "records"


def binary(module: str, *args: str, devices: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=envs.devices(devices),
        capture_output=True,
        text=True,
        timeout=600,
    )


def flags(records: pathlib.Path, workdir: pathlib.Path) -> list[str]:
    return [
        "--config=tpu_configs/imagenet.py:quick",
        f"--config.dataset=records:{records}",
        "--config.total_steps=6",
        f"--workdir={workdir}",
    ]


@pytest.mark.slow
def test_the_imagenet_input_path_runs_on_eight_devices_and_as_two_processes_alike(tmp_path):
    records = fake_imagenet(tmp_path)
    one = binary("experiments.train_images", *flags(records, tmp_path / "one"), devices=8)
    assert one.returncode == 0, one.stderr[-3000:]
    assert "Inception crop where the images are read" in one.stdout
    assert "RandAugment(1, 9); mixup 0.8" in one.stdout
    assert "input: 1 worker process," in one.stdout  # auto: records decode (one per core but one)
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert (summary["devices"], summary["steps"], summary["test_examples"]) == (8, 6, 4 * CLASSES)

    outputs = multiprocess.run_two_processes(
        "experiments.train_images", flags(records, tmp_path / "two"), tmp_path
    )
    assert "2 processes" in outputs[0] and "summary:" in outputs[0]
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert (two["processes"], two["devices"], two["test_examples"]) == (2, 8, 4 * CLASSES)
    # The same crops and batches, read half by each process: the same training up to the order of the
    # float reductions (test_distributed.py's tolerance). A process reading the wrong rows, or crops
    # that depend on the process layout, would differ by far more.
    p1 = runs.restore_run(tmp_path / "one")[1]["params"]
    p2 = runs.restore_run(tmp_path / "two")[1]["params"]
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=2e-5)
