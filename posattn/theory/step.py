"""One chunk of full-batch gradient descent on Eq. (T), and the history entry at its end (Section 3 of
JSL22).

(A off-diagonal, v) are trained jointly with a constant step size and no regulariser; the diagonal of A
stays at its initial value. On (E) a step reads the samples once (`posattn.theory.fused`); a training
set may come as a `Batch` or laid out once for that step as `fused.Tiles` (what the run driver passes).
`train_chunk` runs many steps inside one `lax.scan` and is pure, so the run driver
(`posattn.theory.gd`) can jit it with shardings, vmap it over seeds, or over seeds and sizes.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp

from posattn.errors import ConfigError
from posattn.metrics import classification_error
from posattn.theory import fused, metrics
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import Task, sample
from posattn.theory.model import empirical_risk, forward
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


def gd_update(params: dict, grads: dict, lr: float, lr_A: float | None = None) -> dict:
    """One step of gradient descent, theta <- theta - eta grad, with A's diagonal frozen."""
    grads = freeze_diagonal(grads)
    lr_A = lr if lr_A is None else lr_A
    return {"A": params["A"] - lr_A * grads["A"], "v": params["v"] - lr * grads["v"]}


def training_risk(params, step, train: Batch | fused.Tiles, key, task: Task, *, cfg: TheoryConfig,
                  gd: GDConfig, sharding=None):
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
    return exact_risk(params, cfg, task, gd.population_method,
                      mesh=None if sharding is None else sharding.mesh)


def _empirical_risk_and_grad(params, train: Batch | fused.Tiles, cfg: TheoryConfig, mesh=None):
    """(E) and its gradient in one pass over the samples, in the layout they come in."""
    if isinstance(train, fused.Tiles):
        return fused.tiled_risk_and_grad(params, train, cfg, mesh=mesh)
    return fused.empirical_risk_and_grad(params, train.X, train.y, cfg, train.weight, mesh=mesh)


def risk_and_grad(params, step, train: Batch | fused.Tiles, key, task: Task, *, cfg: TheoryConfig,
                  gd: GDConfig, sharding=None):
    """(risk, gradient) of `training_risk`: for (E) in one pass over the samples
    (`posattn.theory.fused`), otherwise by `jax.value_and_grad`. With `sharding` (the data's, over a
    "data" mesh), (E) and the exact (P) split their sums over the mesh's devices."""
    mesh = None if sharding is None else sharding.mesh
    if gd.risk == "empirical":
        return _empirical_risk_and_grad(params, train, cfg, mesh)
    return jax.value_and_grad(training_risk)(params, step, train, key, task, cfg=cfg, gd=gd,
                                             sharding=sharding)


def evaluate(params, step, train: Batch | fused.Tiles, test: Batch, key, task: Task, *,
             cfg: TheoryConfig, gd: GDConfig):
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
        "test_error": classification_error(scores, test.y, test.weight),  # NaN (divergence) is wrong
        **metrics.parameter_metrics(params, task),
    }


def train_chunk(params, step, train: Batch | fused.Tiles, test: Batch, key, task: Task, *,
                num_steps: int, cfg: TheoryConfig, gd: GDConfig, train_A: bool = True, sharding=None):
    """`num_steps` GD steps from `step` in one `lax.scan`, then the history entry at their end.

    `train_A=False` descends (E) in v alone, A fixed at its given value (transfer with A frozen,
    Theorem 5.1).
    """
    mesh = None if sharding is None else sharding.mesh
    if train_A:
        def one_step(params, t):
            _, grads = risk_and_grad(params, t, train, key, task, cfg=cfg, gd=gd, sharding=sharding)
            return gd_update(params, grads, gd.lr, gd.lr_A), None

        params, _ = jax.lax.scan(one_step, params, step + jnp.arange(num_steps))
    else:
        if gd.risk != "empirical":
            raise ConfigError(f"train_A=False trains v on the empirical risk (E); risk={gd.risk!r}")

        def one_step(v, _):  # the gradient in A is computed and dropped (a D x D sum per tile)
            _, grads = _empirical_risk_and_grad({**params, "v": v}, train, cfg, mesh)
            return v - gd.lr * grads["v"], None

        v, _ = jax.lax.scan(one_step, params["v"], None, length=num_steps)
        params = {**params, "v": v}
    step = step + num_steps
    return params, evaluate(params, step, train, test, key, task, cfg=cfg, gd=gd)
