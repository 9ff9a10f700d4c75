r"""The fault drill of issue 18: what a long image run survives, measured, written to docs/reliability.md.

    python -m drills.faults                       # ~10-15 min on 2 shared CPU cores
    python -m drills.faults --kills=3 --terms=3 --steps=200 --write=false   # a quick look

The run under test is tpu_configs/digits.py (ViT XS/2, batch 128) shortened to --steps steps with a
checkpoint every --checkpoint_every steps and an evaluation every --eval_every, so that a drill of ten
restarts fits in minutes; every launch is `python -m posattn.experiments.train_images` in a subprocess, and all
share one compilation cache (a restart then runs the same compiled program, as bitwise equality needs).

1. SIGKILL x K: launch, kill at a random moment, restart, ... then let the last restart finish; each
   restart must resume from the newest checkpoint on disk, and the final state (parameters, optimizer
   moments, step) must be bitwise that of an uninterrupted run. Moments, in turn: a random delay after
   the run prints its first line (restore, data, compile), two random delays after its first training
   step, one while a checkpoint is being written (orbax's temporary directory exists), one right after
   an evaluation step's log line (its save and evaluation follow).
2. SIGTERM x K: the same with a preemption notice, which must save at the current step, exit 143 with
   one line, and resume from that step.
3. A truncated and a bit-flipped latest checkpoint: the restart falls back to the previous one, moves the
   bad one aside, and ends bitwise equal.
4. A workdir that cannot be written: a path through a file, a read-only disk, a full disk.
5. Bad input across every binary (`drills.bad_inputs`: 175 cases, ~40 min of the drill; it also runs alone).
6. A NaN injected at a chosen step (image regime; the theory regime when its binary can inject one):
   the step the run stops at and what it leaves.
7. The trainer's checkpoint, resume and storage faults of issue 31 (`drills.trainer_faults`): step
   folders that are not checkpoints, a cut metrics line, a failed first launch then the corrected one,
   SIGINT, a disk that turns read-only or fills up during the run.
"""

import datetime
import json
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
from absl import app, flags, logging

from benchmarks.report import machine
from drills import bad_inputs, trainer_faults
from drills.reliability_report import write_report
from tests.theory.fault_injection import nan_at_step as theory_nan_at_step
from tests.vision.fault_injection import damage_checkpoint, nan_at_step

ROOT = bad_inputs.ROOT
DOC = ROOT / "docs" / "reliability.md"

flags.DEFINE_integer("kills", 10, "SIGKILLs of the kill chain.")
flags.DEFINE_integer("terms", 10, "SIGTERMs of the preemption chain.")
flags.DEFINE_integer("steps", 400, "Training steps of the digits run under test.")
flags.DEFINE_integer("checkpoint_every", 25, "Steps between checkpoints.")
flags.DEFINE_integer("eval_every", 100, "Steps between evaluations.")
flags.DEFINE_float(
    "max_delay",
    15.0,
    "Random kills land up to this many seconds after the first line "
    "(every fifth) or the first training step (two in five).",
)
flags.DEFINE_integer("nan_step", 137, "Step at which a NaN is injected.")
flags.DEFINE_integer("seed", 0, "Seed of the kill moments.")
flags.DEFINE_string("drill_dir", "/tmp/posattn_fault_drill", "Scratch directory (wiped first).")
flags.DEFINE_bool("write", True, "Write docs/reliability.md.")
flags.DEFINE_string(
    "from_json",
    None,
    "Only rewrite the report from a drill's drill.json (run with the same flags); no drill.",
)
FLAGS = flags.FLAGS


# ---------------------------------------------------------------------------------- the run under test


def train_command(workdir, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "experiments.train_images",
        "--config=tpu_configs/digits.py",
        f"--config.total_steps={steps}",
        f"--config.checkpoint_every={FLAGS.checkpoint_every}",
        f"--config.eval_every={FLAGS.eval_every}",
        "--config.log_every=25",
        "--config.keep_checkpoints=3",
        f"--workdir={workdir}",
    ]


def saved_steps(workdir) -> list[int]:
    d = pathlib.Path(workdir) / "checkpoints"
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def saving_now(workdir) -> bool:
    """A checkpoint is being written: orbax's temporary directory exists."""
    d = pathlib.Path(workdir) / "checkpoints"
    return d.is_dir() and any("tmp" in p.name for p in d.iterdir())


def _wait_for(predicate, timeout: float, proc) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def _resumed_from(text: str) -> int:
    m = re.search(r"resumed from step (\d+)", text)
    return int(m.group(1)) if m else 0


def chain(workdir: pathlib.Path, sig: int, count: int, env: dict, rng: random.Random, say) -> dict:
    """`count` launches each ended by `sig`, then one that finishes; what each restart did."""
    events = []
    for i in range(count + 1):
        before = saved_steps(workdir)
        out, err = (
            workdir.parent / f"{workdir.name}.{i}.out",
            workdir.parent / f"{workdir.name}.{i}.err",
        )
        with open(out, "w") as fo, open(err, "w") as fe:
            proc = subprocess.Popen(
                train_command(workdir, FLAGS.steps), cwd=ROOT, env=env, stdout=fo, stderr=fe
            )
        read = lambda: out.read_text()
        _wait_for(lambda: "parameters," in read(), 300, proc)
        event = {
            "launch": i,
            "checkpoint_on_disk": before[-1] if before else 0,
            "resumed_from": _resumed_from(read()),
        }
        if i < count:
            mode = {
                0: "random, from the first line",
                3: "during a save",
                4: "after an eval step's log line",
            }.get(i % 5, "random, from the first step")
            if mode.startswith("random"):
                if mode.endswith("step"):  # training has started (compiled, or from the cache)
                    _wait_for(lambda: "compiled and ran the first step" in read(), 300, proc)
                delay = rng.uniform(0, FLAGS.max_delay)
                mode += f" +{delay:.1f}s"
                time.sleep(delay)
            elif mode == "during a save":
                _wait_for(lambda: saving_now(workdir), 120, proc)
            elif mode == "after an eval step's log line":
                start = event["resumed_from"]
                pattern = re.compile(r"^step (\d+)/\d+  loss", re.M)
                _wait_for(
                    lambda: any(
                        int(s) > start and int(s) % FLAGS.eval_every == 0
                        for s in pattern.findall(read())
                    ),
                    120,
                    proc,
                )
            event.update(
                mode=mode,
                finished_first=proc.poll() is not None,
                saving_at_signal=saving_now(workdir),
            )
            proc.send_signal(sig)
        status = proc.wait(timeout=600)
        steps_logged = re.findall(r"^step (\d+)/", read(), re.M)
        stderr = err.read_text().strip().splitlines()
        event.update(
            status=status,
            last_step_printed=int(steps_logged[-1]) if steps_logged else None,
            checkpoints_after=saved_steps(workdir),
            stderr_last=stderr[-1] if stderr else "",
            stderr_lines=len(stderr),
        )
        event["resumed_ok"] = event["resumed_from"] == event["checkpoint_on_disk"]
        say(
            f"  {signal.Signals(sig).name if i < count else 'finish'} {i}: resumed from "
            f"{event['resumed_from']} (on disk: {event['checkpoint_on_disk']}), "
            f"{event.get('mode', '')}, exit {status}, checkpoints {event['checkpoints_after']}"
        )
        events.append(event)
    return {"events": events}


def final_state(workdir, step: int):
    from posattn.vision import runs

    return jax.device_get(runs.restore_run(workdir, step=step, devices=jax.devices()[:1])[1])


def bitwise_equal(a, b) -> tuple[bool, int]:
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    same = len(leaves_a) == len(leaves_b) and all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(leaves_a, leaves_b)
    )
    return same, len(leaves_a)


# ---------------------------------------------------------------------------------- damaged checkpoints


def damaged(reference: pathlib.Path, root: pathlib.Path, env: dict, say) -> list[dict]:
    """Restart a copy of the finished reference run after damaging its latest checkpoint (each kind),
    then after damaging every checkpoint."""
    results, last = [], saved_steps(reference)[-1]
    for kind in ("truncate", "bitflip", "every checkpoint truncated"):
        workdir = root / kind.replace(" ", "_")
        shutil.copytree(reference, workdir)
        steps = saved_steps(workdir) if kind.startswith("every") else [last]
        for step in steps:
            damage_checkpoint(
                workdir / "checkpoints" / str(step),
                "truncate" if kind.startswith("every") else kind,
            )
        done = subprocess.run(
            train_command(workdir, FLAGS.steps),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        moved = (
            sorted(p.name for p in (workdir / "checkpoints_unreadable").iterdir())
            if (workdir / "checkpoints_unreadable").is_dir()
            else []
        )
        r = {
            "damage": kind,
            "status": done.returncode,
            "resumed_from": _resumed_from(done.stdout),
            "said": [ln for ln in done.stdout.splitlines() if ln.startswith("checkpoint ")],
            "stderr": done.stderr.strip().splitlines()[-1:] if done.returncode else [],
            "moved_aside": moved,
            "checkpoints_after": saved_steps(workdir),
        }
        if done.returncode == 0:
            r["bitwise_equal"] = bitwise_equal(
                final_state(workdir, last), final_state(reference, last)
            )[0]
        say(
            f"  damage {kind}: exit {r['status']}, resumed from {r['resumed_from']}, moved aside {moved}, "
            f"bitwise {r.get('bitwise_equal')}"
        )
        results.append(r)
    return results


# ---------------------------------------------------------------------------------- unwritable workdirs


def _mount_tmpfs(path: pathlib.Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )


def unwritable(root: pathlib.Path, env: dict, say) -> list[dict]:
    """The binary on a workdir through a file, on a read-only disk, on a full disk (the last two need
    root to mount a tmpfs; as another user a directory without write permission stands for the first)."""
    results = []
    (root / "a_file").parent.mkdir(parents=True, exist_ok=True)
    (root / "a_file").write_text("")
    cases = [("a path through a file", root / "a_file" / "run", None)]
    readonly, full = root / "readonly", root / "full"
    if _mount_tmpfs(readonly, "ro,size=1m"):
        cases.append(("a read-only disk (tmpfs mounted ro)", readonly / "run", readonly))
    else:
        readonly.mkdir(parents=True, exist_ok=True)
        readonly.chmod(0o555)
        cases.append(("a directory without write permission", readonly / "run", None))
    if _mount_tmpfs(full, "size=64k"):
        cases.append(("a full disk (64 KiB tmpfs)", full / "run", full))
    try:
        for what, workdir, _ in cases:
            t0 = time.monotonic()
            done = subprocess.run(
                train_command(workdir, FLAGS.steps),
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            lines = done.stderr.strip().splitlines()
            left = (
                sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*"))
                if workdir.is_dir()
                else []
            )
            r = {
                "what": what,
                "status": done.returncode,
                "one_line": len(lines) == 1,
                "message": lines[-1] if lines else "",
                "seconds": time.monotonic() - t0,
                "left": left,
            }
            say(f"  workdir {what}: exit {r['status']}, {r['message']}")
            results.append(r)
    finally:
        for _, _, mount in cases:
            if mount is not None:
                subprocess.run(["umount", str(mount)], capture_output=True)
    return results


# ---------------------------------------------------------------------------------- NaN


def image_nan(root: pathlib.Path, env: dict, say) -> list[dict]:
    """A NaN injected at --nan_step of the digits run (in this process, through `nan_at_step`), and the
    binary with a learning rate that diverges at once (lr=1e30: the warm-up's first step with lr > 0)."""
    from posattn import cli
    from posattn.vision import config as config_lib
    from posattn.vision import train, train_step

    config = cli.load_config("tpu_configs/digits.py", None, config_lib.SCHEMA)
    config.total_steps, config.checkpoint_every = FLAGS.steps, FLAGS.checkpoint_every
    config.eval_every, config.log_every = FLAGS.eval_every, 25
    workdir = root / "image_injected"
    original = train_step.make_train_step
    train_step.make_train_step = nan_at_step(original, FLAGS.nan_step)
    try:
        train.train(config, str(workdir), devices=jax.devices()[:1])
        stopped = "not stopped"
    except train.NonFiniteLoss as e:
        stopped = str(e)
    finally:
        train_step.make_train_step = original
    metrics = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    results = [
        {
            "what": f"params and loss set to NaN at step {FLAGS.nan_step} (in-process)",
            "message": stopped,
            "stopped_at": _named_step(stopped),
            "checkpoints_left": saved_steps(workdir),
            "summary_written": (workdir / "summary.json").exists(),
            "last_logged_step": metrics[-1]["step"],
        }
    ]
    workdir = root / "image_lr_huge"  # (a NaN learning rate is refused by the validation)
    done = subprocess.run(
        train_command(workdir, FLAGS.steps) + ["--config.optimizer.lr=1e30"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = done.stderr.strip().splitlines()
    results.append(
        {
            "what": "--config.optimizer.lr=1e30 (the binary)",
            "status": done.returncode,
            "one_line": len(lines) == 1,
            "message": lines[-1] if lines else "",
            "stopped_at": _named_step(lines[-1] if lines else ""),
            "checkpoints_left": saved_steps(workdir),
            "summary_written": (workdir / "summary.json").exists(),
            "files_left": sorted(p.name for p in workdir.iterdir()) if workdir.is_dir() else [],
        }
    )
    for r in results:
        say(
            f"  NaN {r['what']}: stopped at step {r['stopped_at']}, checkpoints {r['checkpoints_left']}"
        )
    return results


def theory_nan(root: pathlib.Path, env: dict, say) -> list[dict]:
    """A NaN gradient injected so that step --nan_step's parameters are NaN (the `phases` preset, in
    this process), and the binary with step sizes that diverge."""
    from posattn.theory import gd as gd_lib
    from posattn.theory import keys, presets
    from posattn.theory import step as step_lib

    theory, gd = presets.get_preset("phases")
    original, seen = step_lib.risk_and_grad, []
    step_lib.risk_and_grad = theory_nan_at_step(original, FLAGS.nan_step)
    try:
        gd_lib.fit(keys.seed_key(0), theory, gd, on_eval=seen.append)
        stopped = "not stopped"
    except gd_lib.NonFiniteLoss as e:
        stopped = str(e)
    finally:
        step_lib.risk_and_grad = original
    results = [
        {
            "what": f"theory (`phases` preset): parameters NaN from GD step {FLAGS.nan_step} (in-process)",
            "message": stopped,
            "stopped_at": _named_step(stopped),
            "checkpoints_left": "n/a",
            "summary_written": False,
            "last_logged_step": int(seen[-1]["step"]) if seen else None,
        }
    ]
    workdir = root / "theory_binary"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.theory",
            f"--workdir={workdir}",
            "--config.gd.lr=1e8",
            "--config.gd.lr_A=1e8",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = done.stderr.strip().splitlines()
    results.append(
        {
            "what": "experiments.theory --config.gd.lr=1e8 --config.gd.lr_A=1e8 (the binary)",
            "status": done.returncode,
            "one_line": len(lines) == 1,
            "message": lines[-1] if lines else "",
            "stopped_at": _named_step(lines[-1] if lines else ""),
            "checkpoints_left": "n/a",
            "summary_written": (workdir / "summary.json").exists(),
            "files_left": sorted(p.name for p in workdir.iterdir()) if workdir.is_dir() else [],
        }
    )
    for r in results:
        say(f"  NaN {r['what']}: stopped at step {r['stopped_at']}")
    return results


def _named_step(message: str) -> int | None:
    m = re.search(r"at (?:GD )?step (\d+)", message)
    return int(m.group(1)) if m else None


def settings() -> dict:
    """The flags the report describes."""
    return {
        k: FLAGS[k].value
        for k in (
            "kills",
            "terms",
            "steps",
            "checkpoint_every",
            "eval_every",
            "max_delay",
            "nan_step",
            "seed",
        )
    }


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:  # quiet orbax's per-restore logs; --verbosity=0 shows them
        logging.set_verbosity(logging.ERROR)
    if FLAGS.from_json:
        r = json.loads(pathlib.Path(FLAGS.from_json).read_text())
        r.setdefault("settings", settings())
        report = write_report(r, r.get("command", "python -m drills.faults"), r["settings"])
        print(report)
        if FLAGS.write:
            DOC.write_text(report)
        return
    t0 = time.monotonic()
    root = pathlib.Path(FLAGS.drill_dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    env = bad_inputs.environment(str(root / "jax_cache"))
    rng = random.Random(FLAGS.seed)
    say = lambda s: print(s, flush=True)
    r = {}

    say("reference: an uninterrupted run")
    reference = root / "reference"
    subprocess.run(
        train_command(reference, FLAGS.steps), cwd=ROOT, env=env, check=True, capture_output=True
    )
    ref_state = final_state(reference, FLAGS.steps)
    for name, sig, count in (
        ("kill", signal.SIGKILL, FLAGS.kills),
        ("term", signal.SIGTERM, FLAGS.terms),
    ):
        say(f"{signal.Signals(sig).name} chain")
        r[name] = chain(root / name, sig, count, env, rng, say)
        r[name]["bitwise"] = bitwise_equal(final_state(root / name, FLAGS.steps), ref_state)
        say(f"  final state bitwise equal: {r[name]['bitwise']}")
    say("damaged checkpoints")
    r["damaged"] = damaged(reference, root / "damaged", env, say)
    say("checkpoint, resume and storage faults")
    r["trainer_faults"] = trainer_faults.run_all(
        reference,
        root / "trainer",
        env,
        train_command=train_command,
        final_state=final_state,
        bitwise_equal=bitwise_equal,
        steps=FLAGS.steps,
        every=FLAGS.checkpoint_every,
        rng=rng,
        say=say,
    )
    say("unwritable workdirs")
    r["workdir"] = unwritable(root / "workdirs", env, say)
    say("bad inputs")
    r["bad_inputs"] = bad_inputs.run_all(root / "bad", reference, env, say)
    say("NaN")
    r["nan"] = image_nan(root / "nan", env, say) + theory_nan(root / "nan", env, say)

    r.update(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        minutes=(time.monotonic() - t0) / 60,
        machine=machine(),
    )
    r["command"] = ("python -m drills.faults " + " ".join(sys.argv[1:])).strip()
    r["settings"] = settings()
    # (the measurements first: a report that fails can be rewritten from them with --from_json)
    (root / "drill.json").write_text(json.dumps(r, indent=2, default=str))
    report = write_report(r, r["command"], r["settings"])
    print(report)
    if FLAGS.write:
        DOC.write_text(report)


if __name__ == "__main__":
    app.run(main)
