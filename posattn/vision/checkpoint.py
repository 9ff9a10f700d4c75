"""Checkpoints of the train state with orbax's `CheckpointManager`.

The state is the plain dict {"step", "params", "batch_stats", "opt_state"}; it is saved as one
`StandardSave` item under `WORKDIR/checkpoints/STEP/`. Orbax writes into a temporary directory and
renames it when complete, so a run killed mid-save leaves only the previous, complete checkpoints.
Every checkpoint carries the SHA-256 of its arrays in orbax's per-step custom metadata, and a restore
recomputes it: orbax alone restores a checkpoint with a flipped bit without complaint, so the digest is
what tells a corrupted checkpoint from a good one. `restore_latest_good` (what a restarted run uses)
falls back from a checkpoint that does not restore to the newest one that does, and moves the bad one
aside to `WORKDIR/checkpoints_unreadable/STEP` (kept for inspection, never deleted, out of orbax's way).
Restoring takes an abstract state (`jax.ShapeDtypeStruct`s carrying the target shardings), so arrays
land directly with the shardings of the current mesh, whatever the mesh of the run that saved them.

`load_run(workdir)` gives a trained run back as (model, variables, config) from the workdir alone: its
config.json and run.json (the facts of the dataset the model was built for, written at train time), so
analysis needs no prepared dataset.
"""
import dataclasses
import hashlib
import json
import os

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from posattn import io
from posattn.errors import ConfigError
from posattn.mesh import data_mesh, replicated
from posattn.vision import optim
from posattn.vision.data import datasets
from posattn.vision.setup import Setup, build_model
from posattn.vision.state import init_state, model_variables

RUN_FILE = "run.json"
UNREADABLE_DIR = "checkpoints_unreadable"


class CheckpointError(ConfigError):
    """No checkpoint of a workdir restores: the user must decide (move them away, or use a new workdir)."""


def manager(workdir: str, *, keep: int = 0, read_only: bool = False) -> ocp.CheckpointManager:
    """A manager over `workdir/checkpoints` keeping the `keep` most recent steps (all if keep <= 0).

    `read_only` (loading a run to look at it) deletes and creates nothing: a training run may be
    writing to the same directory, and its save in flight is a temporary directory that the
    cleanup of a writing manager would remove."""
    if read_only:
        options = ocp.CheckpointManagerOptions(read_only=True, create=False, cleanup_tmp_directories=False)
    else:
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep if keep > 0 else None,
            create=True,
            cleanup_tmp_directories=True,  # leftovers of a save interrupted by a kill
            enable_async_checkpointing=True,
        )
    root = str(workdir) if "://" in str(workdir) else os.path.abspath(workdir)  # gs://... stays as is
    return ocp.CheckpointManager(epath.Path(root) / "checkpoints", options=options)


def digest(host_state) -> str:
    """SHA-256 over every leaf of a host pytree: its path, dtype, shape and bytes, in tree order."""
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(host_state)[0]:
        leaf = np.ascontiguousarray(leaf)
        h.update(f"{jax.tree_util.keystr(path)}:{leaf.dtype.str}:{leaf.shape}".encode())
        h.update(leaf.tobytes())
    return h.hexdigest()


def save(mngr: ocp.CheckpointManager, state: dict) -> None:
    """Start saving the replicated `state` under its step, with its digest; the writing finishes in the
    background.

    The state is replicated (data parallelism), so one host copy holds all of it: it is pulled to host
    here (which also frees the device buffers for donation to the next step) and orbax writes host
    arrays from process 0 only. Saving the device arrays instead would make orbax split every
    replicated array across the devices, compiling a slicing program per array and device.
    """
    host_state = jax.device_get(state)
    mngr.save(int(host_state["step"]), args=ocp.args.StandardSave(host_state), force=True,
              custom_metadata={"sha256": digest(host_state)})


def _short(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:160]}" if first else type(e).__name__


def _restore_checked(mngr, abstract_state: dict, step: int) -> tuple[dict | None, str | None]:
    """(state, None) if checkpoint `step` restores and matches its digest, else (None, why not)."""
    try:
        state = mngr.restore(step, args=ocp.args.StandardRestore(abstract_state))
        saved = (mngr.metadata(step).custom_metadata or {}).get("sha256")
    except Exception as e:  # orbax and tensorstore raise many types for a damaged file
        return None, f"does not restore ({_short(e)})"
    if saved is not None and digest(jax.device_get(state)) != saved:
        return None, "restores other arrays than were saved (SHA-256 mismatch: files altered after the save)"
    return state, None


def restore(mngr: ocp.CheckpointManager, abstract_state: dict, step: int | None = None) -> dict | None:
    """Checkpoint `step` (default: the most recent complete one), placed as `abstract_state` says and
    checked against its digest.

    None if the manager holds no checkpoint; CheckpointError (one line: the step and why) if it does
    not restore or its arrays differ from what was saved. Checkpoints written before digests existed
    restore unchecked.
    """
    step = mngr.latest_step() if step is None else step
    if step is None:
        return None
    state, why = _restore_checked(mngr, abstract_state, step)
    if why is not None:
        raise CheckpointError(f"checkpoint {step} in {mngr.directory} {why}")
    return state


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """A checkpoint a restart skipped: its step, why, and where it now lies."""

    step: int
    reason: str
    moved_to: str


def _move_aside(mngr: ocp.CheckpointManager, step: int) -> str:
    """Move checkpoint `step` to WORKDIR/checkpoints_unreadable/STEP[.N] (process 0; all wait)."""
    src = epath.Path(mngr.directory) / str(step)
    dest_dir = epath.Path(mngr.directory).parent / UNREADABLE_DIR
    dest, n = dest_dir / str(step), 1
    while dest.exists():  # the same step may go bad again after a resume
        dest, n = dest_dir / f"{step}.{n}", n + 1
    if io.is_writer():
        dest_dir.mkdir(parents=True, exist_ok=True)
        src.rename(dest)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(f"posattn: moved checkpoint {step} aside")
    return str(dest)


def restore_latest_good(mngr: ocp.CheckpointManager, abstract_state: dict) -> tuple[dict | None, list]:
    """(state of the newest checkpoint that restores and matches its digest, [Unreadable newer ones]).

    (None, []) when there is no checkpoint. Newer checkpoints that fail are moved aside (`_move_aside`)
    so the run continues from the good one and its later saves do not collide with them. If none
    restores, nothing is moved (the cause may be the code, e.g. a changed model, not the files) and
    CheckpointError lists each step and why.
    """
    failures = []
    for step in sorted(mngr.all_steps(), reverse=True):
        state, why = _restore_checked(mngr, abstract_state, step)
        if why is not None:
            failures.append((step, why))
            continue
        skipped = [Unreadable(s, why, _move_aside(mngr, s)) for s, why in failures]
        if skipped:
            mngr.reload()
        return state, skipped
    if failures:
        raise CheckpointError(f"no checkpoint in {mngr.directory} restores ("
                              + "; ".join(f"step {s} {why}" for s, why in failures)
                              + "): move them out of the way to start from step 0, or use a new --workdir")
    return None, []


def abstract_like(state_shapes, sharding) -> dict:
    """`jax.ShapeDtypeStruct`s of the given shapes, every leaf with `sharding` (the replicated state)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), state_shapes)


def write_run_record(workdir, setup: Setup) -> None:
    """run.json: what building the model needs beyond config.json (the dataset's classes and the image
    shape), so that `load_run` needs no data."""
    io.write_json(epath.Path(workdir) / RUN_FILE, {"num_classes": setup.info.num_classes,
                                                   "image_shape": list(setup.image_shape)})


def abstract_state(model, image_shape, config, sharding) -> dict:
    """The shapes, dtypes and `sharding` of the train state of `config` (nothing is computed)."""
    tx = optim.make_optimizer(config.optimizer, optim.hyperparameters(config.optimizer, config.total_steps))
    return abstract_like(jax.eval_shape(lambda: init_state(model, image_shape, config.seed, tx)), sharding)


def restore_state(workdir, model, image_shape, config, *, step: int | None = None, devices=None) -> dict:
    """The train state saved in `workdir` (its latest checkpoint, or `step`), replicated over `devices`."""
    abstract = abstract_state(model, image_shape, config, replicated(data_mesh(devices)))
    mngr = manager(str(workdir), read_only=True)
    try:
        state = restore(mngr, abstract, step)
    finally:
        mngr.close()
    if state is None:
        raise ConfigError(f"no checkpoint in {workdir}/checkpoints: train first")
    return state


def run_config(workdir) -> ml_collections.ConfigDict:
    """The config a run in `workdir` was trained with (its config.json)."""
    path = epath.Path(workdir) / "config.json"
    if not path.exists():
        raise ConfigError(f"{path} not found: a run's workdir holds config.json and checkpoints/")
    return ml_collections.ConfigDict(json.loads(path.read_text()))


def restore_run(workdir, *, step: int | None = None, devices=None):
    """(model, train state, config) of checkpoint `step` (default: the latest) of the run in `workdir`,
    replicated over `devices` (default: every device), from the workdir alone (no dataset needed).

    Workdirs written before run.json existed load too: their classes are the dataset's, known
    without its data.
    """
    config = run_config(workdir)
    run_path = epath.Path(workdir) / RUN_FILE
    if run_path.exists():
        run = json.loads(run_path.read_text())
    else:
        run = {"num_classes": datasets.num_classes(config.dataset),
               "image_shape": datasets.image_shape(config.dataset, config.get("image_size", 0))}
    model = build_model(config, run["num_classes"])
    state = restore_state(workdir, model, tuple(run["image_shape"]), config, step=step, devices=devices)
    return model, state, config


def load_run(workdir, step: int | None = None):
    """(model, variables, config) of a trained run, from its workdir alone (no dataset needed).

    variables: {"params"} (and "batch_stats" for the CNNs) of checkpoint `step` (default: the latest),
    on the local devices, replicated; `model.apply(variables, images, train=False)` gives its logits.
    """
    model, state, config = restore_run(workdir, step=step, devices=jax.local_devices())
    return model, model_variables(state), config
