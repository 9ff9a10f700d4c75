"""docs/reliability.md from the results of the fault drill (`benchmarks.faults`)."""
from benchmarks import bad_inputs

def _chain_table(events: list[dict], sig_name: str) -> str:
    rows = [f"| launch | on disk | resumed from | ended by | moment | saving at the signal | exit | last step "
            "printed | checkpoints after | stderr |", "|---|---|---|---|---|---|---|---|---|---|"]
    for e in events:
        ended = sig_name if "mode" in e else "(ran to the end)"
        rows.append(f"| {e['launch']} | {e['checkpoint_on_disk']} | {e['resumed_from']} | {ended} | "
                    f"{e.get('mode', '')} | {e.get('saving_at_signal', '')} | {e['status']} | "
                    f"{e['last_step_printed']} | {e['checkpoints_after']} | `{e['stderr_last'][:110]}` |")
    return "\n".join(rows)


def _chain_figures(result: dict, count: int) -> str:
    events = result["events"]
    restarts = events[1:]
    ok = sum(e["resumed_ok"] for e in restarts)
    # a signal sent after its launch had already finished (the chain reached its last step early) tests nothing
    landed = sum("mode" in e and not e.get("finished_first") for e in events)
    return (f"{count} signals, {landed} of them to a running run; {ok}/{len(restarts)} restarts resumed from "
            f"the newest checkpoint on disk; "
            f"final state bitwise equal to the uninterrupted run: {result['bitwise'][0]} "
            f"({result['bitwise'][1]} arrays: parameters, Adam moments, step)")


HOW = """## How the trainer survives each fault

- **Preemption notice (SIGTERM)**: `posattn/vision/preemption.py`. On one process a handler records the
  signal; the loop polls it at every step, saves a checkpoint at that step, appends
  `{"step": S, "preempted": true}` to metrics.jsonl and stops with `Preempted`: one line on stderr
  (`stopped: preemption notice (SIGTERM) at step S: saved checkpoint S in ...; rerun the same command to
  resume from step S`) and **exit status 143** (= 128 + SIGTERM, what a shell reports for a process SIGTERM
  ended), so a scheduler or a retry loop sees an unfinished run, distinct from 0 (finished) and 2 (bad
  input). No summary.json is written. A notice that arrives during an evaluation or a save is honoured at
  the next step; the evaluation of the stopping step is skipped. On a multi-process pod slice JAX's
  preemption service (started by `jax.distributed.initialize`) catches the signal and every host saves at
  the step they agree on (`CheckpointManager.reached_preemption`); no Python handler is installed there.
- **Damaged checkpoints**: `posattn/vision/checkpoint.py`. Every checkpoint carries the SHA-256 of its
  arrays in orbax's per-step custom metadata; a restore recomputes it. A restart tries the checkpoints
  newest first, says which one failed and why, moves it to `WORKDIR/checkpoints_unreadable/STEP` (kept,
  never deleted; out of orbax's way so later saves and `keep_checkpoints` do not collide with it) and
  resumes from the newest that restores; summary.json lists the moved ones. If none restores nothing is
  moved (the cause may be the code, not the files) and the run stops with one line listing each step
  (exit 2). A crash during a save leaves only orbax's temporary directory, which the next start removes.
  Checkpoints written before the digest existed restore unchecked.
- **Workdir**: `posattn/workdir.py`, `check(workdir, need_bytes)`: a real write probe (permission bits do
  not tell whether root can write or whether the disk is read-only) and, on local disks, free space for one
  checkpoint (the abstract state's bytes plus 10%), before any data is read or anything compiled.
- **A workdir belongs to one run (every binary)**: `posattn/ownership.py`. Once its flags are checked, a
  binary claims its workdir: `workdir.json` records the binary, its config (and the config's
  fingerprint), a status (`running`, `complete`, `interrupted`, `failed`), the pid and the command, and an
  advisory `flock` on `workdir.lock` is held for the whole run. Refused with one line, exit 2 and nothing
  touched: an empty or blank `--workdir`; a workdir that holds another binary's run or a run of another
  config (a `failed` run may be replaced by a corrected config of the same binary; train_images lets the
  fields of `resume.RESUMABLE` change); a directory of other files; a damaged config.json; a workdir
  another process holds (the line names its pid). The OS drops the lock when the process dies, SIGKILL
  included, so no lock is ever stale; a gs:// workdir is not locked (a warning says so). The same binary
  with the same config continues: train_images and the sweeps resume, the others run again from the
  start. A run that ends before it writes anything leaves its workdir as it found it.
- **SIGINT and SIGTERM (every binary)**: once a binary holds its workdir, either signal ends it at the next
  Python instruction (a compiled call finishes first) with one line (`stopped: SIGINT: the run in DIR did
  not finish (workdir.json says interrupted); rerun the same command to ...`), exit 130 or 143, and
  workdir.json saying `interrupted`; the process ends at once, since a KeyboardInterrupt raised into JAX
  was swallowed by its garbage-collection callback or crashed the interpreter's shutdown. The image
  trainer keeps its own SIGTERM handler while it trains (save, then stop).
- **NaN**: image regime: the loss, gradient norm and parameter norm are checked before every log and
  checkpoint (`train.NonFiniteLoss`, exit 2), so no checkpoint holds a broken state; theory regime:
  `posattn.theory.gd.fit`/`fit_seeds` raise `gd.NonFiniteLoss` (exit 2) naming the first GD step with a
  non-finite loss (the chunk of `eval_every` steps that produced it is replayed one step at a time).

Limits: a SIGKILL loses the steps since the last checkpoint (`checkpoint_every`); a SIGTERM before a
binary holds its workdir (imports, config) ends the process at once (nothing is lost: nothing was
written); the pod path of the preemption notice is JAX's service and was not exercised here (no pod);
`theory.gd.fit_grid` (one compiled call for a sweep) has no per-chunk NaN stop; the theory binaries do not
resume: an interrupted run is run again from the start.
"""


def write_report(r: dict, command: str, s: dict) -> str:
    """docs/reliability.md from the drill's results `r`, its command and its settings `s` (its flags)."""
    kills, terms = r["kill"], r["term"]
    term_events = [e for e in terms["events"] if "mode" in e and not e.get("finished_first")]
    late = sum(1 for e in terms["events"] if e.get("finished_first"))
    term_ok = sum(e["status"] == 143 and e["stderr_lines"] == 1 and e["stderr_last"].startswith("stopped:")
                  for e in term_events)
    bad = r["bad_inputs"]
    lines = [
        "# Reliability: the fault drill (issue 18)",
        "",
        f"Written by `{command}` on {r['date']} ({r['minutes']:.1f} min), {r['machine']}.",
        "",
        f"The run under test: `tpu_configs/digits.py` (ViT XS/2, batch 128) for {s['steps']} steps, a checkpoint "
        f"every {s['checkpoint_every']} steps (the last 3 kept), an evaluation every {s['eval_every']}; "
        "each launch is `python -m experiments.train_images` in a subprocess; all launches share one "
        "compilation cache. How the trainer survives each fault: `posattn/vision/preemption.py` (SIGTERM), "
        "`posattn/vision/checkpoint.py` (digests, fallback), `posattn/workdir.py` (the workdir check); "
        "`tests/vision/test_faults.py` checks each in seconds.",
        "",
        "## Summary",
        "",
        f"- SIGKILL: {_chain_figures(kills, s['kills'])}.",
        f"- SIGTERM (preemption notice): {term_ok}/{len(term_events)} signals that reached a running run saved at "
        f"the current step and exited 143 with one line"
        + (f" ({late} arrived after the run had finished: each preemption keeps its progress, so the chain "
           f"reached step {s['steps']} early)" if late else "") + f"; {_chain_figures(terms, s['terms'])}.",
        "- Damaged latest checkpoint: " + "; ".join(
            f"{d['damage']}: exit {d['status']}, resumed from {d['resumed_from']}, moved aside {d['moved_aside']}"
            + (f", bitwise equal {d['bitwise_equal']}" if "bitwise_equal" in d else "") for d in r["damaged"]) + ".",
        "- Unwritable workdir: " + "; ".join(
            f"{w['what']}: exit {w['status']} after {w['seconds']:.0f} s, "
            f"{'one line' if w['one_line'] else 'NOT one line'}, left {w['left'] or 'nothing'}"
            for w in r["workdir"]) + ".",
        bad_inputs.summary_line(bad),
        "- NaN: " + "; ".join(
            f"{n['what']}: stopped at step {n['stopped_at']}, checkpoints left {n['checkpoints_left']}, "
            f"summary written: {n['summary_written']}" for n in r["nan"]) + ".",
        "",
        HOW,
        "## 1. SIGKILL at random moments, each followed by a restart",
        "",
        "'on disk': the newest complete checkpoint when the launch started; 'saving at the signal': an orbax "
        "temporary directory existed when the signal was sent (a save in progress).",
        "",
        _chain_table(kills["events"], "SIGKILL"),
        "",
        "## 2. SIGTERM (preemption notice), each followed by a restart",
        "",
        _chain_table(terms["events"], "SIGTERM"),
        "",
        "## 3. Damaged checkpoints",
        "",
        "A copy of the finished uninterrupted run, its latest checkpoint damaged (`damage_checkpoint`: the "
        "largest array file cut in half, or one bit flipped in the largest array, written back through "
        "orbax), then the same command again. "
        "Orbax alone restores the bit-flipped checkpoint without complaint (with wrong values); the SHA-256 "
        "each checkpoint carries catches it.",
        "",
        "| damage | exit | resumed from | what the run said | moved aside to checkpoints_unreadable/ | "
        "checkpoints after | final state bitwise equal |",
        "|---|---|---|---|---|---|---|",
        *[f"| {d['damage']} | {d['status']} | {d['resumed_from']} | `{' / '.join(d['said'] + d['stderr'])[:300]}` | "
          f"{d['moved_aside']} | {d['checkpoints_after']} | {d.get('bitwise_equal', 'n/a')} |" for d in r["damaged"]],
        "",
        "## 4. Workdirs that cannot take a checkpoint",
        "",
        "| workdir | exit | one line | seconds to exit | files left | message |",
        "|---|---|---|---|---|---|",
        *[f"| {w['what']} | {w['status']} | {w['one_line']} | {w['seconds']:.1f} | {w['left'] or 'none'} | "
          f"`{w['message']}` |" for w in r["workdir"]],
        "",
        f"## {bad_inputs.SECTION}",
        "",
        bad_inputs.section(bad, command),
        "",
        "## 6. NaN at a chosen step",
        "",
        f"The in-process injections set the parameters to NaN at step {s['nan_step']} (`nan_at_step`, "
        "`theory_nan_at_step`); the binaries are run with a learning rate that diverges. 'exit': the binary's "
        "status (in-process runs raise the exception whose message is shown).",
        "",
        "| injection | stopped at step | exit | one line | checkpoints left | files left | summary.json written | "
        "message |",
        "|---|---|---|---|---|---|---|---|",
        *[f"| {n['what']} | {n['stopped_at']} | {n.get('status', 'raised')} | {n.get('one_line', 'n/a')} | "
          f"{n['checkpoints_left']} | {n.get('files_left', 'n/a')} | {n['summary_written']} | "
          f"`{n['message'][:300]}` |" for n in r["nan"]],
    ]
    if r.get("notes"):  # hand-written context kept in drill.json (e.g. an earlier run's figures)
        lines += ["", "## Notes", "", "\n\n".join(r["notes"])]
    return "\n".join(lines) + "\n"
