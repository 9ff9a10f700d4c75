"""Full-batch gradient descent for Eq. (T) on the empirical risk (E) or the population risk (P).

Section 3 of JSL22: (A off-diagonal, v) are trained jointly with a constant step size and no
regulariser; the diagonal of A stays at its initial value. Many steps run inside one compiled call
(`lax.scan`), with the history of `posattn.theory.metrics` recorded every `gd.eval_every` steps.

The compiled chunk is one `jax.jit` function whose sample axis is sharded over the "data" axis of a
device mesh (`posattn.mesh`), so the same code runs on one CPU, a GPU or a TPU pod slice; XLA inserts
the cross-device sums of the risk and its gradient.
"""
import functools
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posattn import mesh as mesh_lib
from posattn.theory import metrics
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import Task, make_task, sample
from posattn.theory.model import empirical_risk, forward, init_params
from posattn.theory.population import population_risk


class Batch(NamedTuple):
    """Samples with a weight per sample: 1 for real ones, 0 for the padding that makes the sample axis
    divide by the number of devices."""

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


def training_risk(params, step, train: Batch, key, task: Task, *, cfg: TheoryConfig, gd: GDConfig,
                  sharding=None):
    """The risk that GD descends at `step`: (E) on `train`, or (P) by fresh samples or exactly."""
    if gd.risk == "empirical":
        return empirical_risk(params, train.X, train.y, cfg, train.weight)
    if gd.risk == "population_mc":
        X, y = sample(jax.random.fold_in(key, step), cfg, task, gd.N)
        if sharding is not None:
            X = jax.lax.with_sharding_constraint(X, sharding)
        return empirical_risk(params, X, y, cfg)
    return population_risk(params, cfg, task)  # the exact (P) of SPEC 1.5


def evaluate(params, step, train: Batch, test: Batch, key, task: Task, *, cfg, gd, sharding=None):
    """The history entry at `step`: risks, test error and the parameter scalars of the proof sketch."""
    scores = forward(params, test.X, cfg)
    test_loss = empirical_risk(params, test.X, test.y, cfg, test.weight)
    wrong = (~(test.y * scores > 0)).astype(jnp.float32)  # a NaN score (divergence) is wrong
    if gd.risk == "population_mc":
        loss = test_loss  # a fresh-sample estimate of the population risk (P)
    else:
        loss = training_risk(params, step, train, key, task, cfg=cfg, gd=gd)
    return {
        "step": step,
        "loss": loss,
        "test_loss": test_loss,
        "test_error": (wrong * test.weight).sum() / test.weight.sum(),
        **metrics.parameter_metrics(params, task),
    }


def train_chunk(params, step, train: Batch, test: Batch, key, task: Task, num_steps: int, *,
                cfg: TheoryConfig, gd: GDConfig, sharding=None):
    """`num_steps` GD steps from `step` in one `lax.scan`, then the history entry at their end.

    Pure, so it can be jitted with shardings (`make_chunk_fn`) or vmapped over seeds.
    """
    risk = functools.partial(training_risk, cfg=cfg, gd=gd, sharding=sharding)

    def one_step(params, t):
        grads = jax.grad(risk)(params, t, train, key, task)
        return gd_update(params, grads, gd.lr, gd.lr_A), None

    params, _ = jax.lax.scan(one_step, params, step + jnp.arange(num_steps))
    step = step + num_steps
    return params, evaluate(params, step, train, test, key, task, cfg=cfg, gd=gd)


@functools.lru_cache(maxsize=32)  # a loop of `fit` calls on one problem compiles once
def make_chunk_fn(cfg: TheoryConfig, gd: GDConfig, mesh) -> Callable:
    """`train_chunk` compiled once per `num_steps`, sample axis of the data sharded over `mesh`."""
    sharding = mesh_lib.batch_sharding(mesh)
    rep = mesh_lib.replicated(mesh)
    return jax.jit(
        functools.partial(train_chunk, cfg=cfg, gd=gd, sharding=sharding),
        static_argnums=6,
        in_shardings=(rep, rep, sharding, sharding, rep, rep),
        out_shardings=(rep, rep),
        donate_argnums=0,
    )


@functools.lru_cache(maxsize=32)
def _evaluate_fn(cfg: TheoryConfig, gd: GDConfig) -> Callable:
    return jax.jit(functools.partial(evaluate, cfg=cfg, gd=gd))


class FitResult(NamedTuple):
    params: dict
    init_params: dict
    task: Task
    history: dict  # name -> np.ndarray over the evaluation steps
    seconds: float


def _to_host(tree) -> dict:
    return {k: np.asarray(v) for k, v in tree.items()}


def split_keys(key):
    """The independent streams of one run: task, initialisation, training samples, test samples."""
    k_task, k_init, k_train, k_test = jax.random.split(key, 4)
    return {"task": k_task, "init": k_init, "train": k_train, "test": k_test}


def draw_run(key, cfg: TheoryConfig, gd: GDConfig, shards: int = 1, task: Task | None = None,
             params=None):
    """Everything a run draws from its key: (params, train, test, sample key, task).

    `task` and `params` default to draws from `key` (pass them for transfer or a shared start); the
    training set is empty unless the risk is empirical (the others draw fresh samples or need none).
    """
    keys = split_keys(key)
    task = make_task(keys["task"], cfg) if task is None else task
    params = init_params(keys["init"], cfg, gd, task.w_star) if params is None else params
    n_train = gd.N if gd.risk == "empirical" else 0
    train = make_batch(*sample(keys["train"], cfg, task, n_train), shards)
    test = make_batch(*sample(keys["test"], cfg, task, gd.n_test), shards)
    return params, train, test, keys["train"], task


@functools.lru_cache(maxsize=32)
def _draw_fn(cfg: TheoryConfig, gd: GDConfig, shards: int) -> Callable:
    """`draw_run` as one compiled program: run eagerly, its dozens of small operations each compile
    on first use, which made the first `fit` of a problem seconds slower."""
    return jax.jit(lambda key, task, params: draw_run(key, cfg, gd, shards, task, params))


def _run_chunks(chunk, evaluate_fn, params, args, steps, eval_every, on_eval):
    """The host loop: an evaluation at step 0, then compiled chunks of `eval_every` steps."""
    history = [_to_host(evaluate_fn(params, 0, *args))]
    if on_eval:
        on_eval(history[-1])
    step = 0
    while step < steps:
        n = min(eval_every, steps - step)
        params, entry = chunk(params, jnp.asarray(step), *args, n)
        step += n
        history.append(_to_host(entry))
        if on_eval:
            on_eval(history[-1])
    return params, {k: np.stack([h[k] for h in history]) for k in history[0]}


def fit(key, cfg: TheoryConfig, gd: GDConfig, *, task: Task | None = None, params=None,
        devices=None, on_eval: Callable[[dict], None] | None = None) -> FitResult:
    """Run GD from `key` and return the final parameters and the history.

    `task` and `params` default to draws from `key` (see `draw_run`); `devices` (default: all) form the
    data mesh; `on_eval(entry)` sees every history entry as it arrives (progress reporting).
    """
    mesh = mesh_lib.data_mesh(devices)
    params, train, test, sample_key, task = _draw_fn(cfg, gd, mesh.devices.size)(key, task, params)
    start = jax.tree.map(jnp.copy, params)
    train, test = jax.device_put((train, test), mesh_lib.batch_sharding(mesh))
    params, task_d, sample_key = jax.device_put((params, task, sample_key), mesh_lib.replicated(mesh))

    t0 = time.perf_counter()
    params, history = _run_chunks(make_chunk_fn(cfg, gd, mesh), _evaluate_fn(cfg, gd), params,
                                  (train, test, sample_key, task_d), gd.steps, gd.eval_every, on_eval)
    return FitResult(jax.device_get(params), start, task, history, time.perf_counter() - t0)


def fit_seeds(keys, cfg: TheoryConfig, gd: GDConfig, *,
              on_eval: Callable[[dict], None] | None = None) -> FitResult:
    """`fit` for many seeds at once: every seed's run is vmapped inside the same compiled chunks.

    keys: (S,) keys, one run each (its own task, start and samples, as `fit(keys[s], ...)` draws them).
    The result carries a leading seed axis on params and task, and history entries of shape (T, S).
    Seeds are split over the devices when they divide evenly (`posattn.mesh.map_runs`).
    """
    draw = jax.jit(lambda ks: mesh_lib.map_runs(lambda k: draw_run(k, cfg, gd), ks))
    params, train, test, sample_keys, tasks = draw(keys)  # the compiled chunks follow their split
    start = jax.tree.map(jnp.copy, params)
    over_seeds = (0, None, 0, 0, 0, 0)
    chunk = jax.jit(jax.vmap(functools.partial(train_chunk, cfg=cfg, gd=gd), in_axes=(*over_seeds, None)),
                    static_argnums=6, donate_argnums=0)
    evaluate_fn = jax.jit(jax.vmap(functools.partial(evaluate, cfg=cfg, gd=gd), in_axes=over_seeds))
    t0 = time.perf_counter()
    params, history = _run_chunks(chunk, evaluate_fn, params, (train, test, sample_keys, tasks),
                                  gd.steps, gd.eval_every, on_eval)
    history["step"] = history["step"][:, 0] if history["step"].ndim == 2 else history["step"]
    return FitResult(jax.device_get(params), start, tasks, history, time.perf_counter() - t0)
