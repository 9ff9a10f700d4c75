"""Checkpoints of the train state with orbax's `CheckpointManager`.

The state is the plain dict {"step", "params", "batch_stats", "opt_state"}; it is saved as one
`StandardSave` item under `WORKDIR/checkpoints/STEP/`. Orbax writes into a temporary directory and
renames it when complete, so a run killed mid-save leaves only the previous, complete checkpoints.
Restoring takes an abstract state (`jax.ShapeDtypeStruct`s carrying the target shardings), so arrays
land directly with the shardings of the current mesh, whatever the mesh of the run that saved them.
"""
import os

import jax
import orbax.checkpoint as ocp
from etils import epath


def manager(workdir: str, *, keep: int) -> ocp.CheckpointManager:
    """A manager over `workdir/checkpoints` keeping the `keep` most recent steps (all if keep <= 0)."""
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep if keep > 0 else None,
        create=True,
        cleanup_tmp_directories=True,  # leftovers of a save interrupted by a kill
        enable_async_checkpointing=True,
    )
    root = str(workdir) if "://" in str(workdir) else os.path.abspath(workdir)  # gs://... stays as is
    return ocp.CheckpointManager(epath.Path(root) / "checkpoints", options=options)


def save(mngr: ocp.CheckpointManager, state: dict) -> None:
    """Start saving the replicated `state` under its step; the writing finishes in the background.

    The state is replicated (data parallelism), so one host copy holds all of it: it is pulled to host
    here (which also frees the device buffers for donation to the next step) and orbax writes host
    arrays from process 0 only. Saving the device arrays instead would make orbax split every
    replicated array across the devices, compiling a slicing program per array and device.
    """
    host_state = jax.device_get(state)
    mngr.save(int(host_state["step"]), args=ocp.args.StandardSave(host_state), force=True)


def restore(mngr: ocp.CheckpointManager, abstract_state: dict, step: int | None = None) -> dict | None:
    """Checkpoint `step` (default: the most recent complete one), placed as `abstract_state` says.

    None if the manager holds no checkpoint.
    """
    step = mngr.latest_step() if step is None else step
    if step is None:
        return None
    return mngr.restore(step, args=ocp.args.StandardRestore(abstract_state))


def abstract_like(state_shapes, sharding) -> dict:
    """`jax.ShapeDtypeStruct`s of the given shapes, every leaf with `sharding` (the replicated state)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), state_shapes)
