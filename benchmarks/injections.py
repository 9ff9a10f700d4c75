"""Faults injected on purpose by the drill (`benchmarks.faults`) and its fast tests: a damaged checkpoint,
and a NaN at a chosen step in either regime."""
import pathlib

import jax
import jax.numpy as jnp


def damage_checkpoint(step_dir, kind: str) -> str:
    """Damage orbax checkpoint `step_dir` in place: "truncate" cuts its largest array file in half,
    "bitflip" flips one bit in the middle of it (orbax alone restores that without complaint). Returns
    the file damaged."""
    files = sorted((p for p in pathlib.Path(step_dir).rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    target = files[-1]
    data = bytearray(target.read_bytes())
    if kind == "truncate":
        data = data[: len(data) // 2]
    elif kind == "bitflip":
        data[len(data) // 2] ^= 0x10
    else:
        raise ValueError(f"unknown damage {kind!r}: 'truncate' or 'bitflip'")
    target.write_bytes(bytes(data))
    return str(target)


def nan_at_step(make_train_step, nan_step: int):
    """`make_train_step` whose step `nan_step` turns every parameter and the loss into NaN (an update
    that diverged), for `posattn.vision.train.make_train_step`."""

    def make(setup, tx):
        step_fn = make_train_step(setup, tx)

        def step(state, batch):
            new, metrics = step_fn(state, batch)
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
