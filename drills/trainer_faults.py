"""The image trainer's checkpoint, resume and storage faults of issue 31, a section of the fault drill
(`drills.faults`): every case runs `python -m posattn.experiments.train_images` in a subprocess, as a user
would, and records each launch's exit status and stderr, whether anything good was lost, the step the
restart resumed from and whether its final state is bitwise that of the uninterrupted reference run.

  stray folder        an empty checkpoints/450 above the good steps (the run stopped after 375)
  orbax temporary     a 400.orbax-checkpoint-tmp-* folder holding a save cut short
  partial checkpoint  checkpoint 400 without orbax's commit record (a save that did not finish)
  cut metrics line    a line in the middle of metrics.jsonl cut short: refused, nothing changed
  NaN weight decay    --config.optimizer.weight_decay=nan: refused before anything is written
  failed first launch out of memory at global_batch_size=100000 (under an 8 GiB address-space limit, so
                      the drill never exhausts the machine), then the corrected command on the same workdir
  SIGINT              Ctrl-C at a random moment after the first step, then the same command
  read-only disk      every save from step 2E refused with EROFS as it starts (`failing_saves`)
  full disk           every save from step 2E failing with ENOSPC in orbax's background write
"""

import hashlib
import json
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import time

from posattn import ownership, workdir_lock
from posattn.vision import checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[1]
MEMORY_LIMIT = 8 << 30  # bytes of address space for the out-of-memory launch


def _launch(command, env, *, workdir, interrupt_after=None) -> dict:
    """Run `command`; with `interrupt_after` seconds, send SIGINT that long after its first step. The
    exit status, stdout and stderr (kept beside the workdir, as NAME.LAUNCH.out and .err)."""
    launch = len(list(workdir.parent.glob(f"{workdir.name}.*.out")))
    out, err = (workdir.parent / f"{workdir.name}.{launch}.{kind}" for kind in ("out", "err"))
    with open(out, "w") as fo, open(err, "w") as fe:
        # SIGINT as a terminal sends it: a child of a drill that ignores it (started with `nohup ... &`)
        # would ignore it too, as drills.bad_inputs also ensures
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=fo, stderr=fe)
        finally:
            signal.signal(signal.SIGINT, previous)
        if interrupt_after is not None:
            end = time.monotonic() + 300
            while (
                proc.poll() is None
                and time.monotonic() < end
                and "compiled and ran the first step" not in (out.read_text())
            ):
                time.sleep(0.01)
            time.sleep(interrupt_after)
            proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=900)
    lines = err.read_text().strip().splitlines()
    return {
        "status": status,
        "stdout": out.read_text(),
        "stderr_lines": len(lines),
        "message": lines[-1] if lines else "",
    }


def _wrapped(command: list, before: str, around: str | None = None) -> list:
    """`command` (python -m posattn.experiments.train_images FLAGS) as a program that runs `before`, then the
    binary (inside the context manager `around`)."""
    run = "from experiments import train_images\n" + (
        f"with {around}:\n    train_images.entry()\n" if around else "train_images.entry()\n"
    )
    return [sys.executable, "-c", before + "\n" + run, *command[3:]]


def _injected(command: list, code: str, from_step: int, at: str) -> list:
    """`command` with every save from `from_step` failing with errno `code` (`failing_saves`)."""
    return _wrapped(
        command,
        "import errno\nfrom tests.vision.fault_injection import failing_saves",
        f"failing_saves(errno.{code}, from_step={from_step}, at={at!r})",
    )


def _memory_limited(command: list) -> list:
    """`command` under an address-space limit of MEMORY_LIMIT bytes (set in the child, not by a fork of
    this multithreaded process)."""
    return _wrapped(
        command,
        f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, "
        f"{MEMORY_LIMIT}))",
    )


def _snapshot(path: pathlib.Path) -> dict:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def _kept(workdir: pathlib.Path) -> set[str]:
    """Names of the committed checkpoints anywhere in the workdir: checkpoints/, and the folders set
    aside (checkpoints_unreadable/, failed-*/checkpoints/)."""
    found = {str(s) for s in checkpoint.survey(workdir / "checkpoints").complete}
    for folder in [workdir / checkpoint.UNREADABLE_DIR, *workdir.glob("failed-*/checkpoints")]:
        found |= {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    return found


def _resumed_from(stdout: str) -> int | None:
    m = re.search(r"resumed from step (\d+)", stdout)
    return int(m.group(1)) if m else None


def _stopped_at(message: str) -> int | None:
    m = re.search(r"(?:stopped at step|at step) (\d+)", message)
    return int(m.group(1)) if m else None


def run_all(
    reference: pathlib.Path,
    root: pathlib.Path,
    env: dict,
    *,
    train_command,
    final_state,
    bitwise_equal,
    steps: int,
    every: int,
    rng: random.Random,
    say,
) -> list[dict]:
    """Every case above; `reference` is the finished uninterrupted run, `final_state(workdir, step)` and
    `bitwise_equal(a, b)` the drill's own."""
    root.mkdir(parents=True, exist_ok=True)
    ref_state = final_state(reference, steps)
    results = []

    def finish(case: dict, workdir: pathlib.Path, launches: list[dict]) -> None:
        last = launches[-1]
        case.update(
            launches=[{k: v for k, v in launch.items() if k != "stdout"} for launch in launches],
            resumed_from=_resumed_from(last["stdout"]) if last["status"] == 0 else None,
        )
        if last["status"] == 0 and case.get("bitwise") is None:
            case["bitwise"] = bitwise_equal(final_state(workdir, steps), ref_state)[0]
        say(
            f"  {case['case']}: exits {[launch['status'] for launch in launches]}, one line "
            f"{case['one_line']}, nothing lost {case['nothing_lost']}, resumed from {case['resumed_from']}, "
            f"bitwise {case.get('bitwise')}"
        )
        results.append(case)

    def copy_of_reference(name: str, drop_last: bool) -> pathlib.Path:
        workdir = root / name
        shutil.copytree(reference, workdir)
        if drop_last:  # as if the run had stopped after its previous checkpoint
            shutil.rmtree(workdir / "checkpoints" / str(steps))
        return workdir

    # A folder in checkpoints/ that is not a committed checkpoint: skipped, set aside, never counted.
    for name, damage in (
        ("stray folder", "an empty checkpoints/450 above the good steps"),
        ("orbax temporary", f"{steps}.orbax-checkpoint-tmp-1 holding a save cut short"),
        ("partial checkpoint", f"checkpoint {steps} without orbax's commit record"),
    ):
        workdir = copy_of_reference(name.replace(" ", "_"), drop_last=name != "partial checkpoint")
        good = set(_kept(workdir))
        ckpts = workdir / "checkpoints"
        if name == "stray folder":
            (ckpts / "450").mkdir()
        elif name == "orbax temporary":
            shutil.copytree(ckpts / str(steps - every), ckpts / f"{steps}.orbax-checkpoint-tmp-1")
            (ckpts / f"{steps}.orbax-checkpoint-tmp-1" / "commit_success.txt").unlink()
        else:
            (ckpts / str(steps) / "commit_success.txt").unlink()
            meta = json.loads((ckpts / str(steps) / "_CHECKPOINT_METADATA").read_text())
            del meta["commit_timestamp_nsecs"]
            (ckpts / str(steps) / "_CHECKPOINT_METADATA").write_text(json.dumps(meta))
            good.discard(str(steps))
        launch = _launch(train_command(workdir, steps), env, workdir=workdir)
        said = [
            ln for ln in launch["stdout"].splitlines() if ln.startswith(("checkpoint ", "removed "))
        ]
        finish(
            {
                "case": name,
                "damage": damage,
                "said": said,
                "one_line": launch["stderr_lines"] == 0,
                "nothing_lost": good <= _kept(workdir),
            },
            workdir,
            [launch],
        )

    # A line cut short in the middle of metrics.jsonl: refused before any file changes.
    workdir = copy_of_reference("cut_metrics_line", drop_last=True)
    lines = (workdir / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[2] = lines[2][: len(lines[2]) // 2] + "\n"
    (workdir / "metrics.jsonl").write_text("".join(lines))
    before = _snapshot(workdir)
    launch = _launch(train_command(workdir, steps), env, workdir=workdir)
    finish(
        {
            "case": "cut metrics line",
            "damage": "line 3 of metrics.jsonl cut in half",
            "one_line": launch["stderr_lines"] == 1,
            "nothing_lost": _snapshot(workdir) == before,
            "bitwise": None,
        },
        workdir,
        [launch],
    )

    # Non-finite optimiser numbers are refused by the validation, before anything is written.
    workdir = root / "nan_weight_decay"
    launch = _launch(
        train_command(workdir, steps) + ["--config.optimizer.weight_decay=nan"],
        env,
        workdir=workdir,
    )
    finish(
        {
            "case": "NaN weight decay",
            "damage": "--config.optimizer.weight_decay=nan",
            "one_line": launch["stderr_lines"] == 1,
            "nothing_lost": not workdir.exists(),
        },
        workdir,
        [launch],
    )

    # A first launch that runs out of memory, then the corrected command on the same workdir.
    workdir = root / "failed_first_launch"
    failed = _launch(
        _memory_limited(train_command(workdir, steps) + ["--config.global_batch_size=100000"]),
        env,
        workdir=workdir,
    )
    # (the workdir's marker and lock belong to the workdir, not to the launch: they stay)
    left = sorted(
        p.name for p in workdir.iterdir() if p.name not in (ownership.MARKER, workdir_lock.LOCK)
    )
    corrected = _launch(train_command(workdir, steps), env, workdir=workdir)
    aside = sorted(workdir.glob("failed-*"))
    finish(
        {
            "case": "failed first launch",
            "damage": "global_batch_size=100000: out of memory, then the corrected command",
            "left": left,
            "set_aside_in": [str(p) for p in aside],
            "one_line": failed["stderr_lines"] == 1 and corrected["stderr_lines"] == 0,
            "nothing_lost": len(aside) == 1 and sorted(p.name for p in aside[0].iterdir()) == left,
        },
        workdir,
        [failed, corrected],
    )

    # Ctrl-C, then the same command.
    workdir = root / "sigint"
    delay = rng.uniform(0, 10)
    stopped = _launch(train_command(workdir, steps), env, workdir=workdir, interrupt_after=delay)
    at = _stopped_at(stopped["message"])
    saved = checkpoint.survey(workdir / "checkpoints").latest
    resumed = _launch(train_command(workdir, steps), env, workdir=workdir)
    finish(
        {
            "case": "SIGINT",
            "damage": f"SIGINT {delay:.1f} s after the first step",
            "stopped_at": at,
            "one_line": stopped["stderr_lines"] == 1 and resumed["stderr_lines"] == 0,
            "nothing_lost": at is not None and saved == at == _resumed_from(resumed["stdout"]),
        },
        workdir,
        [stopped, resumed],
    )

    # Saves that fail: a disk turned read-only, a full disk; then the same command without the fault.
    for name, code, at_point in (
        ("read-only disk", "EROFS", "start"),
        ("full disk", "ENOSPC", "background"),
    ):
        workdir = root / name.replace(" ", "_").replace("-", "_")
        failed = _launch(
            _injected(train_command(workdir, steps), code, 2 * every, at_point),
            env,
            workdir=workdir,
        )
        printed = [int(s) for s in re.findall(r"^step (\d+)/", failed["stdout"], re.M)]
        survey = checkpoint.survey(workdir / "checkpoints")
        resumed = _launch(train_command(workdir, steps), env, workdir=workdir)
        finish(
            {
                "case": name,
                "damage": f"every save from step {2 * every} fails with {code} "
                f"({'as it starts' if at_point == 'start' else 'in the background write'})",
                "stopped_at": _stopped_at(failed["message"]),
                "last_step_printed": max(printed, default=None),
                "committed_after_failure": list(survey.complete),
                "temporary_after_failure": list(survey.temporary),
                "one_line": failed["stderr_lines"] == 1 and resumed["stderr_lines"] == 0,
                "nothing_lost": list(survey.complete) == [every]
                and survey.latest == _resumed_from(resumed["stdout"]),
            },
            workdir,
            [failed, resumed],
        )
    return results


def table(results: list[dict]) -> str:
    rows = [
        "| case | fault | exits | one line, no traceback | nothing lost | resumed from | final state bitwise "
        "equal | what the run said |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        said = " / ".join(
            r.get("said", [])
            + [launch["message"] for launch in r["launches"] if launch["message"]]
            + [f"set aside in {p}" for p in r.get("set_aside_in", [])]
        )
        said = said.replace("|", "\\|")
        finished = r["launches"][-1]["status"] == 0
        resumed = (
            r["resumed_from"]
            if r["resumed_from"] is not None
            else ("step 0" if finished else "n/a")
        )
        rows.append(
            f"| {r['case']} | {r['damage']} | {', '.join(str(launch['status']) for launch in r['launches'])} | "
            f"{r['one_line']} | {r['nothing_lost']} | {resumed} | "
            f"{'n/a' if r.get('bitwise') is None else r['bitwise']} | `{said[:520]}` |"
        )
    return "\n".join(rows)


def summary(results: list[dict]) -> str:
    ok = sum(r["one_line"] and r["nothing_lost"] and r.get("bitwise") is not False for r in results)
    resumed = [r for r in results if r.get("bitwise") is not None]
    saves = [
        f"{r['case']}: at step {r['stopped_at']}, the last step it ran {r['last_step_printed']}"
        for r in results
        if "last_step_printed" in r
    ]
    return (
        f"{ok}/{len(results)} cases ended every launch with one line (or none) and lost nothing; "
        f"{sum(r['bitwise'] for r in resumed)}/{len(resumed)} restarts ended bitwise equal to the uninterrupted "
        f"run; where the failed saves stopped the run: {'; '.join(saves)}"
    )
