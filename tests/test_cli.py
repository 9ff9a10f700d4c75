"""What every binary goes through (`posattn.cli.run`): the persistent compilation cache switch, the
workdir check and claim before any work, broken config files, out of memory and signals in one line."""

import json
import os
import pathlib
import signal
import subprocess
import sys

import jax
import ml_collections
import pytest

from posattn import cli, compile_options, ownership
from posattn.errors import ConfigError
from posattn.vision import config as config_lib
from tests import envs

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def restore_cache_dir():
    before = (
        jax.config.jax_compilation_cache_dir,
        jax.config.jax_persistent_cache_min_compile_time_secs,
    )
    yield
    jax.config.update("jax_compilation_cache_dir", before[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])


def test_cache_goes_where_the_flag_or_environment_says(tmp_path, monkeypatch, restore_cache_dir):
    monkeypatch.setenv(compile_options.CACHE_ENV, str(tmp_path / "env"))
    assert compile_options.enable_compilation_cache(str(tmp_path / "flag")) == str(
        tmp_path / "flag"
    )
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "flag")
    assert compile_options.enable_compilation_cache() == str(tmp_path / "env")
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "env")


def test_cache_turned_off_leaves_jax_alone(monkeypatch, restore_cache_dir):
    before = jax.config.jax_compilation_cache_dir
    assert compile_options.enable_compilation_cache("off") is None
    monkeypatch.setenv(compile_options.CACHE_ENV, "0")
    assert compile_options.enable_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir == before


@pytest.mark.parametrize(
    "binary", ["theory", "phase_three", "reproduce", "shallow_vit", "token_grid"]
)
def test_binaries_refuse_an_unwritable_workdir_before_any_work(binary, tmp_path):
    (tmp_path / "file").write_text("")
    out = subprocess.run(
        [sys.executable, "-m", f"experiments.{binary}", f"--workdir={tmp_path}/file/run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=envs.devices(1),
    )
    assert out.returncode == 2 and out.stderr == (
        f"error: --workdir={tmp_path}/file/run cannot be written (Not a directory): choose a writable "
        "directory\n"
    ), out.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["--config.preset=fig2"], "dataset='gaussian_cnn' has no exact population risk"),
        (["--config.q="], "q=('',): give probabilities"),
        (["--config.q=0.4,2"], "q=2.0 is a probability"),
        (["--q=0.4"], "Unknown command line flag 'q'"),
    ],
)
def test_phase_three_refuses_problems_it_cannot_run_before_any_work(args, words, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "experiments.phase_three", f"--workdir={tmp_path}/run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=envs.devices(1),
    )
    assert out.returncode == 2 and out.stderr.startswith("error: ") and words in out.stderr, (
        out.stderr
    )
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def run_binary(binary, *args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", f"experiments.{binary}", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=envs.devices(1, PYTHONPATH=str(ROOT)),
    )


@pytest.mark.parametrize(
    "binary", ["theory", "token_grid"]
)  # token_grid made it absolute first: ran in cwd
def test_an_empty_workdir_is_refused_and_nothing_is_written(binary, tmp_path):
    # (it passed absl's required=True and wrote into the current directory and /; a blank one:
    # tests/test_ownership.py, every binary: drills/bad_inputs.py)
    out = run_binary(binary, "--workdir=", cwd=tmp_path)
    assert (
        out.returncode == 2
        and out.stderr == "error: --workdir is empty: give a directory, e.g. --workdir=/tmp/run\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_theory_refuses_the_workdir_of_another_binarys_run_and_leaves_every_byte(tmp_path):
    ownership.claim(tmp_path, "train_images", {"seed": 0})
    for name in ("config.json", "metrics.jsonl", "summary.json"):
        (tmp_path / name).write_text('{"step": 4}\n')
    ownership.release(ownership.COMPLETE)
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    out = run_binary("theory", f"--workdir={tmp_path}")
    assert out.returncode == 2 and out.stderr == (
        f"error: --workdir={tmp_path} holds a train_images run "
        "(complete): theory does not overwrite it; use a new --workdir\n"
    )
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


BROKEN = {
    "raises": ('raise RuntimeError("boom")\n', "line 1: loading it raised RuntimeError: boom"),
    "syntax": (
        "def get_config(arg=None):\n    return {\n",
        "line 2: '{' was never closed (it does not compile)",
    ),
    "none": (
        "def get_config(arg=None):\n    config = 1\n",
        "get_config() returned NoneType, not an "
        "ml_collections.ConfigDict: end get_config with `return config`",
    ),
    "no_get_config": ("CONFIG = 1\n", "defines no get_config(arg)"),
    "get_config_raises": (
        "def get_config(arg=None):\n    return {}['x']\n",
        "line 2: get_config() raised KeyError",
    ),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_config_file_is_one_configerror_naming_it(name, tmp_path):
    text, words = BROKEN[name]
    (tmp_path / "c.py").write_text(text)
    with pytest.raises(ConfigError) as e:
        cli.load_config(str(tmp_path / "c.py"), None, config_lib.SCHEMA)
    assert str(e.value).startswith(f"config file {tmp_path / 'c.py'}") and words in str(e.value), (
        str(e.value)
    )


# The config files that set no field of their binary's and so name their schema (`cli.Schema.kind`).
SCHEMA_NAMED = {
    "theory": "theory",
    "token_grid": "token_grid",
    "reproduce": "reproduce",
    "phase_three": "phase_three",
    "pk22": "how_vits_work",
    "posemb_similarity": "posemb_similarity",
    "shallow_vit": "shallow_vit",
}


@pytest.mark.parametrize("name", list(SCHEMA_NAMED))
def test_a_config_file_of_another_schema_is_refused_not_run_with_defaults(name):
    path = f"{ROOT}/tpu_configs/{name}.py"
    with pytest.raises(ConfigError, match=f"is a {SCHEMA_NAMED[name]} config, not an image config"):
        cli.load_config(path, None, config_lib.SCHEMA)
    own = cli.Schema(
        "its own",
        lambda fields: ml_collections.ConfigDict(fields.to_dict()),
        kind=SCHEMA_NAMED[name],
    )
    assert "schema" not in cli.load_config(
        path, None, own
    )  # its own schema takes it, the name stripped


def test_the_binaries_load_a_broken_config_file_into_one_line(tmp_path):
    (tmp_path / "c.py").write_text(BROKEN["none"][0])
    out = run_binary("theory", f"--config={tmp_path}/c.py", f"--workdir={tmp_path}/run")
    assert (
        out.returncode == 2
        and out.stderr.startswith("error: config file")
        and out.stderr.count("\n") == 1
    )
    assert BROKEN["none"][1] in out.stderr and not (tmp_path / "run").exists()


def start_interruptible(*args: str) -> subprocess.Popen:
    """`python ARGS` in the repository on one device, pipes for its output."""
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=envs.devices(1),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_theory_ends_a_signal_with_one_line_and_a_workdir_that_says_interrupted(
    sig, status, tmp_path
):
    run = start_interruptible(
        "-m",
        "experiments.theory",
        f"--workdir={tmp_path}",
        "--config.gd.N=100",
        "--config.gd.steps=1000000",
        "--config.gd.n_test=100",
        "--config.gd.n_final_test=100",
    )
    for (
        line
    ) in run.stdout:  # the run holds its workdir and has written its config (GD compiles next)
        if line.startswith("preset"):
            break
    run.send_signal(sig)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == status and stderr == (
        f"stopped: {sig.name}: the run in {tmp_path} did not finish (workdir.json says interrupted); rerun the same "
        "command to run it again from the start\n"
    ), stderr
    assert json.loads((tmp_path / "workdir.json").read_text())["status"] == "interrupted"
    assert not (tmp_path / "summary.json").exists()


def test_a_signal_while_a_binary_imports_is_one_line_and_writes_nothing(tmp_path):
    # `-X importtime` reports each import on stderr as it ends: the signal lands in the middle of jax's
    # imports, where Python's default handler gave a long traceback, a segfault, or was swallowed by a
    # gc callback so that the run went on to exit 0.
    run = start_interruptible(
        "-X",
        "importtime",
        "-m",
        "experiments.train_images",
        "--config=tpu_configs/digits.py:quick",
        f"--workdir={tmp_path}/run",
    )
    for line in run.stderr:
        if line.rsplit("|", 1)[-1].strip() == "jax._src.config":
            break
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=120)
    said = [line for line in stderr.splitlines() if not line.startswith("import time:")]
    assert run.returncode == 130 and said == [
        "stopped: SIGINT outside a run (while the binary started or ended): nothing to save"
    ], stderr[-2000:]
    assert not (tmp_path / "run").exists()


def test_running_out_of_memory_is_one_line():
    program = (
        "from posattn import cli\ncli.define_workdir('w')\n"
        "def main(config, workdir):\n    raise MemoryError()\ncli.run(main)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program, "--workdir=/nonexistent"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert out.returncode == 2 and out.stderr == (
        "error: out of memory (MemoryError): choose smaller sizes (batch, "
        "samples N, model) or a device with more memory\n"
    ), out.stderr


SMOKE_FLAGS = """
import os, sys
from posattn import cli, compile_options
from experiments import shallow_vit  # defines its --config flag
cli._resolve_config_files(["shallow_vit", f"--config=tpu_configs/shallow_vit.py{sys.argv[1]}", "--workdir=/tmp/x"])
print("flags:", os.environ.get("XLA_FLAGS", ""))
print(compile_options.fast_compile_everywhere())  # a second call: the level is set (or not) once
"""


@pytest.mark.parametrize("arg, fast", [(":quick", True), ("", False)])
def test_a_smoke_run_compiles_at_llvm_level_one(arg, fast):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run(
        [sys.executable, "-c", SMOKE_FLAGS, arg],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    flags_line, again = out.stdout.strip().splitlines()[-2:]
    assert (compile_options.FAST_COMPILE_FLAG in flags_line) == fast
    assert again == str(not fast)  # added once, never twice


def test_a_schema_completes_an_older_record_from_its_own_defaults_and_keeps_what_it_recorded():
    """Issue 47 item 3: a run recorded before a field existed is read with the schema's value, the
    one the run ran with (a former default where the default has changed since)."""
    from posattn.theory import presets

    recorded = json.loads(presets.preset_config("small").to_json_best_effort())
    del recorded["overlay_N"], recorded["theory"]["d"]
    recorded["seed"] = 7
    completed = presets.SCHEMA.complete(recorded)
    # the preset it names (small's d is 32; the default preset's, 16), and what it recorded
    assert (completed["theory"]["d"], completed["seed"]) == (32, 7)
    assert completed["overlay_N"] == list(presets.DEFAULT_NS) and "overlay_N" not in recorded
    image = config_lib.SCHEMA.complete({"model": {"name": "vgg16"}, "dataset": "svhn"})
    assert (image["model"]["name"], image["model"]["pos_init_std"]) == ("vgg16", 1.0)  # former
    assert image["augment"]["crop_padding"] == config_lib.AUTO_CROP
