"""docs/reliability.md from the results of the fault drill (`drills.faults`)."""

import textwrap

from drills import bad_inputs, trainer_faults


def _chain_table(events: list[dict], sig_name: str) -> str:
    rows = [
        "| launch | on disk | resumed from | ended by | moment | saving at the signal | exit | last step "
        "printed | checkpoints after | stderr |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in events:
        ended = sig_name if "mode" in e else "(ran to the end)"
        rows.append(
            f"| {e['launch']} | {e['checkpoint_on_disk']} | {e['resumed_from']} | {ended} | "
            f"{e.get('mode', '')} | {e.get('saving_at_signal', '')} | {e['status']} | "
            f"{e['last_step_printed']} | {e['checkpoints_after']} | `{e['stderr_last'][:110]}` |"
        )
    return "\n".join(rows)


def _chain_figures(result: dict, count: int) -> str:
    events = result["events"]
    restarts = events[1:]
    ok = sum(e["resumed_ok"] for e in restarts)
    # a signal sent after its launch had already finished (the chain reached its last step early) tests nothing
    landed = sum("mode" in e and not e.get("finished_first") for e in events)
    return (
        f"{count} signals, {landed} of them to a running run; {ok}/{len(restarts)} restarts resumed from "
        f"the newest checkpoint on disk; "
        f"final state bitwise equal to the uninterrupted run: {result['bitwise'][0]} "
        f"({result['bitwise'][1]} arrays: parameters, Adam moments, step)"
    )


HOW = """## How the trainer survives each fault

- **Preemption notice (SIGTERM) and Ctrl-C (SIGINT)**: `posattn/signals.py`, `Watch`. On one process a
  handler records the signal; the loop polls it at every step, saves a checkpoint at that step, appends
  `{"step": S, "preempted": true}` to metrics.jsonl and stops with `RunStopped`: one line on stderr
  (`stopped: preemption notice (SIGTERM) at step S: saved checkpoint S in ...; rerun the same command to
  resume from step S`, or `stopped: interrupted (SIGINT) at step S: ...`) and **exit status 143**
  (SIGTERM) or **130** (SIGINT), 128 + the signal, what a shell reports for a process the signal ended,
  so a scheduler or a retry loop sees an unfinished run, distinct from 0 (finished) and 2 (bad input).
  No summary.json is written. A signal that arrives during an evaluation or a save is honoured at the
  next step; the evaluation of the stopping step is skipped. On a multi-process pod slice JAX's
  preemption service (started by `jax.distributed.initialize`) catches SIGTERM and every host saves at
  the step they agree on (`CheckpointManager.reached_preemption`); no Python handler is installed there.
- **Step folders that are not checkpoints**: `posattn/vision/checkpoint.py`, `survey`. A folder counts as
  a checkpoint only once orbax committed it (the commit time orbax writes last into the step's
  `_CHECKPOINT_METADATA`); an empty folder, one a save left unfinished, or orbax's temporary folder is
  never tried (orbax decides how to read every step from the first one it opens: one empty folder made
  every good step unreadable). A restart moves such folders to `WORKDIR/checkpoints_unreadable/STEP`
  and says so; orbax's temporaries of an interrupted save are removed (with a line saying which).
- **Damaged checkpoints**: `checkpoint.latest_good`. Every checkpoint carries checksums of its arrays
  (`integrity.checksums`, computed on the devices, the same on any mesh) in orbax's per-step custom
  metadata; a restore recomputes them on the arrays it placed (a checkpoint saved before them, its
  SHA-256 of the whole host state). A restart tries the committed checkpoints newest first, says
  which one failed and why, moves it to `checkpoints_unreadable/STEP` (kept, never deleted; out of
  orbax's way so later saves and `keep_checkpoints` do not collide with it)
  and resumes from the newest that restores; summary.json lists the moved ones. If none restores nothing
  is moved (the cause may be the code, not the files) and the run stops with one line listing each step
  (exit 2), advising the code that saved them or a new workdir, never to move them away. Checkpoints
  written before the digest existed restore unchecked.
- **A resume checks everything first**: `posattn/vision/resume.py`, `preflight`: the workdir's
  config.json against the command's config, metrics.jsonl (a line that does not parse before the last
  is refused in one line naming it: only the last line can be an append cut short by a kill, which is
  left out; anything else was written or altered by something else, and dropping records silently
  would publish curves with holes), and the checkpoint fallback, all before any file changes; a refused
  command leaves the workdir byte for byte as it was.
- **A failed first launch**: `posattn/vision/resume.py`. A workdir whose run stopped before its first
  checkpoint (out of memory, a diverged first step) trained nothing a resume could continue: a command
  with another config moves that launch's files to `WORKDIR/failed-<launch time>/` (kept, not deleted),
  says so and starts afresh. Out of memory itself is one line (`train.OutOfMemory`, exit 2) naming the
  batch sizes; non-finite optimiser numbers are refused by the validation before anything is written.
- **Saves that fail**: `posattn/vision/saving.py`. Orbax writes a checkpoint in background threads
  while the next steps compute; `Saver` asks orbax at every step whether the save finished, and counts
  a save as done only when its folder is committed on disk. A failed save (a full disk: ENOSPC; a disk
  turned read-only: EROFS) stops the run at the first step that learns of it, with one line that names
  the errno, the last complete checkpoint and what to do (free space, or make the workdir writable, then
  rerun the same command); orbax's own tracebacks of it (one per thread) are left out unless
  `--verbosity` is given. The checkpoint manager is closed on every way out of a run, so no save runs on
  into the interpreter's shutdown.
- **Workdir**: `posattn/workdir.py`, `check_writable(workdir, need_bytes)`: a real write probe (permission bits do
  not tell whether root can write or whether the disk is read-only) and, on local disks, free space for one
  checkpoint (the abstract state's bytes plus 10%), before any data is read or anything compiled.
- **A workdir belongs to one run (every binary)**: `posattn/ownership.py`, `posattn/workdir_lock.py`. Once its flags are checked, a
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
  was swallowed by its garbage-collection callback or crashed the interpreter's shutdown. One handler
  (`posattn/signals.py`) serves the whole process; while the image trainer trains it records the signal
  instead (save, then stop).
- **NaN**: image regime: the loss, gradient norm and parameter norm are checked before every log and
  checkpoint (`train.NonFiniteLoss`, exit 2), so no checkpoint holds a broken state; theory regime:
  `posattn.theory.gd.fit`/`fit_seeds` raise `gd.NonFiniteLoss` (exit 2) naming the first GD step with a
  non-finite loss (the chunk of `eval_every` steps that produced it is replayed one step at a time).

Limits: a SIGKILL loses the steps since the last checkpoint (`checkpoint_every`); a SIGTERM or SIGINT
before a binary holds its workdir (imports, config) ends the process at once (nothing is lost: nothing
was written); the pod path of the preemption notice is JAX's service and was not exercised here (no
pod), and on a pod a failed save is learnt at the next save (every host must stop at the same step), not
at the next step; a save that fails in orbax's background write is learnt when that write ends, so the
steps that computed meanwhile (the overlap that makes saving asynchronous) are lost with it; the full
and read-only disks of section 7 are injected into orbax's save (`tests/vision/fault_injection.py`),
as a real one makes it fail, not mounted; `theory.grid.fit_grid` (one compiled call for a sweep) has no
per-chunk NaN stop; the theory binaries do not resume: an interrupted run is run again from the start.
"""


def write_report(r: dict, command: str, s: dict) -> str:
    """docs/reliability.md from the drill's results `r`, its command and its settings `s` (its flags)."""
    kills, terms = r["kill"], r["term"]
    term_events = [e for e in terms["events"] if "mode" in e and not e.get("finished_first")]
    late = sum(1 for e in terms["events"] if e.get("finished_first"))
    term_ok = sum(
        e["status"] == 143 and e["stderr_lines"] == 1 and e["stderr_last"].startswith("stopped:")
        for e in term_events
    )
    bad = r["bad_inputs"]
    lines = [
        "# Reliability: the fault drill (issues 18 and 31)",
        "",
        f"Written by `{command}` on {r['date']} ({r['minutes']:.1f} min), {r['machine']}.",
        "",
        f"The run under test: `tpu_configs/digits.py` (ViT XS/2, batch 128) for {s['steps']} steps, a checkpoint "
        f"every {s['checkpoint_every']} steps (the last 3 kept), an evaluation every {s['eval_every']}; "
        "each launch is `python -m posattn.experiments.train_images` in a subprocess; all launches share one "
        "compilation cache. How the trainer survives each fault: `posattn/signals.py` (SIGTERM, "
        "SIGINT), `posattn/vision/checkpoint.py` (digests, fallback, folders that are not checkpoints), "
        "`posattn/vision/resume.py` (the run a workdir holds, a failed first launch), `posattn/vision/saving.py` "
        "(failed saves), `posattn/workdir.py` (the workdir check); `tests/vision/test_faults.py` checks each in "
        "seconds.",
        "",
        "## Summary",
        "",
        f"- SIGKILL: {_chain_figures(kills, s['kills'])}.",
        f"- SIGTERM (preemption notice): {term_ok}/{len(term_events)} signals that reached a running run saved at "
        f"the current step and exited 143 with one line"
        + (
            f" ({late} arrived after the run had finished: each preemption keeps its progress, so the chain "
            f"reached step {s['steps']} early)"
            if late
            else ""
        )
        + f"; {_chain_figures(terms, s['terms'])}.",
        "- Damaged latest checkpoint: "
        + "; ".join(
            f"{d['damage']}: exit {d['status']}, resumed from {d['resumed_from']}, moved aside {d['moved_aside']}"
            + (f", bitwise equal {d['bitwise_equal']}" if "bitwise_equal" in d else "")
            for d in r["damaged"]
        )
        + ".",
        "- Unwritable workdir: "
        + "; ".join(
            f"{w['what']}: exit {w['status']} after {w['seconds']:.0f} s, "
            f"{'one line' if w['one_line'] else 'NOT one line'}, left {w['left'] or 'nothing'}"
            for w in r["workdir"]
        )
        + ".",
        *(
            [
                f"- Checkpoint, resume and storage faults (section 7): {trainer_faults.summary(r['trainer_faults'])}."
            ]
            if "trainer_faults" in r
            else []
        ),
        bad_inputs.summary_line(bad),
        "- NaN: "
        + "; ".join(
            f"{n['what']}: stopped at step {n['stopped_at']}, checkpoints left {n['checkpoints_left']}, "
            f"summary written: {n['summary_written']}"
            for n in r["nan"]
        )
        + ".",
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
        "Orbax alone restores the bit-flipped checkpoint without complaint (with wrong values); the checksums "
        "each checkpoint carries catch it.",
        "",
        "| damage | exit | resumed from | what the run said | moved aside to checkpoints_unreadable/ | "
        "checkpoints after | final state bitwise equal |",
        "|---|---|---|---|---|---|---|",
        *[
            f"| {d['damage']} | {d['status']} | {d['resumed_from']} | `{' / '.join(d['said'] + d['stderr'])[:300]}` | "
            f"{d['moved_aside']} | {d['checkpoints_after']} | {d.get('bitwise_equal', 'n/a')} |"
            for d in r["damaged"]
        ],
        "",
        "## 4. Workdirs that cannot take a checkpoint",
        "",
        "| workdir | exit | one line | seconds to exit | files left | message |",
        "|---|---|---|---|---|---|",
        *[
            f"| {w['what']} | {w['status']} | {w['one_line']} | {w['seconds']:.1f} | {w['left'] or 'none'} | "
            f"`{w['message']}` |"
            for w in r["workdir"]
        ],
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
        *[
            f"| {n['what']} | {n['stopped_at']} | {n.get('status', 'raised')} | {n.get('one_line', 'n/a')} | "
            f"{n['checkpoints_left']} | {n.get('files_left', 'n/a')} | {n['summary_written']} | "
            f"`{n['message'][:300]}` |"
            for n in r["nan"]
        ],
    ]
    if "trainer_faults" in r:
        lines += [
            "",
            "## 7. Step folders that are not checkpoints, a cut metrics line, a failed first launch, "
            "SIGINT, failing saves",
            "",
            "```",
            textwrap.dedent(trainer_faults.__doc__.split("\n\n", 1)[1]).strip(),
            "```",
            "",
            "'one line, no traceback': every launch that failed printed one line on stderr (and a launch "
            "that finished, none); 'nothing lost': every committed checkpoint is still there or set "
            "aside (for a refusal: every file byte for byte), the failed launch's files are all in "
            "failed-*/, the stopped run's checkpoint is the one it resumed from; 'resumed from': the "
            "step the last launch resumed from; 'final state bitwise equal': the last launch's final "
            "state (parameters, Adam moments, step) against the uninterrupted run.",
            "",
            trainer_faults.table(r["trainer_faults"]),
        ]
    if r.get("notes"):  # hand-written context kept in drill.json (e.g. an earlier run's figures)
        lines += ["", "## Notes", "", "\n\n".join(r["notes"])]
    return "\n".join(lines) + "\n"
