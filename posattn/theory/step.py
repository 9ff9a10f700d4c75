"""One chunk of full-batch training on Eq. (T), and the history entry at its end (Section 3 of JSL22).

(A off-diagonal, v) are trained jointly by an optax optimiser (`posattn.theory.optim`; by default GD
with a constant step size for v and one for A) and no regulariser; the diagonal of A stays at its
initial value (`descend`). On (E) a step reads the samples once (`posattn.theory.fused`); a training
set may come as a `Batch` or laid out once for that step as `fused.Tiles` (what the run driver passes).

The training state is a plain dict {"params", "opt_state", "step"} (`init_state`). `train_chunk` runs
a traced number of steps in one loop and is pure: the run driver (`posattn.theory.gd`) jits it with
shardings, vmaps it over seeds, or over seeds and sizes, and every number it reads (the step count,
the optimiser's step sizes in its state) is an argument, so runs that differ in them share one program.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from posattn.errors import ConfigError, check_sign_labels
from posattn.metrics import classification_error
from posattn.theory import fused, metrics, optim
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import Task, check_patches, check_task, sample
from posattn.theory.model import check_params, empirical_risk, forward
from posattn.theory.population import exact_risk


class Batch(NamedTuple):
    """Samples with a weight per sample: 1 for real ones, 0 for the padding that makes the sample axis
    divide by the number of devices (or that hides the samples past a run's size in a sweep)."""

    X: jax.Array
    y: jax.Array
    weight: jax.Array


def make_batch(X, y, num_shards: int = 1) -> Batch:
    """Pad (X, y) with zero-weight samples to a multiple of `num_shards`."""
    n = X.shape[0]
    pad = -n % num_shards
    weight = jnp.concatenate([jnp.ones(n), jnp.zeros(pad)])
    X = jnp.concatenate([X, jnp.zeros((pad, *X.shape[1:]), X.dtype)])
    y = jnp.concatenate([y, jnp.ones(pad, y.dtype)])
    return Batch(X, y, weight)


def freeze_diagonal(grads: dict) -> dict:
    """Zero the gradient of A's diagonal (Simplification 3.1: the diagonal is not trained)."""
    A = grads["A"]
    return {**grads, "A": A * (1.0 - jnp.eye(A.shape[0], dtype=A.dtype))}


def _trained(tree: dict, train_A: bool) -> dict:
    """`tree` (gradients or updates) on the trained coordinates only: A's off-diagonal and v, or v alone."""
    return freeze_diagonal(tree) if train_A else {**tree, "A": jnp.zeros_like(tree["A"])}


def descend(
    state: dict, grads: dict, optimizer: optax.GradientTransformation, train_A: bool = True
) -> dict:
    """One optimiser step from `state` along `grads` (the risk's full gradient).

    Only A's off-diagonal and v are trained (with `train_A=False`, v alone: transfer with A frozen,
    Theorem 5.1): the other coordinates' gradients are zeroed before the optimiser sees them and their
    updates after, so that no optimiser (momentum, weight decay, ...) moves them. With the default
    optimiser this is theta <- theta - eta grad, eta = lr for v and lr_A for A.
    """
    params = state["params"]
    shapes = lambda tree: jax.tree.map(jnp.shape, tree)
    if shapes(grads) != shapes(params):
        raise ConfigError(
            f"grads {shapes(grads)} do not match the parameters {shapes(params)}: give the "
            "gradient of the risk in params (jax.grad of it)"
        )
    updates, opt_state = optimizer.update(_trained(grads, train_A), state["opt_state"], params)
    return {
        "params": optax.apply_updates(params, _trained(updates, train_A)),
        "opt_state": opt_state,
        "step": state["step"] + 1,
    }


def init_state(
    params: dict, optimizer: optax.GradientTransformation, hyperparams: dict | None = None, step=0
) -> dict:
    """The training state at `step` from `params`: {"params", "opt_state", "step"} (int32), the
    optimiser's injected hyperparameters set from `hyperparams` (`optim.with_hyperparameters`)."""
    opt_state = optim.with_hyperparameters(optimizer.init(params), hyperparams)
    return {"params": params, "opt_state": opt_state, "step": jnp.asarray(step, jnp.int32)}


def training_risk(
    params,
    step,
    train: Batch | fused.Tiles,
    key,
    task: Task,
    *,
    cfg: TheoryConfig,
    gd: GDConfig,
    sharding=None,
):
    """The risk that GD descends at `step`: (E) on `train`, or (P) by fresh samples or exactly."""
    if gd.risk == "empirical":
        if isinstance(train, fused.Tiles):
            return fused.tiled_risk(params, train, cfg)
        return empirical_risk(params, train.X, train.y, cfg, train.weight)
    if gd.risk == "population_mc":
        X, y = sample(jax.random.fold_in(key, step), cfg, task, gd.N)
        if sharding is not None:
            X = jax.lax.with_sharding_constraint(X, sharding)
        return empirical_risk(params, X, y, cfg)
    return exact_risk(
        params, cfg, task, gd.population_method, mesh=None if sharding is None else sharding.mesh
    )


def risk_and_grad(
    params,
    step,
    train: Batch | fused.Tiles,
    key,
    task: Task,
    *,
    cfg: TheoryConfig,
    gd: GDConfig,
    sharding=None,
    sample_axis: str | None = None,
):
    """(risk, gradient) of `training_risk`: for (E) in one pass over the samples
    (`posattn.theory.fused`, by `gd.implementation`), otherwise by `jax.value_and_grad`. With
    `sharding` (the data's, over a "data" mesh), (E) and the exact (P) split their sums over the mesh's
    devices. Inside a `jax.shard_map` whose devices each hold a block of the samples of (E),
    `sample_axis` names the mesh axis they are split over: the sums are added over it."""
    mesh = None if sharding is None else sharding.mesh
    if gd.risk == "empirical":
        if isinstance(train, fused.Tiles):
            return fused.tiled_risk_and_grad(params, train, cfg, mesh=mesh, axis_name=sample_axis)
        return fused.empirical_risk_and_grad(
            params,
            train.X,
            train.y,
            cfg,
            train.weight,
            mesh=mesh,
            implementation=gd.implementation,
            axis_name=sample_axis,
        )
    if sample_axis is not None:
        raise ConfigError(f"sample_axis splits the samples of (E); risk={gd.risk!r} has none")
    return jax.value_and_grad(training_risk)(
        params, step, train, key, task, cfg=cfg, gd=gd, sharding=sharding
    )


def evaluate(
    params,
    step,
    train: Batch | fused.Tiles,
    test: Batch,
    key,
    task: Task,
    *,
    cfg: TheoryConfig,
    gd: GDConfig,
):
    """The history entry at `step`: risks, test error and the parameter scalars of the proof sketch."""
    scores = forward(params, test.X, cfg)
    test_loss = empirical_risk(params, test.X, test.y, cfg, test.weight)
    if gd.risk == "population_mc":
        loss = test_loss  # a fresh-sample estimate of the population risk (P)
    else:
        loss = training_risk(params, step, train, key, task, cfg=cfg, gd=gd)
    return {
        "step": step,
        "loss": loss,
        "test_loss": test_loss,
        "test_error": classification_error(
            scores, test.y, test.weight
        ),  # NaN (divergence) is wrong
        **metrics.parameter_metrics(params, task),
    }


def train_chunk(
    state: dict,
    num_steps,
    train: Batch | fused.Tiles,
    test: Batch,
    key,
    task: Task,
    *,
    cfg: TheoryConfig,
    gd: GDConfig,
    optimizer: optax.GradientTransformation,
    train_A: bool = True,
    sharding=None,
):
    """`num_steps` optimiser steps from `state` (`init_state`) in one loop, then (state, the history
    entry at their end).

    `num_steps` may be traced: one compiled chunk serves every chunk length. Only `gd`'s risk, N,
    population method and implementation are read; the step sizes are the optimiser's (in its state
    for the default, `posattn.theory.optim`). `train_A=False` trains v alone, A fixed at its given value
    (transfer with A frozen, Theorem 5.1).
    ConfigError (while tracing: shapes only) for a state, task or samples of another config's shapes, a
    negative concrete `num_steps`, and (where concrete) labels other than -1 and +1.
    """
    check_params(state["params"], cfg.D, cfg.d)
    check_task(cfg, task)
    for name, batch in (("train", train), ("test", test)):
        if isinstance(
            batch, Batch
        ):  # `fused.Tiles` are laid out by the driver from checked samples
            check_patches(batch.X, cfg)
            if jnp.shape(batch.y) != jnp.shape(batch.X)[:1]:
                raise ConfigError(
                    f"{name}.y has shape {jnp.shape(batch.y)}: give one label per sample "
                    f"of {name}.X {jnp.shape(batch.X)}"
                )
            check_sign_labels(batch.y, f"{name}.y")
    if not isinstance(num_steps, jax.core.Tracer) and int(num_steps) < 0:
        raise ConfigError(f"num_steps={num_steps}: give a number of steps >= 0")
    state = train_steps(
        state,
        num_steps,
        train,
        key,
        task,
        cfg=cfg,
        gd=gd,
        optimizer=optimizer,
        train_A=train_A,
        sharding=sharding,
    )
    return state, evaluate(state["params"], state["step"], train, test, key, task, cfg=cfg, gd=gd)


def train_steps(
    state: dict,
    num_steps,
    train: Batch | fused.Tiles,
    key,
    task: Task,
    *,
    cfg: TheoryConfig,
    gd: GDConfig,
    optimizer: optax.GradientTransformation,
    train_A: bool = True,
    sharding=None,
    sample_axis: str | None = None,
) -> dict:
    """The loop of `train_chunk` (its arguments, unchecked): the state after `num_steps` steps, with no
    evaluation. `sample_axis` as in `risk_and_grad`: inside a `jax.shard_map` that splits the samples
    of (E), whose evaluation then belongs outside it."""

    def one_step(_, state):
        _, grads = risk_and_grad(
            state["params"],
            state["step"],
            train,
            key,
            task,
            cfg=cfg,
            gd=gd,
            sharding=sharding,
            sample_axis=sample_axis,
        )
        return descend(state, grads, optimizer, train_A)

    return jax.lax.fori_loop(0, num_steps, one_step, state)
