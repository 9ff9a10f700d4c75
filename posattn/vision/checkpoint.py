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


def manager(workdir: str, *, keep: int) -> ocp.CheckpointManager:
    """A manager over `workdir/checkpoints` keeping the `keep` most recent steps (all if keep <= 0)."""
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep if keep > 0 else None,
        create=True,
        enable_async_checkpointing=True,
    )
    return ocp.CheckpointManager(os.path.join(os.path.abspath(workdir), "checkpoints"), options=options)


def save(mngr: ocp.CheckpointManager, state: dict) -> None:
    """Start saving `state` under its step (asynchronous: the arrays are copied to host first)."""
    step = int(jax.device_get(state["step"]))
    mngr.save(step, args=ocp.args.StandardSave(state), force=True)


def restore_latest(mngr: ocp.CheckpointManager, abstract_state: dict) -> dict | None:
    """The most recent complete checkpoint, placed as `abstract_state` says; None if there is none."""
    step = mngr.latest_step()
    if step is None:
        return None
    return mngr.restore(step, args=ocp.args.StandardRestore(abstract_state))


def abstract_like(state_shapes, sharding) -> dict:
    """`jax.ShapeDtypeStruct`s of the given shapes, every leaf with `sharding` (the replicated state)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), state_shapes)
