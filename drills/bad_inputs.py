r"""The bad-input drill (issues 18 and 31): every binary of `experiments/` given what a new user gives it.

    python -m drills.bad_inputs                  # ~40 min on 2 shared CPU cores; updates docs/reliability.md
    python -m drills.bad_inputs --only=theory --write=false

Each case runs a binary in a subprocess, from an empty scratch directory as its current directory, on a
workdir prepared for it (`START`): a path that does not exist, a copy of a finished train_images or
theory run, a workdir whose marker records another config of the same binary, a workdir another process
holds, a finished run with a damaged config.json. Some cases send SIGINT or SIGTERM once the run holds
its workdir. Every case records: the exit status (2 for bad input, 130/143 for a signal), the lines on
stderr (one expected), whether a traceback was printed, the files the run created or changed in its
workdir (none expected of a refused command) and outside it (none, ever: the current directory, the
drill's other directories, the top of the file system), and for signals the status its workdir.json
records. `drills.faults` runs the same cases as its section 5.
"""

import dataclasses
import datetime
import hashlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

from absl import app, flags

from experiments import BINARIES, DEFAULT_CONFIG

ROOT = pathlib.Path(__file__).resolve().parents[1]
DIGITS = "--config=tpu_configs/digits.py"
LOCAL = "--config=tpu_configs/digits.py:quick"
SIGNALS = {"SIGINT": 130, "SIGTERM": 143}
THEORY_TINY = (
    "--config.gd.steps=50",
    "--config.gd.N=100",
    "--config.gd.n_test=100",
    "--config.gd.n_final_test=100",
)
# Runs long enough to be interrupted, and each binary's shortest way to one
LONG = {
    "train_images": (LOCAL, "--config.total_steps=100000", "--config.checkpoint_every=0"),
    "theory": (
        "--config.gd.steps=400000",
        "--config.gd.N=100",
        "--config.gd.n_test=100",
        "--config.gd.n_final_test=100",
    ),
    "reproduce": ("--config=tpu_configs/reproduce.py:quick",),
    "phase_three": (),
    "shallow_vit": ("--config=tpu_configs/shallow_vit.py:quick",),
    "token_grid": ("--config=tpu_configs/token_grid.py:quick",),
    "compare_attention": (LOCAL, "--config.seeds=1", "--config.total_steps=100000"),
    "permuted": (
        "--config=tpu_configs/permuted.py:quick",
        "--config.models=vit",
        "--config.seeds=1",
        "--config.block_sizes=2",
        "--config.vit_steps=100000",
    ),
    "how_vits_work": ("--config=tpu_configs/pk22.py:quick", "--config.models=vit_positional"),
    "shallow_settle": ("--config=tpu_configs/shallow_settle.py:boundary,quick",),
}
# Broken config files (`{c}/NAME.py`)
CONFIG_FILES = {
    "raises": 'raise RuntimeError("the config file fails while it loads")\n',
    "syntax": "def get_config(arg=None):\n    return {\n",
    "returns_none": "def get_config(arg=None):\n    config = {}\n",
    "no_get_config": "CONFIG = {}\n",
    "get_config_raises": "def get_config(arg=None):\n    return {}['a field the file forgot']\n",
}


@dataclasses.dataclass(frozen=True)
class Case:
    binary: str  # module under experiments/
    args: tuple  # flags; {w}: the case's workdir, {c}: the directory of the broken config files
    what: str  # what is wrong, for the table
    start: str = "new"  # what the workdir holds at the start (`START`)
    signal: str = ""  # "SIGINT" or "SIGTERM": sent once the run holds its workdir (3 s later)
    holder: str = (
        ""  # another process holding the workdir first: "lock" (the lock alone), or "same"
    )
    # (the same binary, `LONG` settings)
    fails_running: bool = (
        False  # the fault shows only once the run is under way: it ends with a marker
    )
    # that says failed (a corrected command may then take the workdir)

    @property
    def expected(self) -> int:
        return SIGNALS.get(self.signal, 2)


def _cases_every_binary() -> list[Case]:
    """The classes of fault of issue 31, for every binary: an empty or blank workdir, a workdir of
    another binary's run or another config's run, a workdir held by another process, a gs:// workdir
    without gcsfs."""
    run_flags = {
        "train_images": (LOCAL,),
        "compare_attention": (LOCAL, "--config.seeds=1"),
        "theory": THEORY_TINY,
        "permuted": ("--config=tpu_configs/permuted.py:quick",),
        "how_vits_work": ("--config=tpu_configs/pk22.py:quick",),
    }
    out = []
    for b in BINARIES:
        base = run_flags.get(b, ())
        if b == "posemb_similarity":  # reads --config.run, writes --workdir
            out += [
                Case(b, ("--config.run={w}", "--workdir="), "empty --workdir", start="image"),
                Case(
                    b, ("--config.run=", "--workdir={w}/maps"), "empty --config.run", start="image"
                ),
                Case(
                    b,
                    ("--config.run=   ", "--workdir={w}/maps"),
                    "blank --config.run",
                    start="image",
                ),
                Case(
                    b,
                    ("--config.run={w}", "--workdir={w}/maps"),
                    "--config.run: a theory run",
                    start="theory",
                ),
                Case(
                    b,
                    ("--config.run={w}", "--workdir={w}/theory"),
                    "--workdir holds a theory run",
                    start="image, theory inside",
                ),
                Case(
                    b,
                    ("--config.run=gs://posattn-no-such-bucket/run", "--workdir={w}/maps"),
                    "gs:// --config.run without gcsfs",
                ),
            ]
            continue
        other = "theory" if b == "train_images" else "image"
        out += [
            Case(b, (*base, "--workdir="), "empty --workdir"),
            Case(b, (*base, "--workdir=   "), "blank --workdir"),
            Case(
                b, (*base, "--workdir={w}"), f"the workdir of a finished {other} run", start=other
            ),
            Case(
                b,
                (*base, "--workdir={w}"),
                "a workdir whose marker records another config",
                start="other config",
            ),
            Case(
                b,
                (*base, "--workdir={w}"),
                "a directory of unrelated files",
                start="unrelated files",
            ),
            Case(
                b,
                (*base, "--workdir={w}"),
                "a workdir another process holds",
                start="new dir",
                holder="lock",
            ),
            Case(
                b,
                (*base, "--workdir=gs://posattn-no-such-bucket/run"),
                "gs:// workdir without gcsfs",
            ),
        ]
    return out


def _cases_config_files() -> list[Case]:
    """Broken config files, for every binary that takes one."""
    takes = {
        "train_images": ("--workdir={w}",),
        "theory": ("--workdir={w}",),
        "compare_attention": ("--config.seeds=1", "--workdir={w}"),
        # (a broken --config replaces the default; the smoke run needs the file: `FILE:quick`)
        "token_grid": ("--workdir={w}",),
    }
    return [
        Case(b, (f"--config={{c}}/{name}.py", *rest), f"config file: {name.replace('_', ' ')}")
        for b, rest in takes.items()
        for name in CONFIG_FILES
    ] + [
        Case(
            b,
            (f"--config={path}", "--workdir={w}"),
            f"{pathlib.Path(path).name}, another binary's config file",
        )
        for b in BINARIES
        for path in sorted(set(DEFAULT_CONFIG.values()))
        if path != DEFAULT_CONFIG[b]
    ]


def _cases_numbers() -> list[Case]:
    """Numbers out of range or not finite, where each binary takes numbers."""
    return [
        Case(
            "train_images",
            (LOCAL, "--config.total_steps=3000000000", "--workdir={w}"),
            "total_steps beyond int32",
        ),
        Case(
            "compare_attention",
            (LOCAL, "--config.seeds=1", "--config.total_steps=3000000000", "--workdir={w}"),
            "total_steps beyond int32",
        ),
        Case(
            "permuted",
            (
                "--config=tpu_configs/permuted.py:quick",
                "--config.vit_steps=3000000000",
                "--workdir={w}",
            ),
            "steps beyond int32",
        ),
        Case(
            "token_grid", ("--config.grid.steps=3000000000", "--workdir={w}"), "steps beyond int32"
        ),
        Case("theory", ("--config.gd.N=3000000000", "--workdir={w}"), "gd.N beyond int32"),
        Case(
            "theory",
            ("--config.gd.N=1000000000", "--workdir={w}"),
            "gd.N=1e9: out of memory",
            fails_running=True,
        ),
        Case("theory", ("--config.gd.lr=inf", "--workdir={w}"), "gd.lr=inf"),
        Case("theory", ("--config.gd.a0=nan", "--workdir={w}"), "gd.a0=nan"),
        Case("theory", ("--config.theory.noise_std=inf", "--workdir={w}"), "theory.noise_std=inf"),
        Case("theory", ("--config.gd.steps=2.5", "--workdir={w}"), "gd.steps=2.5"),
        Case("shallow_vit", ("--config.sgd.eta=inf", "--workdir={w}"), "eta=inf"),
        Case("shallow_vit", ("--config.sgd.N=3000000000", "--workdir={w}"), "N beyond int32"),
        Case("phase_three", ("--config.steps=3000000000", "--workdir={w}"), "steps beyond int32"),
        Case("phase_three", ("--config.q=nan", "--workdir={w}"), "q=nan"),
        Case("how_vits_work", ("--config.noise_eps=nan", "--workdir={w}"), "noise_eps=nan"),
        Case(
            "shallow_settle",
            ("--config.seeds=1", "--workdir={w}"),
            "seeds=1 (an interval needs two)",
        ),
        Case("shallow_settle", ("--config.sgd.eta=inf", "--workdir={w}"), "eta=inf"),
        Case(
            "reproduce",
            ("--config.seed=99999999999999999999", "--workdir={w}"),
            "seed beyond 64 bits",
        ),
        Case(
            "theory", ("--config.seed=99999999999999999999", "--workdir={w}"), "seed beyond 64 bits"
        ),
    ]


def _cases_damaged_runs() -> list[Case]:
    """Finished runs whose config.json is damaged or gone, for the binaries that read one."""
    out = []
    for damage in ("garbage", "truncated", "empty"):
        start = f"image, config.json {damage}"
        out += [
            Case(
                "train_images",
                (LOCAL, "--workdir={w}"),
                f"resume: config.json {damage}",
                start=start,
            ),
            Case(
                "posemb_similarity",
                ("--config.run={w}", "--workdir={w}/maps"),
                f"--config.run: config.json {damage}",
                start=start,
            ),
            Case(
                "how_vits_work",
                ("--config.runs={w}", "--workdir={w}/pk22"),
                f"--config.runs: config.json {damage}",
                start=start,
            ),
        ]
    return out + [
        Case(
            "theory",
            (*THEORY_TINY, "--workdir={w}"),
            "its own run, config.json garbage",
            start="theory, config.json garbage",
        ),
        Case(
            "train_images",
            (LOCAL, "--config.seed=1", "--workdir={w}"),
            "resume without config.json, another seed",
            start="image, no config.json",
        ),
        Case(
            "how_vits_work",
            ("--config.runs={w}", "--workdir={w}/pk22"),
            "--config.runs: a theory run",
            start="theory",
        ),
    ]


def _cases_processes() -> list[Case]:
    """A second process of the same binary on a running run; SIGINT and SIGTERM once a run holds its
    workdir, for every binary that runs long."""
    out = [
        Case(b, (*LONG[b], "--workdir={w}"), "a second process on a running run", holder="same")
        for b in ("theory", "train_images")
    ]
    for b, flags_ in LONG.items():
        out += [
            Case(b, (*flags_, "--workdir={w}"), f"{s} during the run", signal=s) for s in SIGNALS
        ]
    return out


def _cases_issue_18() -> list[Case]:
    """The bad flags and configs of issue 18."""
    return [
        Case("train_images", (), "no flags at all"),
        Case(
            "train_images", ("--config=tpu_configs/nope.py", "--workdir={w}"), "config file missing"
        ),
        Case("train_images", (f"{DIGITS}:bogus", "--workdir={w}"), "unknown config argument"),
        Case(
            "train_images",
            (DIGITS, "--config.model.attention=posit", "--workdir={w}"),
            "unknown attention",
        ),
        Case(
            "train_images",
            (DIGITS, "--config.model.variant=XXL/3", "--workdir={w}"),
            "unknown ViT variant",
        ),
        Case(
            "train_images",
            (DIGITS, "--config.global_batch_size=0", "--workdir={w}"),
            "batch size 0",
        ),
        Case(
            "train_images",
            (DIGITS, "--config.total_steps=-5", "--workdir={w}"),
            "negative step count",
        ),
        Case(
            "train_images",
            (DIGITS, "--config.no_such_field=1", "--workdir={w}"),
            "unknown config field",
        ),
        Case(
            "train_images",
            (DIGITS, "--config.optimizer.lr=fast", "--workdir={w}"),
            "lr not a number",
        ),
        Case("train_images", (DIGITS, "--workdir={w}", "extra"), "stray positional argument"),
        Case(
            "train_images",
            (LOCAL, "--config.model.attention=vanilla", "--workdir={w}"),
            "resume a run with another model",
            start="image",
        ),
        Case(
            "train_images",
            (LOCAL, "--config.total_steps=2", "--workdir={w}"),
            "total_steps below the run's checkpoint",
            start="image",
        ),
        Case("theory", ("--workdir={w}", "--config=tpu_configs/theory.py:nope"), "unknown preset"),
        Case("theory", ("--workdir={w}", "--config.gd.steps=0"), "zero GD steps"),
        Case(
            "theory",
            ("--workdir={w}", "--config.theory.D=7", "--config.theory.C=4"),
            "patches not a multiple of the set size",
        ),
        Case("theory", ("--workdir={w}", "--config.gd.risk=nope"), "unknown risk"),
        Case("theory", ("--workdir={w}", "--config.theory.q=1.5"), "probability q above 1"),
        Case("theory", ("--workdir={w}", "--steps=100"), "a flag of the former interface"),
        Case("theory", ("--config.seed=1",), "--workdir missing"),
        Case("reproduce", ("--config.seed=abc", "--workdir={w}"), "seed not an integer"),
        Case("reproduce", (), "--workdir missing"),
        Case("permuted", ("--config.block_sizes=2,x", "--workdir={w}"), "block sizes not integers"),
        Case("permuted", ("--config.models=vit,transformer", "--workdir={w}"), "unknown model"),
        Case(
            "permuted",
            ("--config=tpu_configs/permuted.py:mnist", "--workdir={w}"),
            "unknown dataset",
        ),
        Case(
            "posemb_similarity",
            ("--config.run={w}", "--workdir={w}/maps"),
            "--config.run holds no run",
        ),
        Case(
            "posemb_similarity",
            ("--config.run={w}", "--workdir={w}/maps", "--config.patches=a,b"),
            "patches not integers",
            start="image",
        ),
        Case("compare_attention", ("--config.seeds=0", "--workdir={w}"), "zero seeds"),
        Case("compare_attention", ("--config=missing.py", "--workdir={w}"), "config file missing"),
        Case("shallow_vit", ("--workdir={w}", "--no_such_flag=1"), "unknown flag"),
        Case("shallow_vit", ("--workdir={w}", "--config.seeds=0"), "zero seeds"),
        Case("shallow_vit", ("--workdir={w}", "--config.Ns=5,x"), "sample sizes not numbers"),
        Case("phase_three", ("--workdir={w}", "--config.q=0.4,abc"), "q not a probability"),
        Case("how_vits_work", ("--workdir={w}", "--no_such_flag=1"), "unknown flag"),
    ]


def cases() -> list[Case]:
    """Every case, for each binary present in experiments/."""
    present = {p.stem for p in (ROOT / "experiments").glob("*.py")}
    out = (
        _cases_issue_18()
        + _cases_every_binary()
        + _cases_config_files()
        + _cases_numbers()
        + _cases_damaged_runs()
        + _cases_processes()
    )
    return [c for c in out if c.binary in present]


def _damage_config_json(workdir: pathlib.Path, damage: str) -> None:
    path = workdir / "config.json"
    text = path.read_bytes()
    path.write_bytes(
        {"garbage": b"\x00\xff not json", "truncated": text[: len(text) // 2], "empty": b""}[damage]
    )


def _prepare(case: Case, workdir: pathlib.Path, refs: dict) -> None:
    """The workdir as `case.start` says (`START`)."""
    start = case.start
    if start == "new":
        return
    if start == "new dir":
        workdir.mkdir(parents=True)
    elif start == "unrelated files":
        workdir.mkdir(parents=True)
        (workdir / "notes.txt").write_text("someone's notes\n")
        (workdir / "summary.json").write_text("{}\n")
    elif (
        start == "other config"
    ):  # a finished run of the same binary with another config, as the marker records it
        workdir.mkdir(parents=True)
        (workdir / "summary.json").write_text("{}\n")
        (workdir / "workdir.json").write_text(
            json.dumps(
                {
                    "binary": case.binary,
                    "config": {"seed": 12345},
                    "fingerprint": "0",
                    "status": "complete",
                    "pid": 1,
                    "command": "",
                    "started": None,
                    "ended": None,
                    "message": None,
                }
            )
        )
    else:
        kind, _, damage = start.partition(", ")
        shutil.copytree(refs[kind], workdir)
        if damage == "theory inside":
            shutil.copytree(refs["theory"], workdir / "theory")
        elif damage == "no config.json":
            (workdir / "config.json").unlink()
        elif damage:
            _damage_config_json(workdir, damage.split()[-1])


START = (
    "new",
    "new dir",
    "unrelated files",
    "other config",
    "image",
    "theory",
    "image, theory inside",
    "image, no config.json",
    *(
        f"{k}, config.json {d}"
        for k in ("image", "theory")
        for d in ("garbage", "truncated", "empty")
    ),
)


def _snapshot(path: pathlib.Path) -> dict:
    """{relative path: SHA-256} of every file under `path` (its own name if a file; {} if absent)."""
    if not path.exists():
        return {}
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _outside(root: pathlib.Path, cwd: pathlib.Path, refs: dict) -> dict:
    """What a case must not change: its current directory, the references, the drill's top level and
    the top of the file system."""
    return {
        "cwd": _snapshot(cwd),
        **{f"ref {k}": _snapshot(v) for k, v in refs.items()},
        "drill": sorted(p.name for p in root.iterdir()),
        "/": sorted(os.listdir("/")),
    }


def _holder(case: Case, workdir: pathlib.Path, cwd: pathlib.Path, env: dict) -> subprocess.Popen:
    """Start the process that holds `workdir` before the case runs, and wait until it does."""
    if case.holder == "lock":
        code = (
            "import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nos.write(fd, f'{os.getpid()}\\n'.encode())\n"
            "print('held', flush=True)\ntime.sleep(600)\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(workdir / "workdir.lock")],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        proc.stdout.readline()
        return proc
    args = [a.format(w=workdir) for a in (*LONG[case.binary], "--workdir={w}")]
    proc = subprocess.Popen(
        [sys.executable, "-m", f"experiments.{case.binary}", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_running(workdir, proc)
    return proc


def _wait_running(workdir: pathlib.Path, proc: subprocess.Popen, timeout: float = 300) -> bool:
    """Wait until `workdir`'s marker says running (the process holds it); False if it ended first."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout and proc.poll() is None:
        try:
            if json.loads((workdir / "workdir.json").read_text())["status"] == "running":
                return True
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    return False


def _marker_status(workdir: pathlib.Path) -> str | None:
    try:
        return json.loads((workdir / "workdir.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        return None


def run_case(case: Case, root: pathlib.Path, i: int, refs: dict, env: dict) -> dict:
    """Run one case in root/NN; its record (`table` lists the fields)."""
    workdir, cwd = root / f"{i:03d}" / "workdir", root / f"{i:03d}" / "cwd"
    cwd.mkdir(parents=True)
    _prepare(case, workdir, refs)
    holder = _holder(case, workdir, cwd, env) if case.holder else None
    before, outside_before = _snapshot(workdir), _outside(root, cwd, refs)
    args = [a.format(w=workdir, c=root / "configs") for a in case.args]
    # SIGINT as a terminal sends it: a child of a process that ignores it would ignore it too
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", f"experiments.{case.binary}", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    sent = None
    if case.signal and _wait_running(workdir, proc):
        time.sleep(3)
        sent = time.monotonic()
        proc.send_signal(getattr(signal, case.signal))
    try:
        _, stderr = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
    seconds_to_stop = None if sent is None else time.monotonic() - sent
    holder_pid = holder.pid if holder else None
    if holder:
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=300)
    lines = stderr.strip().splitlines()
    after = _snapshot(workdir)
    outside_after = _outside(root, cwd, refs)
    outside = sorted(k for k in outside_before if outside_before[k] != outside_after[k])
    # (with the same binary holding the workdir first, that process's own writes show here)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    return {
        "binary": case.binary,
        "what": case.what,
        "start": case.start,
        "signal": case.signal,
        "holder": case.holder,
        "command": " ".join(args),
        "status": proc.returncode,
        "expected": case.expected,
        "stderr_lines": len(lines),
        "one_line": len(lines) == 1,
        "traceback": "Traceback" in stderr,
        "message": lines[-1] if lines else "",
        "left": changed,
        "outside": outside,
        "marker": _marker_status(workdir),
        "seconds_to_stop": seconds_to_stop,
        "fails_running": case.fails_running,
        "names_holder": holder_pid is None or f"pid {holder_pid}" in stderr,
    }


def ok(r: dict) -> bool:
    """The case ended as it must: its exit status, one line, no traceback, nothing touched outside its
    workdir, and inside it nothing (a refusal; a first process of the same binary writes its own), a
    marker that says interrupted (a signal) or one that says failed (a fault found once under way)."""
    if r[
        "signal"
    ]:  # interrupted: it says so, or it had written nothing and left the workdir as it was
        inside = r["marker"] == "interrupted" or not r["left"]
    elif r.get("fails_running"):
        inside = r["marker"] == "failed"
    else:
        inside = not r["left"] or r["holder"] == "same"
    return (
        r["status"] == r["expected"]
        and r["one_line"]
        and not r["traceback"]
        and not r["outside"]
        and inside
        and r["names_holder"]
    )


def reference_runs(root: pathlib.Path, env: dict, image: pathlib.Path | None = None) -> dict:
    """The finished runs cases start from: a train_images run (`image`, else a 4-step digits run made
    here) and a tiny theory run; and the broken config files."""
    refs = {"image": image or root / "ref_image", "theory": root / "ref_theory"}
    commands = {"image": ("train_images", LOCAL), "theory": ("theory", *THEORY_TINY)}
    for kind, (binary, *args) in commands.items():
        if not refs[kind].exists():
            subprocess.run(
                [sys.executable, "-m", f"experiments.{binary}", *args, f"--workdir={refs[kind]}"],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
            )
    (root / "configs").mkdir(exist_ok=True)
    for name, text in CONFIG_FILES.items():
        (root / "configs" / f"{name}.py").write_text(text)
    return refs


def run_all(
    root: pathlib.Path, finished_run: pathlib.Path | None, env: dict, say=print, only=None
) -> list[dict]:
    """Every case of `cases()` (of the binaries in `only`, if given), each in root/NNN."""
    root.mkdir(parents=True, exist_ok=True)
    refs = reference_runs(root, env, finished_run)
    results = []
    for i, case in enumerate(c for c in cases() if not only or c.binary in only):
        t0 = time.monotonic()
        r = run_case(case, root, i, refs, env)
        r["seconds"] = time.monotonic() - t0
        marker = f", marker {r['marker']}" if case.signal else ""
        say(
            f"  {i + 1:3d} {'ok ' if ok(r) else 'BAD'} {case.binary}: {case.what}: exit {r['status']}, "
            f"{r['stderr_lines']} lines{', traceback' if r['traceback'] else ''}, left {r['left'] or 'nothing'}, "
            f"outside {r['outside'] or 'nothing'}{marker}: {r['message'][:160]}"
        )
        results.append(r)
    return results


def counts(results: list[dict]) -> str:
    """The drill's figures in one sentence."""
    n = len(results)
    refused = [r for r in results if not r["signal"] and not r.get("fails_running")]
    alone = [r for r in refused if r["holder"] != "same"]  # (beside a running run, that run writes)
    failed = [r for r in results if r.get("fails_running")]
    signals = [r for r in results if r["signal"]]
    return (
        f"{sum(map(ok, results))}/{n} cases end as they must ({len(refused)} refusals: exit 2 "
        f"{sum(r['status'] == 2 for r in refused)}, one line {sum(r['one_line'] for r in refused)}, nothing written "
        f"{sum(not r['left'] for r in alone)} of the {len(alone)} not run beside a running run of the same "
        f"binary; {len(failed)} found once under way: exit 2 with one line and a "
        f"marker that says failed {sum(map(ok, failed))}; {len(signals)} signals: exit 130/143 "
        f"{sum(r['status'] == r['expected'] for r in signals)}, one line {sum(r['one_line'] for r in signals)}, "
        f"marker interrupted {sum(r['marker'] == 'interrupted' for r in signals)}, workdir as it was (nothing "
        f"written yet) {sum(r['marker'] is None and not r['left'] for r in signals)}); tracebacks "
        f"{sum(r['traceback'] for r in results)}; exit 0 {sum(r['status'] == 0 for r in results)}; files touched "
        f"outside the workdir {sum(bool(r['outside']) for r in results)}; binaries: {len({r['binary'] for r in results})}"
    )


def table(results: list[dict]) -> str:
    rows = [
        "| # | binary | bad input | workdir at start | exit | stderr lines | traceback | files left in the "
        "workdir | outside | message |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(results, 1):
        message = r["message"].replace("|", "\\|")
        message = message if len(message) <= 140 else message[:137] + "..."
        left = ", ".join(r["left"][:4]) + (", ..." if len(r["left"]) > 4 else "") or "none"
        if r.get("fails_running"):
            left = f"marker: {r['marker']}; {left}"
        if r.get("signal"):
            left = f"marker: {r['marker']}" + (
                f", stopped {r['seconds_to_stop']:.1f} s after the signal"
                if r["seconds_to_stop"] is not None
                else ""
            )
        mark = "" if ok(r) else " **(!)**"
        rows.append(
            f"| {i} | {r['binary']} | {r['what']}{mark} | {r.get('start', 'new')} | {r['status']} | "
            f"{r.get('stderr_lines', int(r['one_line']))} | {'yes' if r.get('traceback') else 'no'} | {left} | "
            f"{', '.join(r.get('outside', [])) or 'none'} | `{message}` |"
        )
    return "\n".join(rows)


SECTION = "5. Bad input, every binary (issues 18 and 31)"


def section(results: list[dict], command: str, when: str = "") -> str:
    """docs/reliability.md's section of this drill (`when`: the date and length of the run)."""
    return "\n".join(
        [
            f"Written by `{command}`{when}. {counts(results)}.",
            "",
            "Each case runs the binary from an empty current directory on a workdir prepared for it ('workdir "
            "at start': a new path; a copy of a finished train_images (`image`) or theory run; `other config`, a "
            "workdir whose workdir.json records a finished run of the same binary with the config "
            '`{"seed": 12345}`; `new dir` held by '
            "another process; a finished run with its config.json damaged). 'files left': created or changed "
            "in the workdir (for a signal, the status its workdir.json records); 'outside': the current "
            "directory, the reference runs, the drill's directory and `/`. (!) marks a case that did not end "
            "as it must.",
            "",
            table(results),
        ]
    )


def summary_line(results: list[dict]) -> str:
    return f"- Bad input (section 5): {counts(results)}."


def environment(cache_dir: str) -> dict:
    """The subprocesses' environment: this tree importable, CPU, a shared compilation cache."""
    return dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=cache_dir,
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )


def main(argv):
    del argv
    from benchmarks.report import update_section

    FLAGS = flags.FLAGS
    root = pathlib.Path(FLAGS.drill_dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.monotonic()
    results = run_all(root / "cases", None, environment(str(root / "jax_cache")), only=FLAGS.only)
    command = ("python -m drills.bad_inputs " + " ".join(sys.argv[1:])).strip()
    (root / "bad_inputs.json").write_text(json.dumps(results, indent=2))
    when = (
        f" on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} "
        f"({(time.monotonic() - t0) / 60:.1f} min, {os.cpu_count()} CPU cores)"
    )
    print(f"{counts(results)};{when}")
    if FLAGS.write:
        doc = ROOT / "docs" / "reliability.md"
        update_section(SECTION, section(results, command, when), str(doc))
        text = doc.read_text()
        lines = [
            summary_line(results) if line.startswith(("- Bad input", "- Bad inputs")) else line
            for line in text.splitlines()
        ]
        doc.write_text("\n".join(lines) + "\n")


if (
    __name__ == "__main__"
):  # (defined here: drills.faults imports this module and has flags of its own)
    flags.DEFINE_string("drill_dir", "/tmp/posattn_bad_inputs", "Scratch directory (wiped first).")
    flags.DEFINE_list("only", [], "Only the cases of these binaries.")
    flags.DEFINE_bool(
        "write", True, "Write the section (and the summary line) of docs/reliability.md."
    )
    app.run(main)
