"""Faults injected on purpose by the drill (`benchmarks.faults`) and its fast tests: a damaged checkpoint,
and a NaN at a chosen step in either regime."""
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp


def damage_checkpoint(step_dir, kind: str) -> str:
    """Damage orbax checkpoint `step_dir` in place and return what was damaged.

    "truncate" cuts its largest file in half (orbax then fails to read it). "bitflip" flips one bit in
    the middle of its largest array and writes the item back through orbax, so its files are
    well-formed and orbax alone restores the wrong value without complaint; only the digest the
    checkpoint carries can tell. (Flipping a bit in the files themselves does not do that reliably:
    orbax compresses the arrays, and a flipped bit in a compressed chunk may or may not fail to decode,
    depending on where the chunk lies in the file.)
    """
    step_dir = pathlib.Path(step_dir)
    if kind == "truncate":
        files = sorted((p for p in step_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        data = files[-1].read_bytes()
        files[-1].write_bytes(data[: len(data) // 2])
        return str(files[-1])
    if kind != "bitflip":
        raise ValueError(f"unknown damage {kind!r}: 'truncate' or 'bitflip'")
    item = step_dir / "default"
    with ocp.StandardCheckpointer() as checkpointer:
        leaves, treedef = jax.tree.flatten(checkpointer.restore(item))
        i = max(range(len(leaves)), key=lambda i: leaves[i].nbytes)
        leaf = np.array(leaves[i])
        raw = leaf.reshape(-1).view(np.uint8)
        raw[raw.size // 2] ^= 0x10
        leaves[i] = leaf
        checkpointer.save(item, jax.tree.unflatten(treedef, leaves), force=True)
    return f"{item}: leaf {i}"


def nan_at_step(make_train_step, nan_step: int):
    """`make_train_step` whose step `nan_step` turns every parameter and the loss into NaN (an update
    that diverged), for `posattn.vision.train.make_train_step`."""

    def make(setup):
        step_fn = make_train_step(setup)

        def step(state, batch, hyper):
            new, metrics = step_fn(state, batch, hyper)
            hit = new["step"] == nan_step
            new["params"] = jax.tree.map(lambda p: jnp.where(hit, jnp.nan, p), new["params"])
            metrics["loss"] = jnp.where(hit, jnp.nan, metrics["loss"])
            return new, metrics

        return step

    return make


def theory_nan_at_step(risk_and_grad, nan_step: int):
    """`posattn.theory.step.risk_and_grad` (what every GD step calls) whose gradient at GD step
    `nan_step` - 1 is NaN, so the parameters of step `nan_step` are NaN (the risk, what the history
    records, is unchanged)."""

    def wrapped(params, step, *args, **kwargs):
        risk, grads = risk_and_grad(params, step, *args, **kwargs)
        bad = step == nan_step - 1
        return risk, jax.tree.map(lambda g: jnp.where(bad, jnp.nan, g), grads)

    return wrapped
