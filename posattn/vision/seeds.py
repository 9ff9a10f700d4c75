"""Seeds of one image config trained together, in one vmapped program (JSL22 Figures 6 and 7 are
spreads over seeds), as `posattn.theory.gd.fit_seeds` does for the theory regime.

`train_seeds(configs, workdirs)` trains S configs that differ only in `seed`, seed s in workdirs[s],
and leaves in each workdir what a separate `posattn.vision.train.train` run of its config leaves:
config.json, run.json, metrics.jsonl, summary.json and checkpoints of that seed's state alone (no seed
axis), so each seed reads back, restores (`runs.load_run`) and resumes as a separate run. Every
seed keeps its own numbers: its initial state (made by the same program a separate run uses), its batch
order (`pipeline.train_batches` of its seed: the batch of step t is a pure function of (seed, t)), its
step keys (fold_in(key(seed), t + 1), inside the vmapped `train_step.make_train_step`), its evaluation and
its checkpoints.

Layout on the mesh: the train state carries a leading seed axis S and is replicated over "data", as a
separate run's state is; every seed's batch (S, B, ...) is split along "data" on its B axis, so the
devices share each seed's batch as they share a separate run's (the sharding that changes nothing
per seed; splitting the seed axis instead would also need S to divide by the devices).

The numbers are a separate run's to float tolerance, not bitwise: XLA compiles the batched (vmapped)
matmuls and reductions of the step in another order than the unbatched ones. Measured on digits:quick
(ViT test/2, 8 CPU devices), 3 seeds x 24 steps: 70 of the 72 per-step losses bitwise equal, the others
1.0e-7 relative apart (one float32 ulp), the test accuracies and losses equal, the parameters within
1.1e-5 absolute; tests/vision/test_seeds.py holds the losses and accuracies to rtol 1e-5, two orders
above, since the gap grows with the steps. A vmapped run resumed from its checkpoints continues bitwise
as it would have.

Refused with `NotVmapped` (a ConfigError), before any file of the workdirs changes, where one program
cannot run the seeds: their workdirs hold checkpoints of different steps, or the programs of S seeds do
not fit the devices' memory (`Footprint`, XLA's buffer assignment of the compiled programs against the
memory free). `posattn.vision.sweep.run_seeds` then trains them one after another.
"""

import contextlib
import json
import os

import jax
import numpy as np
from jax.experimental import multihost_utils

from posattn import compile_options, io, progress, run_record, signals
from posattn import workdir as workdir_lib
from posattn.errors import ConfigError
from posattn.mesh import data_mesh, global_batch, replicate_from_host, replicated
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
    seed_axis,
    sharding,
    train,
    train_step,
    utilisation,
    warm_start,
)
from posattn.vision import config as config_lib
from posattn.vision.data import pipeline
from posattn.vision.setup import resolve
from posattn.vision.state import init_state


class NotVmapped(ConfigError):
    """The seeds cannot run in one program (checkpoints of different steps, not enough memory, or a
    mesh that shards the state);
    nothing was changed: train them separately."""


def check_seed_configs(configs, workdirs) -> None:
    """ConfigError unless there is one workdir per config, the workdirs are distinct, the seeds are
    distinct and the configs agree in every field but `seed` (one program trains one model and recipe)."""
    configs, workdirs = list(configs), [os.path.realpath(str(w)) for w in workdirs]
    if not configs or len(configs) != len(workdirs):
        raise ConfigError(
            f"{len(configs)} configs and {len(workdirs)} workdirs: give one workdir per seed's "
            "config"
        )
    if len(set(workdirs)) < len(workdirs):
        raise ConfigError(f"workdirs {workdirs}: give each seed a workdir of its own")
    seeds = [c.seed for c in configs]
    if len(set(seeds)) < len(seeds):
        raise ConfigError(
            f"seeds {seeds}: a seed given twice would train the same run twice; give distinct seeds"
        )
    first = {**run_record.as_json(configs[0]), "seed": None}
    for i, c in enumerate(configs[1:], 1):
        diffs = run_record.differing_fields(first, {**run_record.as_json(c), "seed": None})
        if diffs:
            shown = "; ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in diffs.items())
            raise ConfigError(
                f"configs[{i}] differs from configs[0] in more than the seed ({shown}): seeds "
                "trained in one program share every other field; train it separately"
            )


def train_seeds(configs, workdirs, *, devices=None, dataset=None) -> list[dict]:
    """Train `configs` (the same config but for `seed`) in one vmapped program, seed s in `workdirs[s]`
    (resuming from their checkpoints); [summary of each seed], as `train.train` writes it, with
    "vmapped_seeds": S added. A summary's images_per_second counts that seed's images (the program's
    throughput is S times it).

    Each workdir is checked as `train.train` checks it (room for its checkpoints, the run it records,
    a checkpoint that restores) before any file of any of them changes. NotVmapped (nothing changed)
    where their checkpoints are at different steps, or the programs do not fit (`Footprint`);
    ConfigError where the configs differ in more than the seed (`check_seed_configs`). A non-finite
    loss of any seed stops them all (`train.NonFiniteLoss`, naming its workdir); a preemption notice
    saves every seed at the current step and stops. `devices`, `dataset` as in `train.train`.
    """
    configs, workdirs = list(configs), [str(w) for w in workdirs]
    check_seed_configs(configs, workdirs)
    config, num_seeds = configs[0], len(configs)
    mesh = data_mesh(devices)
    config_lib.check_schema(config)
    if sharding.mesh_shape(config.mesh, mesh.devices.size)[1:] != (1, 1):
        # the seed axis would need rules of its own; fsdp and model are for a state too large to copy
        raise NotVmapped(
            f"vmapped seeds run data-parallel, and mesh.fsdp={config.mesh.fsdp}, "
            f"mesh.model={config.mesh.model} shard the state: train the seeds separately"
        )
    setup = resolve(config, mesh.devices.size, dataset)
    setup.info
    repl = replicated(mesh)
    # Each seed's numbers (train.train's, for its initial state) and all of them stacked (the step's).
    host_hypers = [train_step.step_hyperparameters(c) for c in configs]
    hypers = [replicate_from_host(h, mesh) for h in host_hypers]
    hyper_S = replicate_from_host(jax.tree.map(lambda *v: np.stack(v), *host_hypers), mesh)
    tx = optim.make_optimizer(config.optimizer, hypers[0])
    # The program of a separate run's initial state (train.train's), so each seed starts from its bits.
    init_fn = jax.jit(
        lambda seed: init_state(setup.model, setup.image_shape, seed, tx),
        out_shardings=repl,
        compiler_options=compile_options.run_once(mesh.devices.flat[0].platform),
    )
    abstract_state = checkpoint.abstract_like(jax.eval_shape(init_fn, hypers[0]["seed"]), repl)
    pretrained = warm_start.load(config.init_from) if config.init_from else None
    if pretrained is not None:
        jax.eval_shape(warm_start.transfer, abstract_state["params"], pretrained)
    num_params = models.param_count(abstract_state["params"])
    state_bytes = workdir_lib.checkpoint_bytes(abstract_state)
    saves = 1 + (config.total_steps // config.checkpoint_every if config.checkpoint_every else 0)
    for i, w in enumerate(workdirs):
        copies = workdir_lib.checkpoint_copies(
            config.keep_checkpoints, saves, workdir_lib.saved_checkpoints(w)
        )
        workdirs[i] = workdir_lib.check_writable(w, copies * state_bytes, f"{copies} checkpoint(s)")
    with (
        signals.Watch() as watcher,
        saving.orbax_errors_reported(),
        device_memory.out_of_memory_stops(config, mesh, workdirs[0]),
        contextlib.ExitStack() as closing,
    ):
        plans = [resume.preflight(c, w, abstract_state) for c, w in zip(configs, workdirs)]
        starts = [
            0 if p["state"] is None else int(jax.device_get(p["state"]["step"])) for p in plans
        ]
        if len(set(starts)) > 1:
            raise NotVmapped(
                f"the seeds' checkpoints are at steps {starts} "
                f"({', '.join(map(str, workdirs))}): "
                "one program trains seeds at one step; train them separately"
            )
        start, total = starts[0], config.total_steps
        # As train.train's: the run's seconds include compiling its step. Images/s count one seed's
        # images; the FLOPs (MFU) are the program's, every seed's.
        flops = utilisation.training_step_flops(setup.model, config.global_batch_size)
        clock = chrono.Chrono(
            total_steps=total,
            global_batch_size=config.global_batch_size,
            step_flops=None if flops is None else num_seeds * flops,
            devices=mesh.devices.flat,
            dtype=setup.model.dtype,
        )
        # The programs, compiled before any file changes: their buffer sizes decide whether they fit.
        batches = [
            pipeline.train_batches(
                setup.split("train"),
                seed=c.seed,
                global_batch_size=config.global_batch_size,
                start_step=start,
            )
            for c in configs
        ]
        first = seed_axis.seed_batch([next(b) for b in batches], mesh)
        eval_first = global_batch(next(setup.eval_batches("test")), mesh)
        state_S = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((num_seeds, *x.shape), x.dtype, sharding=repl),
            abstract_state,
        )
        step_S, eval_step = seed_axis.compile_programs(
            setup, mesh, state_S, first, hyper_S, eval_first
        )
        sizes = [
            b
            for b in (
                device_memory.program_bytes(step_S),
                device_memory.program_bytes(eval_step),
            )
            if b is not None
        ]
        footprint = device_memory.Footprint(
            num_seeds,
            state_bytes,
            max(sizes) if sizes else None,
            device_memory.free_bytes(mesh.devices.flat[0]),
        )
        fits = footprint.fits
        if (
            jax.process_count() > 1
        ):  # every host takes the same path (hosts' free memory may differ)
            fits = bool(multihost_utils.broadcast_one_to_all(np.int32(fits)))
        if not fits:
            raise NotVmapped(
                f"the vmapped programs do not fit: {footprint}; train the seeds separately "
                "(or fewer at once)"
            )
        # From here files change, as in train.train, for every seed.
        mngrs, savers, logs, states, moved = [], [], [], [], []
        for c, w, plan, h in zip(configs, workdirs, plans, hypers):
            if plan["failed_launch"]:
                where = resume.set_aside_failed_launch(w)
                progress.say(
                    f"{w} held a launch of another config that stopped before its first checkpoint: "
                    f"its files are set aside in {where}; starting afresh"
                )
            moved.append(checkpoint.set_aside(checkpoint.checkpoints_dir(w), plan["skipped"]))
            for bad in moved[-1]:
                progress.say(f"checkpoint {bad.step} of {w} {bad.reason}: moved to {bad.moved_to}")
            mngr = checkpoint.manager(str(w), keep=config.keep_checkpoints)
            closing.callback(saving.close, mngr)
            runs.write_run_record(w, c, setup)
            if io.is_writer():
                (w / "summary.json").unlink(missing_ok=True)
            log = MetricLog(w, start_step=start)
            closing.callback(log.close)
            mngrs.append(mngr), savers.append(saving.Saver(mngr, w)), logs.append(log)
            state = plan["state"]
            if state is None:
                state = init_fn(h["seed"])
                if pretrained is not None:
                    transfer = jax.jit(warm_start.transfer, out_shardings=repl)
                    state["params"] = transfer(state["params"], pretrained)
            states.append(state)
        state = jax.jit(lambda *s: seed_axis.stack(s), out_shardings=repl)(*states)
        resumed_from = None if plans[0]["state"] is None else start
        changes = plans[0][
            "changes"
        ]  # the same for every seed: their configs differ only in the seed
        del states, plans
        model_name = config.model.name
        if model_name == "vit":
            model_name = f"ViT {config.model.variant} ({config.model.attention} attention)"
        progress.say(
            f"{config.dataset}: {model_name}, {num_params:,} parameters, {mesh.devices.size} devices, "
            f"{jax.process_count()} processes; vmapped: {footprint}"
            + ("" if resumed_from is None else f"; resumed from step {start}")
            + (f"; changed from its config.json: {', '.join(changes)}" if changes else "")
        )
        progress.say(f"augmentation: {setup.augment_note}")

        pending, window, train_metrics, evals = [], [], [{}] * num_seeds, []
        for step in range(start + 1, total + 1):
            with clock.feeding():
                batch = (
                    first
                    if step == start + 1
                    else seed_axis.seed_batch([next(b) for b in batches], mesh)
                )
            state, metrics = step_S(state, batch, hyper_S)
            pending.append((step, metrics))
            if (compiled := clock.stepped(metrics)) is not None:
                progress.say(
                    f"step {step}/{total}  compiled and ran the first step of {num_seeds} seeds in "
                    f"{compiled:.1f}s"
                )
            for saver in savers:
                saver.poll(step)
            is_last = step == total
            stop = not is_last and watcher.reached(step, mngrs[0])
            do_log = step % config.log_every == 0 or is_last
            do_eval = not stop and (
                is_last or (config.eval_every and step % config.eval_every == 0)
            )
            do_ckpt = (
                stop or is_last or (config.checkpoint_every and step % config.checkpoint_every == 0)
            )
            if not (do_log or do_eval or do_ckpt):
                continue
            pulled = jax.device_get(pending)  # waits for the pending steps to finish
            pending = []
            window.append(
                [
                    train._check_finite(
                        [(t, seed_axis.seed_slice(m, s)) for t, m in pulled], savers[s], workdirs[s]
                    )
                    for s in range(num_seeds)
                ]
            )
            clock.pause()
            if do_log:
                train_metrics = [
                    train._mean([m for chunk in window for m in chunk[s]]) for s in range(num_seeds)
                ]
                window = []
                measures = clock.window(step)
                for log, m in zip(logs, train_metrics):
                    log.write(
                        {
                            "step": step,
                            **{f"train_{k}": v for k, v in m.items()},
                            **{k: v for k, v in measures.items() if k != "eta"},
                        }
                    )
                losses = " ".join(f"{m['loss']:.4f}" for m in train_metrics)
                ips = measures["images_per_second"]
                measures["images_per_second"] = None if ips is None else num_seeds * ips
                progress.say(
                    f"step {step}/{total}  loss {losses}  lr {train_metrics[0]['lr']:.2e}  "
                    f"{chrono.line(measures)} ({num_seeds} seeds)  ETA {measures['eta']}"
                )
            if do_ckpt:
                host = jax.device_get(state)
                for s, saver in enumerate(savers):
                    saver.save(seed_axis.seed_slice(host, s), step)
            if do_eval:
                evals = seed_axis.evaluate_seeds(eval_step, state, setup, mesh, num_seeds)
                for log, e in zip(logs, evals):
                    log.write(paired_test_metrics({"step": step, **e}))
                for s, e in enumerate(evals):
                    progress.say(
                        f"step {step}/{total}  seed {configs[s].seed}  {evaluation.evaluation_line(e)}"
                    )
            if stop:
                for saver, log in zip(savers, logs):
                    saver.wait(step)
                    log.write({"step": step, "preempted": True})
                raise watcher.stopped(step, ", ".join(str(m.directory) for m in mngrs))
            clock.resume()
        for saver in savers:
            saver.wait(total)
        if not evals:
            evals = seed_axis.evaluate_seeds(eval_step, state, setup, mesh, num_seeds)
        summaries = []
        for s, w in enumerate(workdirs):
            summary = {
                **train.run_summary(
                    evals[s],
                    train_metrics[s],
                    setup,
                    mesh,
                    clock,
                    steps=total,
                    start=start,
                    resumed_from=resumed_from,
                    moved_aside=moved[s],
                    num_params=num_params,
                    state_bytes=num_seeds * state_bytes,  # every seed's, replicated
                ),
                "vmapped_seeds": num_seeds,
            }
            io.write_json(w / "summary.json", summary)
            progress.say(f"summary of {w}: " + json.dumps(summary, sort_keys=True))
            summaries.append(summary)
        return summaries
