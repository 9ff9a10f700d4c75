"""Bad flags and configs for every binary of `experiments/` (issue 18): exit status, one line, and what
is left in the workdir.

Each case runs the binary in a subprocess on a workdir path that does not exist yet (or on a copy of a
finished run, for the refused-resume cases) and records: the exit status (2 expected), whether stderr
is exactly one line, and which files the run created or changed in its workdir (none expected: a
refused command must not leave a config.json, summary or checkpoint that looks like a run).
"""
import dataclasses
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DIGITS = "--config=tpu_configs/digits.py"


@dataclasses.dataclass(frozen=True)
class Case:
    binary: str          # module under experiments/
    args: tuple          # flags; "{w}" is replaced by the case's workdir
    what: str            # what is wrong, for the table
    on_run: bool = False  # the workdir starts as a copy of a finished digits run


def cases() -> list[Case]:
    """The bad inputs, for each binary present in experiments/ (ones added later join when listed)."""
    out = [
        Case("train_images", (), "no flags at all"),
        Case("train_images", ("--config=tpu_configs/nope.py", "--workdir={w}"), "config file missing"),
        Case("train_images", (f"{DIGITS}:bogus", "--workdir={w}"), "unknown config argument"),
        Case("train_images", (DIGITS, "--config.model.attention=posit", "--workdir={w}"), "unknown attention"),
        Case("train_images", (DIGITS, "--config.model.variant=XXL/3", "--workdir={w}"), "unknown ViT variant"),
        Case("train_images", (DIGITS, "--config.global_batch_size=0", "--workdir={w}"), "batch size 0"),
        Case("train_images", (DIGITS, "--config.total_steps=-5", "--workdir={w}"), "negative step count"),
        Case("train_images", (DIGITS, "--config.no_such_field=1", "--workdir={w}"), "unknown config field"),
        Case("train_images", (DIGITS, "--config.optimizer.lr=fast", "--workdir={w}"), "lr not a number"),
        Case("train_images", (DIGITS, "--workdir={w}", "extra"), "stray positional argument"),
        Case("train_images", (DIGITS, "--config.model.attention=vanilla", "--workdir={w}"),
             "resume a run with another model", on_run=True),
        Case("train_images", (DIGITS, "--config.total_steps=10", "--workdir={w}"),
             "total_steps below the run's checkpoint", on_run=True),
        Case("theory", ("--workdir={w}", "--config=posattn/theory/presets.py:nope"), "unknown preset"),
        Case("theory", ("--workdir={w}", "--config.gd.steps=0"), "zero GD steps"),
        Case("theory", ("--workdir={w}", "--config.theory.D=7", "--config.theory.C=4"),
             "patches not a multiple of the set size"),
        Case("theory", ("--workdir={w}", "--config.gd.risk=nope"), "unknown risk"),
        Case("theory", ("--workdir={w}", "--config.theory.q=1.5"), "probability q above 1"),
        Case("theory", ("--workdir={w}", "--steps=100"), "a flag of the former interface"),
        Case("theory", ("--config.seed=1",), "--workdir missing"),
        Case("reproduce", ("--seed=abc", "--workdir={w}"), "seed not an integer"),
        Case("reproduce", (), "--workdir missing"),
        Case("permuted", ("--block_sizes=2,x", "--workdir={w}"), "block sizes not integers"),
        Case("permuted", ("--models=vit,transformer", "--workdir={w}"), "unknown model"),
        Case("permuted", ("--dataset=mnist", "--workdir={w}"), "unknown dataset"),
        Case("posemb_similarity", ("--workdir={w}",), "workdir holds no run"),
        Case("posemb_similarity", ("--workdir={w}", "--patches=a,b"), "patches not integers", on_run=True),
        Case("compare_attention", ("--seeds=0", "--workdir={w}"), "zero seeds"),
        Case("compare_attention", ("--config=missing.py", "--workdir={w}"), "config file missing"),
        Case("shallow_vit", ("--workdir={w}", "--no_such_flag=1"), "unknown flag"),
        Case("shallow_vit", ("--workdir={w}", "--seeds=0"), "zero seeds"),
        Case("shallow_vit", ("--workdir={w}", "--Ns=5,x"), "sample sizes not numbers"),
        Case("phase_three", ("--workdir={w}", "--q=0.4,abc"), "q not a probability"),
        Case("how_vits_work", ("--workdir={w}", "--no_such_flag=1"), "unknown flag"),
    ]
    present = {p.stem for p in (ROOT / "experiments").glob("*.py")}
    return [c for c in out if c.binary in present]


def _snapshot(path: pathlib.Path) -> dict:
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def run_case(case: Case, workdir: pathlib.Path, finished_run: pathlib.Path | None, env: dict) -> dict:
    """Run one case; {binary, what, command, status, one_line, message, left} (left: files created or
    changed in the workdir)."""
    if case.on_run:
        shutil.copytree(finished_run, workdir)
    before = _snapshot(workdir)
    args = [a.format(w=workdir) for a in case.args]
    done = subprocess.run([sys.executable, "-m", f"experiments.{case.binary}", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    after = _snapshot(workdir)
    left = sorted(k for k, v in after.items() if before.get(k) != v)
    lines = done.stderr.strip().splitlines()
    return {"binary": case.binary, "what": case.what, "command": " ".join(args), "status": done.returncode,
            "one_line": len(lines) == 1, "message": lines[-1] if lines else "",
            "left": left}


def run_all(root: pathlib.Path, finished_run: pathlib.Path, env: dict, say=print) -> list[dict]:
    """Every case of `cases()`, each in root/NN."""
    results = []
    for i, case in enumerate(cases()):
        r = run_case(case, root / f"{i:02d}", finished_run, env)
        say(f"  bad input {i + 1:2d} {case.binary}: {case.what}: exit {r['status']}, "
            f"{'one line' if r['one_line'] else 'NOT one line'}, left {r['left'] or 'nothing'}")
        results.append(r)
    return results


def table(results: list[dict]) -> str:
    rows = ["| # | binary | bad input | exit | one line | files left | message |", "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(results, 1):
        message = r["message"].replace("|", "\\|")
        message = message if len(message) <= 140 else message[:137] + "..."
        rows.append(f"| {i} | {r['binary']} | {r['what']} | {r['status']} | {'yes' if r['one_line'] else 'no'} "
                    f"| {', '.join(r['left']) or 'none'} | `{message}` |")
    return "\n".join(rows)


def environment(cache_dir: str) -> dict:
    """The subprocesses' environment: this tree importable, CPU, a shared compilation cache."""
    return dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=cache_dir,
                JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
