"""Training and evaluation of the image classifiers (SPEC 2), one code path from one CPU to a pod slice.

Reads top to bottom like big_vision's train.py: validate the config, devices and mesh, check it against
the run the workdir records, input, model and sharded initial state, the jitted update step, checkpoint
restore, the loop (log, evaluate, checkpoint), the summary. The train state is a plain dict {"step",
"params", "batch_stats", "opt_state"}, replicated over the 1-D "data" mesh; batches are split along
"data". Augmentation runs inside the jitted step, on device, with a key folded from the step, so the
update of step t is a pure function of (config, state at t): with the data pipeline's (seed, step)
determinism a resumed run ends with bitwise the same parameters as an uninterrupted one.
"""
import dataclasses
import json
import math
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from etils import epath

from posattn.errors import ConfigError
from posattn.mesh import batch_sharding, data_mesh, replicated
from posattn.vision import augment, checkpoint, data, mesh as mesh_lib, models, optim
from posattn.vision import config as config_lib

COMPUTE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


class NonFiniteLoss(ConfigError):
    """The loss (or gradient norm) became NaN or inf: the run stops; its recipe needs changing."""


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a validated config resolves to: the dataset, the image shape and the (unbound) model."""

    info: data.DatasetInfo
    image_shape: tuple[int, int, int]
    model: nn.Module


def check_config(config, num_devices: int) -> Setup:
    """Validate everything the run will use, before any heavy work; raise ConfigError on the first fault.

    Unknown dataset, model, variant, attention or pooling, a patch size that does not divide the image,
    a batch that does not divide by the devices, an unknown compute dtype, a non-positive step count or
    augmentation settings out of range.
    """
    if config.compute_dtype not in COMPUTE_DTYPES:
        raise ConfigError(f"unknown compute_dtype {config.compute_dtype!r}: "
                          f"use one of {list(COMPUTE_DTYPES)}")
    for field in ("total_steps", "log_every"):
        if config[field] <= 0:
            raise ConfigError(f"{field}={config[field]} must be a positive integer")
    for field in ("eval_every", "checkpoint_every"):
        if config[field] < 0:
            raise ConfigError(f"{field}={config[field]} must be >= 0 (0 = only at the end)")
    for field in ("global_batch_size", "eval_batch_size"):
        if config[field] <= 0 or config[field] % num_devices:
            raise ConfigError(f"{field}={config[field]} does not divide by the {num_devices} devices; "
                              f"use a positive multiple of {num_devices}")
    if not 0.0 <= config.label_smoothing < 1.0:
        raise ConfigError(f"label_smoothing={config.label_smoothing} must lie in [0, 1)")
    augment.check_config(config.augment)
    info = data.dataset_info(config.dataset, config.get("data_dir"))
    shape = data.image_shape(config)
    if config.permute_block:
        data.block_permutation(shape[:2], config.permute_block, config.permute_seed)
    model = models.create_model(config.model, num_classes=info.num_classes, image_size=shape[0],
                                channels=shape[2], dtype=COMPUTE_DTYPES[config.compute_dtype])
    return Setup(info=info, image_shape=shape, model=model)


def _variables(params, batch_stats) -> dict:
    return {"params": params, "batch_stats": batch_stats} if batch_stats else {"params": params}


def init_state(config, setup: Setup, tx: optax.GradientTransformation) -> dict:
    """The initial train state (to be run under `jax.jit` with replicated `out_shardings`)."""
    init_key = jax.random.fold_in(jax.random.key(config.seed), 0)
    dummy = jnp.zeros((1, *setup.image_shape), jnp.float32)
    variables = setup.model.init({"params": init_key, "dropout": init_key}, dummy, train=False)
    params = variables["params"]
    return {
        "step": jnp.zeros((), jnp.int32),
        "params": params,
        "batch_stats": variables.get("batch_stats", {}),
        "opt_state": tx.init(params),
    }


def training_inputs(key, images, config, setup: Setup):
    """The model's inputs for a uint8 batch of natural images: augmented, then pixel blocks permuted
    (Figure 5). In this order a permuted run sees exactly the permuted images of the augmented natural
    ones; a crop or flip of an already permuted image would move pixels across blocks, which no fixed
    block permutation of natural images does."""
    permute = data.pixel_permutation(config, setup.image_shape)
    return permute(augment.augment(key, images, config.augment, setup.info))


def make_train_step(config, setup: Setup, tx: optax.GradientTransformation):
    """(state, batch) -> (state, metrics): one AdamW step on the augmented global batch (un-jitted).

    The key of step t is fold_in(key(seed), t + 1) (0 is the init key): a pure function of the step.
    """
    num_classes = setup.info.num_classes
    schedule = optim.learning_rate_schedule(config.optimizer, config.total_steps)
    aug_cfg, smoothing = config.augment, float(config.label_smoothing)

    def step(state, batch):
        key = jax.random.fold_in(jax.random.key(config.seed), state["step"] + 1)
        aug_key, mix_key, drop_key = jax.random.split(key, 3)
        images = training_inputs(aug_key, batch["image"], config, setup)
        labels = jax.nn.one_hot(batch["label"], num_classes, dtype=jnp.float32)
        if aug_cfg.mixup_alpha > 0:
            images, labels = augment.mixup(mix_key, images, labels, aug_cfg.mixup_alpha)

        def loss_fn(params):
            variables = _variables(params, state["batch_stats"])
            mutable = ["batch_stats"] if state["batch_stats"] else False
            out = setup.model.apply(variables, images, train=True, rngs={"dropout": drop_key},
                                    mutable=mutable)
            logits, updates = out if mutable else (out, {})
            loss = optim.smoothed_cross_entropy(logits, labels, smoothing).mean()
            return loss, (logits, updates.get("batch_stats", {}))

        (loss, (logits, batch_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        new_state = {
            "step": state["step"] + 1,
            "params": params,
            "batch_stats": batch_stats,
            "opt_state": opt_state,
        }
        metrics = {
            "loss": loss,
            "accuracy": jnp.mean(jnp.argmax(logits, -1) == jnp.argmax(labels, -1)),
            "grad_norm": optax.tree.norm(grads),
            "param_norm": optax.tree.norm(params),  # non-finite when an update broke the parameters
            "lr": schedule(state["step"]),
        }
        return new_state, metrics

    return step


def make_eval_step(setup: Setup):
    """(state, batch, totals) -> totals plus the sums over the unmasked rows of a global batch.

    totals = {"correct", "count", "loss_sum"}. Accumulating inside the compiled step (rather than
    adding the per-batch sums eagerly) keeps a multi-host evaluation to one program per batch: eager
    ops on arrays that span processes are programs of their own, interleaved with the collectives.
    """

    def step(state, batch, totals):
        images = augment.preprocess_eval(batch["image"], setup.info)
        logits = setup.model.apply(_variables(state["params"], state["batch_stats"]), images, train=False)
        labels = jax.nn.one_hot(batch["label"], setup.info.num_classes, dtype=jnp.float32)
        mask = batch["mask"].astype(jnp.float32)
        correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
        loss = optax.softmax_cross_entropy(logits.astype(jnp.float32), labels)
        sums = {"correct": jnp.sum(correct * mask), "count": jnp.sum(mask), "loss_sum": jnp.sum(loss * mask)}
        return jax.tree.map(jnp.add, totals, sums)

    return step


def _zero_totals() -> dict:
    return {k: jnp.zeros((), jnp.float32) for k in ("correct", "count", "loss_sum")}


def evaluate(eval_step, state, config, mesh) -> dict:
    """Accuracy = correct / total over every test example, each counted once, summed over all hosts."""
    # Made where it lives (no host transfer); a module-level function, so every evaluation reuses one
    # compiled program.
    totals = jax.jit(_zero_totals, out_shardings=replicated(mesh))()
    for local in data.eval_batches(config, "test"):
        totals = eval_step(state, mesh_lib.global_batch(local, mesh), totals)
    totals = jax.device_get(totals)
    count = int(totals["count"])
    return {"test_accuracy": float(totals["correct"]) / count, "test_loss": float(totals["loss_sum"]) / count,
            "test_examples": count}


# ---------------------------------------------------------------------------------- outputs


def _is_writer() -> bool:
    return jax.process_index() == 0


def _write_json(path: epath.Path, obj) -> None:
    """Write whole or not at all: a temporary file renamed into place."""
    if _is_writer():
        tmp = path.parent / (path.name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
        tmp.replace(path)


def _append_jsonl(path: epath.Path, obj) -> None:
    if _is_writer():
        with path.open("a") as f:
            f.write(json.dumps(obj, sort_keys=True) + "\n")


def _say(message: str) -> None:
    if _is_writer():
        print(message, flush=True)


def _eta(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _check_finite(pending: list, mngr, workdir) -> list:
    """Pull the per-step metrics since the last check; stop at the first non-finite loss or update.

    Runs before every checkpoint, so a checkpoint never holds a broken state. On a stop, the saves in
    flight complete first, and the message says where the run can resume from.
    """
    pulled = jax.device_get(pending)
    for step, m in pulled:
        if not all(math.isfinite(m[k]) for k in ("loss", "grad_norm", "param_norm")):
            mngr.wait_until_finished()
            last = mngr.latest_step()
            hint = ("no checkpoint was saved before it" if last is None else
                    f"the last good checkpoint (step {last}) stays in {workdir}/checkpoints: rerun the "
                    "same command with a lower --config.optimizer.lr (or a lower non-zero "
                    "--config.optimizer.grad_clip) to resume from it")
            raise NonFiniteLoss(f"non-finite loss {m['loss']} (gradient norm {m['grad_norm']}, parameter "
                                f"norm {m['param_norm']}) at step {step}; the run stopped there, {hint}")
    return [m for _, m in pulled]


def _mean(window: list) -> dict:
    return {k: float(np.mean([m[k] for m in window])) for k in window[0]}


# ---------------------------------------------------------------------------------- the run


def train(config, workdir: str, *, devices=None) -> tuple[dict, dict]:
    """Train and evaluate as `config` says, in (and resuming from) `workdir`: (final state, summary).

    A workdir that already records a run is resumed only with the same config, up to the fields
    `config.RESUMABLE` lets change, and a total_steps that reaches its checkpoint's step; anything else
    raises ConfigError before config.json is rewritten (`config.check_resume`).

    `devices` (default: all devices of all processes) lets a test run the same code on a sub-mesh.
    """
    mesh_lib.initialize_distributed()
    mesh = data_mesh(devices)
    setup = check_config(config, mesh.devices.size)
    workdir = epath.Path(workdir)
    if _is_writer():
        workdir.mkdir(parents=True, exist_ok=True)
    # A workdir that holds a run is resumed only by the same run: checked (on every process, so all
    # stop together) before config.json is rewritten, so a refused command leaves the record intact.
    mngr = checkpoint.manager(str(workdir), keep=config.keep_checkpoints)
    try:
        changes = config_lib.check_resume(config_lib.read_record(workdir), config, mngr.latest_step(),
                                          workdir)
    except ConfigError:
        mngr.close()
        raise
    _write_json(workdir / "config.json", config_lib.record(config))
    metrics_path = workdir / "metrics.jsonl"

    # Model, optimizer and the sharded initial state: created directly where it lives, replicated.
    repl, batch_shard = replicated(mesh), batch_sharding(mesh)
    tx = optim.make_optimizer(config.optimizer, config.total_steps)
    init_fn = jax.jit(lambda: init_state(config, setup, tx), out_shardings=repl)
    abstract_state = checkpoint.abstract_like(jax.eval_shape(init_fn), repl)
    num_params = models.param_count(abstract_state["params"])

    # A checkpoint found in the workdir always wins.
    state = checkpoint.restore(mngr, abstract_state)
    resumed_from = None if state is None else int(jax.device_get(state["step"]))
    state = init_fn() if state is None else state
    start = int(jax.device_get(state["step"]))
    model_name = config.model.name
    if model_name == "vit":
        model_name = f"ViT {config.model.variant} ({config.model.attention} attention)"
    resumed = "" if resumed_from is None else f"; resumed from step {start}"
    resumed += f"; changed from its config.json: {', '.join(changes)}" if changes else ""
    _say(f"{config.dataset}: {model_name}, {num_params:,} parameters, {mesh.devices.size} devices, "
         f"{jax.process_count()} processes{resumed}")

    train_step = jax.jit(make_train_step(config, setup, tx), in_shardings=(repl, batch_shard),
                         out_shardings=(repl, repl), donate_argnums=(0,))
    eval_step = jax.jit(make_eval_step(setup), in_shardings=(repl, batch_shard, repl), out_shardings=repl,
                        donate_argnums=(2,))

    total, batch_size = config.total_steps, config.global_batch_size
    batches = data.train_batches(config, start_step=start)
    pending, window, train_metrics, evals = [], [], {}, {}
    # Throughput counts the steps after the first (which compiles) and excludes evals and checkpoints.
    t_run = time.perf_counter()
    t_go, timed_seconds, log_seconds, log_steps = None, 0.0, 0.0, 0
    for step in range(start + 1, total + 1):
        state, metrics = train_step(state, mesh_lib.global_batch(next(batches), mesh))
        pending.append((step, metrics))
        if t_go is None:
            jax.block_until_ready(metrics)
            t_go = time.perf_counter()
            _say(f"step {step}/{total}  compiled and ran the first step in {t_go - t_run:.1f}s")
        else:
            log_steps += 1
        is_last = step == total
        do_log = step % config.log_every == 0 or is_last
        do_eval = is_last or (config.eval_every and step % config.eval_every == 0)
        do_ckpt = is_last or (config.checkpoint_every and step % config.checkpoint_every == 0)
        if not (do_log or do_eval or do_ckpt):
            continue
        window += _check_finite(pending, mngr, workdir)  # waits for the pending steps to finish
        pending = []
        dt = time.perf_counter() - t_go
        timed_seconds, log_seconds = timed_seconds + dt, log_seconds + dt
        if do_log:
            train_metrics, window = _mean(window), []
            images_per_second = log_steps * batch_size / log_seconds if log_steps else None
            eta = _eta((total - step) * log_seconds / log_steps) if log_steps else "?"
            log_seconds, log_steps = 0.0, 0
            _append_jsonl(metrics_path, {"step": step, **{f"train_{k}": v for k, v in train_metrics.items()},
                                         "images_per_second": images_per_second})
            _say(f"step {step}/{total}  loss {train_metrics['loss']:.4f}  "
                 f"acc {train_metrics['accuracy']:.3f}  lr {train_metrics['lr']:.2e}  "
                 f"{'?' if images_per_second is None else f'{images_per_second:,.0f}'} img/s  ETA {eta}")
        if do_ckpt:
            checkpoint.save(mngr, state)
        if do_eval:
            evals = evaluate(eval_step, state, config, mesh)
            _append_jsonl(metrics_path, {"step": step, **evals})
            _say(f"step {step}/{total}  test accuracy {evals['test_accuracy']:.4f}  "
                 f"test loss {evals['test_loss']:.4f}")
        t_go = time.perf_counter()
    mngr.wait_until_finished()
    if not evals:  # nothing left to train (the checkpoint was already final): evaluate it
        evals = evaluate(eval_step, state, config, mesh)
    seconds = time.perf_counter() - t_run
    timed_steps = max(total - start - 1, 0)
    summary = {
        **evals,
        "train_loss": train_metrics.get("loss"),
        "train_accuracy": train_metrics.get("accuracy"),
        "steps": int(jax.device_get(state["step"])),
        "steps_this_run": total - start,
        "resumed_from_step": resumed_from,
        "seconds": seconds,
        "images_per_second": timed_steps * batch_size / timed_seconds if timed_steps else None,
        "param_count": num_params,
        "devices": mesh.devices.size,
        "processes": jax.process_count(),
    }
    _write_json(workdir / "summary.json", summary)
    _say("summary: " + json.dumps(summary, sort_keys=True))
    mngr.close()
    return state, summary


def restore(config, workdir: str, *, step: int | None = None, devices=None) -> dict:
    """The train state saved in `workdir` (its latest checkpoint, or `step`), replicated over `devices`."""
    setup = check_config(config, 1)
    repl = replicated(data_mesh(devices))
    tx = optim.make_optimizer(config.optimizer, config.total_steps)
    abstract_state = checkpoint.abstract_like(jax.eval_shape(lambda: init_state(config, setup, tx)), repl)
    mngr = checkpoint.manager(workdir, keep=config.keep_checkpoints)
    try:
        state = checkpoint.restore(mngr, abstract_state, step)
    finally:
        mngr.close()
    if state is None:
        raise ConfigError(f"no checkpoint in {workdir}/checkpoints: train first")
    return state


def train_and_evaluate(config, workdir: str) -> dict:
    """Run `config` in `workdir` (resuming from its latest checkpoint if any) and return the summary."""
    return train(config, workdir)[1]
