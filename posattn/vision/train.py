"""Training and evaluation of the image classifiers of JSL22's image experiments, one code path from one
CPU to a pod slice.

Reads top to bottom like big_vision's train.py: resolve the config once (`setup.resolve`), devices and
mesh, check it against the run the workdir records, model and sharded initial state, the jitted update
step, checkpoint restore, the loop (log, evaluate, checkpoint), the summary. The train state is a plain
dict {"step", "params", "batch_stats", "opt_state"} (`state`) on the ("data", "fsdp", "model") mesh of
`config.mesh`, each leaf sharded as `sharding.state_shardings` says (replicated on the default mesh);
batches are split along data x fsdp, read by the input pipeline's worker processes where a split decodes
(`data.pipeline`) and put on the devices ahead of the step (`data.device_prefetch`); the log lines time
the loop with `chrono.Chrono`. Augmentation runs inside the jitted step, on device, with a key folded
from the step (the Inception crop, where configured, where the images are read, from (seed, step, row)), so the update of step t is a pure function of (config, state at t): with the data
pipeline's (seed, step) determinism a resumed run ends with bitwise the same parameters as an
uninterrupted one.

Faults (docs/reliability.md): the workdir is checked (writable, room for one checkpoint) before any
work; everything a resume needs (its config, its metrics record, a checkpoint that restores) is checked
before any file of the workdir changes, so a refused command leaves it as it was; a restart skips step
folders orbax never committed and falls back from a checkpoint that does not restore to the newest one
that does (`checkpoint.latest_good`), setting both aside; a launch that stopped before its first
checkpoint is set aside for another config (`resume.set_aside_failed_launch`); a preemption notice
(SIGTERM) or Ctrl-C (SIGINT) saves at the current step and stops with `signals.RunStopped` (exit
status 143 or 130 in the binary); a save that fails (full or read-only disk) stops the run at once with
`saving.SaveFailed`; a non-finite loss stops with `NonFiniteLoss` before any checkpoint holds it.
The checkpoint manager is closed on every way out, so no save is left running into the interpreter's
shutdown.
"""

import contextlib
import json
import math
import time

import jax
import numpy as np

from posattn import compile_options, io, progress, signals
from posattn import workdir as workdir_lib
from posattn.errors import ConfigError
from posattn.mesh import batch_sharding, global_batch, replicate_from_host, replicated
from posattn.metric_log import MetricLog, paired_test_metrics
from posattn.vision import (
    checkpoint,
    chrono,
    device_memory,
    evaluation,
    models,
    optim,
    resume,
    runs,
    saving,
    sharding,
    utilisation,
    warm_start,
)
from posattn.vision import config as config_lib
from posattn.vision import train_step as train_step_lib
from posattn.vision.data import device_prefetch
from posattn.vision.setup import resolve
from posattn.vision.state import init_state


class NonFiniteLoss(ConfigError):
    """The loss (or gradient norm) became NaN or inf: the run stops; its recipe needs changing."""


# ---------------------------------------------------------------------------------- outputs


def _check_finite(pending: list, saver: saving.Saver, workdir) -> list:
    """Pull the per-step metrics since the last check; stop at the first non-finite loss or update.

    Runs before every checkpoint, so a checkpoint never holds a broken state. On a stop, the save in
    flight completes first, and the message says where the run can resume from.
    """
    pulled = jax.device_get(pending)
    for step, m in pulled:
        if not all(math.isfinite(m[k]) for k in ("loss", "grad_norm", "param_norm")):
            saver.wait(step)
            last = checkpoint.survey(saver.mngr.directory).latest
            hint = (
                "no checkpoint was saved before it"
                if last is None
                else f"the last good checkpoint (step {last}) stays in {workdir}/checkpoints: rerun the "
                "same command with a lower --config.optimizer.lr (or a lower non-zero "
                "--config.optimizer.grad_clip) to resume from it"
            )
            raise NonFiniteLoss(
                f"non-finite loss {m['loss']} (gradient norm {m['grad_norm']}, parameter "
                f"norm {m['param_norm']}) at step {step}; the run stopped there, {hint}"
            )
    return [m for _, m in pulled]


def _mean(window: list) -> dict:
    return {k: float(np.mean([m[k] for m in window])) for k in window[0]}


# ---------------------------------------------------------------------------------- the run


def train(config, workdir: str, *, devices=None, dataset=None) -> tuple[dict, dict]:
    """Train and evaluate as `config` says, in (and resuming from) `workdir`: (final state, summary).

    `dataset` (e.g. `posattn.vision.data.arrays.from_arrays(...)`, named by config.dataset) replaces the
    lookup of config.dataset by name. A fresh run with config.init_from starts from that finished run's
    parameters (`warm_start.transfer`); a checkpoint of `workdir` wins over it.

    A workdir that already records a run is resumed only with the same config, up to the fields
    `resume.RESUMABLE` lets change, and a total_steps that reaches its checkpoint's step; anything else
    raises ConfigError before any file of the workdir changes (`resume.check_resume`). A workdir whose
    run stopped before its first checkpoint takes another config: what that launch left is set aside
    in WORKDIR/failed-<time>/.

    `devices` (default: all devices of all processes) lets a test run the same code on a sub-mesh.
    Over several processes, `posattn.mesh.initialize_distributed` must have run first, before any
    computation (the binary calls it; docs/distributed.md).
    """
    config_lib.check_schema(config)  # (before config.mesh is read)
    mesh = sharding.make_mesh(config.mesh, devices)
    sharding.check_model(config.model.name, mesh)
    setup = resolve(config, sharding.batch_shards(mesh), dataset)
    setup.info  # the dataset's facts (its statistics may read the training split), before any file changes
    # Model, optimizer and the abstract state (shapes only: nothing is computed yet), each leaf with its
    # sharding over the mesh (`sharding.state_shardings`).
    repl, batch_shard = replicated(mesh), batch_sharding(mesh)
    # The seed and optimiser numbers, replicated arrays that every process holds (traced by the programs).
    hyper = replicate_from_host(train_step_lib.step_hyperparameters(config), mesh)
    tx = optim.make_optimizer(config.optimizer, hyper)
    init = lambda seed: init_state(setup.model, setup.image_shape, seed, tx)
    shapes = jax.eval_shape(init, hyper["seed"])
    state_sh = sharding.state_shardings(shapes, mesh)
    init_fn = jax.jit(
        init,
        out_shardings=state_sh,
        compiler_options=compile_options.run_once(mesh.devices.flat[0].platform),
    )
    abstract_state = checkpoint.abstract_like(shapes, state_sh)
    state_bytes = sharding.bytes_per_device(abstract_state)
    # A pre-trained start (config.init_from), checked against this model before any file changes.
    pretrained = warm_start.load(config.init_from) if config.init_from else None
    if pretrained is not None:
        jax.eval_shape(warm_start.transfer, abstract_state["params"], pretrained)
    num_params = models.param_count(abstract_state["params"])
    # Before any work: a workdir that cannot take a checkpoint stops the run now, not at its first save.
    saves = 1 + (config.total_steps // config.checkpoint_every if config.checkpoint_every else 0)
    copies = workdir_lib.checkpoint_copies(
        config.keep_checkpoints, saves, workdir_lib.saved_checkpoints(workdir)
    )
    need = "one checkpoint" if copies == 1 else f"{copies} checkpoints (those kept and the next)"
    workdir = workdir_lib.check_writable(
        workdir, copies * workdir_lib.checkpoint_bytes(abstract_state), need
    )
    # From here a stop request (SIGTERM, SIGINT) is recorded and honoured at the next step, with a save;
    # the caller's handlers are restored on the way out. The checkpoint manager and the metrics log are
    # closed on every way out (`closing`), so no save runs on into the interpreter's shutdown.
    with (
        signals.Watch() as watcher,
        saving.orbax_errors_reported(),
        device_memory.out_of_memory_stops(config, mesh, workdir),
        contextlib.ExitStack() as closing,
    ):
        # On every process, so all stop together; nothing in the workdir has changed if it raises.
        plan = resume.preflight(config, workdir, abstract_state)
        if plan["failed_launch"]:
            where = resume.set_aside_failed_launch(workdir)
            progress.say(
                f"{workdir} held a launch of another config that stopped before its first checkpoint: its "
                f"files are set aside in {where}; starting afresh"
            )
        skipped = checkpoint.set_aside(checkpoint.checkpoints_dir(workdir), plan["skipped"])
        mngr = checkpoint.manager(
            str(workdir), keep=config.keep_checkpoints
        )  # removes orbax's temporaries
        closing.callback(saving.close, mngr)
        runs.write_run_record(workdir, config, setup)
        if io.is_writer():  # a summary of an earlier, shorter run of this workdir no longer holds
            (workdir / "summary.json").unlink(missing_ok=True)

        state = plan["state"]
        resumed_from = None if state is None else int(jax.device_get(state["step"]))
        for bad in skipped:
            progress.say(
                f"checkpoint {bad.step} {bad.reason}: moved to {bad.moved_to}, "
                + (
                    "starting from step 0"
                    if resumed_from is None
                    else f"resuming from step {resumed_from}"
                )
            )
        if plan["temporary"]:
            progress.say(
                f"removed {', '.join(plan['temporary'])} from {mngr.directory}: orbax's unfinished saves, "
                "left by a run stopped while saving"
            )
        if state is None:
            state = init_fn(hyper["seed"])
            if (
                pretrained is not None
            ):  # a fresh start from the pre-trained parameters (Adam's moments are 0 alike)
                state["params"] = jax.jit(warm_start.transfer, out_shardings=state_sh["params"])(
                    state["params"], pretrained
                )
        start = int(jax.device_get(state["step"]))
        # metrics.jsonl and TensorBoard, one schema with the theory regime; the records of steps after
        # `start` (run again now) are dropped
        log = MetricLog(workdir, start_step=start)
        closing.callback(log.close)
        model_name = config.model.name
        if model_name == "vit":
            model_name = f"ViT {config.model.variant} ({config.model.attention} attention)"
        resumed = "" if resumed_from is None else f"; resumed from step {start}"
        if pretrained is not None and resumed_from is None:
            resumed += f"; started from the parameters of {config.init_from}"
        resumed += (
            f"; changed from its config.json: {', '.join(plan['changes'])}"
            if plan["changes"]
            else ""
        )
        progress.say(
            f"{config.dataset}: {model_name}, {num_params:,} parameters, {mesh.devices.size} devices "
            f"(mesh {' x '.join(f'{k} {v}' for k, v in mesh.shape.items())}), "
            f"{jax.process_count()} processes, train state {state_bytes / 2**20:,.1f} MiB per device"
            f"{resumed}"
        )
        progress.say(
            f"augmentation: {setup.augment_note}"
        )  # (the "auto" defaults resolved: setup.resolve_augment)
        workers = setup.input_workers
        progress.say(
            f"input: {workers or 'no'} worker process{'es' if workers != 1 else ''}"
            f"{'' if workers else ' (read in the trainer)'}, batches put on the devices "
            f"{config.input.prefetch} steps ahead"
        )

        train_step = jax.jit(
            train_step_lib.make_train_step(setup),
            in_shardings=(state_sh, batch_shard, repl),
            out_shardings=(state_sh, repl),
            donate_argnums=(0,),
        )
        eval_step = jax.jit(
            evaluation.make_eval_step(setup),
            in_shardings=(state_sh, batch_shard, repl),
            out_shardings=repl,
            donate_argnums=(2,),
        )

        saver = saving.Saver(mngr, workdir)
        total, batch_size = config.total_steps, config.global_batch_size
        # read by the pipeline's workers and put on the devices `config.input.prefetch` steps ahead
        batches = device_prefetch.prefetch(
            setup.train_batches(start_step=start),
            lambda local: global_batch(local, mesh),
            config.input.prefetch,
        )
        closing.callback(batches.close)
        pending, window, train_metrics, evals = [], [], {}, {}
        # Throughput counts the steps after the first (which compiles) and excludes evals and checkpoints.
        clock = chrono.Chrono(
            total_steps=total,
            global_batch_size=batch_size,
            step_flops=utilisation.training_step_flops(setup.model, batch_size),
            devices=mesh.devices.flat,
            dtype=setup.model.dtype,
        )
        profile = chrono.Profile(
            chrono.profile_window(config.profile_steps, total), workdir / "profile"
        )
        closing.callback(profile.close)
        for step in range(start + 1, total + 1):
            with clock.feeding():
                batch = next(batches)
            profile.before(step)
            state, metrics = train_step(state, batch, hyper)
            profile.after(step, metrics)
            pending.append((step, metrics))
            if (compiled := clock.stepped(metrics)) is not None:
                progress.say(
                    f"step {step}/{total}  compiled and ran the first step in {compiled:.1f}s"
                )
            saver.poll(step)  # a save that failed stops the run now, not at the next save
            is_last = step == total
            # Polled at every step (on a pod, every host must reach the agreed step); a notice during
            # an evaluation or a save is honoured at the next step. The stop saves and skips the eval.
            stop = not is_last and watcher.reached(step, mngr)
            do_log = step % config.log_every == 0 or is_last
            do_eval = not stop and (
                is_last or (config.eval_every and step % config.eval_every == 0)
            )
            do_ckpt = (
                stop or is_last or (config.checkpoint_every and step % config.checkpoint_every == 0)
            )
            if not (do_log or do_eval or do_ckpt):
                continue
            window += _check_finite(
                pending, saver, workdir
            )  # waits for the pending steps to finish
            pending = []
            clock.pause()
            if do_log:
                train_metrics, window = _mean(window), []
                measures = clock.window(step)
                log.write(
                    {
                        "step": step,
                        **{f"train_{k}": v for k, v in train_metrics.items()},
                        **{k: v for k, v in measures.items() if k != "eta"},
                    }
                )
                progress.say(
                    f"step {step}/{total}  loss {train_metrics['loss']:.4f}  "
                    f"acc {train_metrics['accuracy']:.3f}  lr {train_metrics['lr']:.2e}  "
                    f"{chrono.line(measures)}  ETA {measures['eta']}"
                )
            if do_ckpt:
                saver.save(state, step)
            if do_eval:
                evals = evaluation.evaluate(eval_step, state, setup, mesh)
                log.write(paired_test_metrics({"step": step, **evals}))
                progress.say(f"step {step}/{total}  {evaluation.evaluation_line(evals)}")
            if stop:  # the save of `step` completes first; no summary.json: the run is unfinished
                saver.wait(step)
                log.write({"step": step, "preempted": True})
                raise watcher.stopped(step, mngr.directory)
            clock.resume()
        saver.wait(total)
        if not evals:  # nothing left to train (the checkpoint was already final): evaluate it
            evals = evaluation.evaluate(eval_step, state, setup, mesh)
        summary = run_summary(
            evals,
            train_metrics,
            setup,
            mesh,
            clock,
            steps=int(jax.device_get(state["step"])),
            start=start,
            resumed_from=resumed_from,
            moved_aside=skipped,
            num_params=num_params,
            state_bytes=state_bytes,
        )
        io.write_json(workdir / "summary.json", summary)
        progress.say("summary: " + json.dumps(summary, sort_keys=True))
        return state, summary


def run_summary(
    evals: dict,
    train_metrics: dict,
    setup,
    mesh,
    clock: chrono.Chrono,
    *,
    steps: int,
    start: int,
    resumed_from,
    moved_aside,
    num_params: int,
    state_bytes: int,
) -> dict:
    """summary.json of a run (docs/metrics.md): its evaluation, last training metrics, steps, the
    checkpoints it moved aside, time, throughput and MFU (`clock`'s: the steps after the first, which
    compiles), the augmentation as applied, the mesh and the train state's bytes per device. One writer
    for a run and for each seed of a vmapped one."""
    timed_steps = max(steps - start - 1, 0)
    return {
        **evals,
        "train_loss": train_metrics.get("loss"),
        "train_accuracy": train_metrics.get("accuracy"),
        "steps": steps,
        "steps_this_run": steps - start,
        "resumed_from_step": resumed_from,
        "checkpoints_moved_aside": [vars(bad) for bad in moved_aside],
        "seconds": time.perf_counter() - clock.t_start,
        "images_per_second": (
            timed_steps * setup.config.global_batch_size / clock.timed_seconds
            if timed_steps
            else None
        ),
        "mfu": clock.run_mfu(timed_steps),
        "param_count": num_params,
        "augmentation": setup.augment_note,  # as applied (run.json records the settings)
        "devices": mesh.devices.size,
        "mesh": dict(mesh.shape),
        "state_bytes_per_device": state_bytes,
        "processes": jax.process_count(),
    }


def train_and_evaluate(config, workdir: str, *, dataset=None) -> dict:
    """Run `config` in `workdir` (resuming from its latest checkpoint if any) and return the summary;
    `dataset` as in `train`."""
    return train(config, workdir, dataset=dataset)[1]
