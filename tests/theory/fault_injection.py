"""A fault injected on purpose into GD on Eq. (T), for the fault drill (drills/faults.py) and its tests: a
gradient that turns NaN at a chosen step (`nan_at_step`)."""

import jax
import jax.numpy as jnp


def nan_at_step(risk_and_grad, nan_step: int):
    """`posattn.theory.step.risk_and_grad` (what every GD step calls) whose gradient at GD step
    `nan_step` - 1 is NaN, so the parameters of step `nan_step` are NaN (the risk, what the history
    records, is unchanged)."""

    def wrapped(params, step, *args, **kwargs):
        risk, grads = risk_and_grad(params, step, *args, **kwargs)
        bad = step == nan_step - 1
        return risk, jax.tree.map(lambda g: jnp.where(bad, jnp.nan, g), grads)

    return wrapped
