"""The one convention of every binary (experiments.BINARIES): each is a console script, its --help
lists --config (with the config's fields) and --workdir from any directory (and the cluster flags, or
why it runs on one host), its --dry_run prints the resolved config and touches nothing, and its default
config file runs as `:quick` (its smoke run) from /."""

import ast
import importlib.util
import json
import pathlib
import re
import subprocess
import sys
import tomllib

import pytest

from experiments import BINARIES, DEFAULT_CONFIG, TOOLS
from tests import envs

ROOT = pathlib.Path(__file__).resolve().parents[1]
# posattn.experiments as installed (setup.py maps experiments/ under posattn); experiments.NAME with this
# checkout on the path where the installed package is another checkout's (an editable install elsewhere)
INSTALLED = (
    pathlib.Path(importlib.util.find_spec("posattn.experiments").origin).parent
    == ROOT / "experiments"
)
PACKAGE = "posattn.experiments" if INSTALLED else "experiments"


def command(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"{PACKAGE}.{name}", *args]


def env(**extra) -> dict:
    return envs.devices(1, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", **extra)


def test_every_binary_is_a_console_script():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {
        f"posattn-{n.replace('_', '-')}": f"posattn.experiments.{n}:entry" for n in BINARIES + TOOLS
    }


def test_the_one_list_names_every_binary_with_the_default_config_it_defines():
    """experiments.DEFAULT_CONFIG: one entry a file of experiments/, whose `cli.define_config` default
    is the entry's config file, and the README counts them; experiments.TOOLS lists the others."""
    files = {p.stem for p in (ROOT / "experiments").glob("*.py")} - {"__init__"}
    assert sorted(BINARIES + TOOLS) == sorted(files)
    for name in BINARIES:
        tree = ast.parse((ROOT / "experiments" / f"{name}.py").read_text())
        (call,) = [
            c
            for c in ast.walk(tree)
            if isinstance(c, ast.Call)
            and isinstance(c.func, ast.Attribute)
            and c.func.attr == "define_config"
        ]
        assert ast.literal_eval(call.args[0]).split(":")[0] == DEFAULT_CONFIG[name], (
            name
        )  # ([:ARG])
        assert (ROOT / DEFAULT_CONFIG[name]).is_file(), name
    words = "one two three four five six seven eight nine ten eleven twelve thirteen".split()
    counts = re.findall(
        rf"\b({'|'.join(words)}) binaries\b", (ROOT / "README.md").read_text(), re.I
    )
    assert counts and {c.lower() for c in counts} == {words[len(BINARIES) - 1]}, counts


def test_each_binary_is_its_flags_and_one_call():
    """--config, --workdir and the distributed flags come from posattn.cli, and main(config, workdir)
    hands them to one call of the library; the checks every binary makes (no positional argument, a
    --workdir, quiet library logs) are `cli.run`'s, made once there."""
    for name in BINARIES:
        source = (ROOT / "experiments" / f"{name}.py").read_text()
        tree = ast.parse(source)
        defined = [
            c.func.attr
            for c in ast.walk(tree)
            if isinstance(c, ast.Call)
            and isinstance(c.func, ast.Attribute)
            and c.func.attr.startswith("DEFINE")
        ]
        assert not defined and "argv" not in source and "set_verbosity" not in source, name
        flags = {
            c.func.attr
            for c in ast.walk(tree)
            if isinstance(c, ast.Call)
            and isinstance(c.func, ast.Attribute)
            and c.func.attr.startswith("define_")
        }
        assert {"define_config", "define_workdir"} <= flags, (name, flags)
        main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
        assert [a.arg for a in main.args.args] == ["config", "workdir"], name
        if (
            name != "train_images"
        ):  # (its library, posattn.vision, may import neither cli nor plots)
            assert len(main.body) == 1 and isinstance(main.body[0].value, ast.Call), name


@pytest.mark.slow  # (a new process end to end: `pytest -m slow`, as .ci/run)
def test_help_lists_config_and_workdir_from_the_root_directory():
    procs = {
        n: subprocess.Popen(
            command(n, "--help"),
            cwd="/",
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in BINARIES
    }  # (in parallel)
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert "Traceback" not in err, (name, err[-2000:])  # (absl's --help exits with status 1)
        assert "--config: " in out and "--workdir: " in out and "quick" in out, (name, out)
        # the fields of the config with their defaults (`cli.config_fields`), and the dry run
        field, _ = OVERRIDE[name]
        assert "Its fields, as --config=" in out and f"\n    {field}=" in out, (name, out)
        assert "--[no]dry_run: " in out, (name, out)
        # a pod: the same multi-host start (posattn.mesh) as every other, or a word on why one host
        assert ("--coordinator_address: " in out) != ("\nOne host" in out), (name, out)


QUICK = {  # the smoke run's own flags, only where the default would be long
    "compare_attention": ("--config.seeds=1",),
    "permuted": ("--config.models=vit", "--config.seeds=1"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in BINARIES if n != "posemb_similarity"])
def test_quick_config_runs_from_the_root_directory(name, tmp_path):
    r = subprocess.run(
        command(
            name,
            f"--config={DEFAULT_CONFIG[name]}:quick",
            *QUICK.get(name, ()),
            f"--workdir={tmp_path / 'run'}",
        ),
        cwd="/",
        env=env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "workdir.json").read_text())["status"] == "complete"
    if name == "permuted":  # and the maps of its g = 2 run, posemb_similarity's smoke run
        r = subprocess.run(
            command(
                "posemb_similarity",
                "--config=tpu_configs/posemb_similarity.py:quick",
                f"--config.run={tmp_path / 'run' / 'vit-g2-seed0'}",
                f"--workdir={tmp_path / 'maps'}",
            ),
            cwd="/",
            env=env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0 and (tmp_path / "maps" / "posemb_similarity.png").exists(), (
            r.stderr
        )
        assert not (tmp_path / "run" / "vit-g2-seed0" / "posemb_similarity.png").exists()


# a field of each binary's config, and a value its checks accept
OVERRIDE = {
    "theory": ("seed", 3),
    "reproduce": ("seed", 3),
    "train_images": ("total_steps", 7),
    "compare_attention": ("total_steps", 7),
    "permuted": ("vit_steps", 7),
    "how_vits_work": ("seed", 3),
    "phase_three": ("steps", 7),
    "posemb_similarity": ("threshold", 0.5),
    "shallow_vit": ("seed", 3),
    "shallow_settle": ("boot", 11),
    "token_grid": ("grid.seed", 3),
}


@pytest.mark.slow  # (a process a binary, 1-6 s each on 2 cores)
@pytest.mark.parametrize("name", BINARIES)
def test_dry_run_prints_the_resolved_config_and_writes_and_compiles_nothing(name, tmp_path):
    workdir, field, value = tmp_path / "run", *OVERRIDE[name]
    trained = tmp_path / "trained"  # posemb_similarity's config.run: the run it reads
    if name == "posemb_similarity":
        trained.mkdir()
        (trained / "config.json").write_text("{}")
    r = subprocess.run(
        command(
            name,
            "--dry_run",
            f"--workdir={workdir}",
            f"--config.{field}={value}",
            *([f"--config.run={trained}"] if name == "posemb_similarity" else []),
            f"--compilation_cache={tmp_path / 'cache'}",
        ),
        cwd="/",
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr[-3000:]
    config = json.loads(r.stdout)  # every field, as JSON
    for key in field.split("."):
        config = config[key]
    assert config == value
    assert sorted(p.name for p in tmp_path.iterdir()) == (
        ["trained"] if name == "posemb_similarity" else []
    )
    if name == "posemb_similarity":
        assert [p.name for p in trained.iterdir()] == ["config.json"]
    # (no cache folder: JAX made none, so it compiled nothing)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--config.total_stepz=7"], "error: no such config field"),  # the flags' own parse
        (
            ["--config.total_steps=-1"],
            "error: total_steps=-1",
        ),  # the binary's checks, before its claim
    ],
)
def test_a_dry_run_refuses_what_the_run_would_in_one_line(args, says, tmp_path):
    r = subprocess.run(
        command("train_images", "--dry_run", f"--workdir={tmp_path / 'run'}", *args),
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stderr.startswith(says) and r.stderr.count("\n") == 1, r.stderr
    assert r.stdout == "" and not (tmp_path / "run").exists()
