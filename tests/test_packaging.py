"""Config files are found from any directory; declared dependency floors are pins CI can install."""

import os
import pathlib
import subprocess
import sys

import pytest

from posattn import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", ["tpu_configs/digits.py", "tpu_configs/theory.py"])
def test_config_files_are_found_from_another_directory(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)
    found = cli.find_config_file(path)
    assert os.path.isabs(found) and os.path.samefile(found, ROOT / path)
    assert (
        cli.find_config_file("tpu_configs/nope.py") == "tpu_configs/nope.py"
    )  # reported by the caller


def test_a_binary_reads_its_config_from_another_directory(tmp_path):
    # steps=0 is refused by GDConfig: the preset file was found and its override applied, from /tmp.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.theory",
            "--config=tpu_configs/theory.py:paper",
            "--config.gd.steps=0",
            f"--workdir={tmp_path}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 2 and out.stderr.strip() == "error: steps=0 must be positive", (
        out.stderr
    )


def test_floors_pin_every_dependency():
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        import floors
    finally:
        sys.path.remove(str(ROOT / ".ci"))
    pins = floors.floors(["test"])
    names = [p.split("==")[0].lower() for p in pins]
    assert all("==" in p for p in pins) and {"jax", "jaxlib", "optax", "pytest"} <= set(names)
    assert pins[names.index("jax")].split("==")[1] == pins[names.index("jaxlib")].split("==")[1]
