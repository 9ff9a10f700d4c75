"""The run driver of the theory regime: training on Eq. (T) for one run, many seeds, or seeds x sample sizes.

Every run draws the same things from its key (`draw_run`, with the streams of `posattn.theory.keys`):
its task, its start, its training and test samples; a caller may give its own training set and test
set (or test sampler) instead (`fit`'s `train` and `test`). The three entry points run the same
compiled training chunk (`posattn.theory.step.train_chunk`):

- `fit`: one run, history every `gd.eval_every` steps, sample axis sharded over the devices' "data"
  mesh axis (`posattn.mesh`), so the same code runs on one CPU, a GPU or a TPU pod slice; a run
  continues from its result (`init=`), its step count, optimiser state and history going on;
- `fit_seeds`: many seeds vmapped inside the same chunks, as `fit(keys[s])` would run each, each with
  its own step sizes if asked (`hyperparams`);
- `fit_grid` (`fit_sizes` for wide grids): (sample size N) x (seed) runs as one compiled call, only the
  final history entry of each. A run at size N trains on the first N of its seed's samples (the rest
  carry weight 0, in `step.Batch` or `fused.Tiles`), so sizes are nested subsamples and differ only
  by N; every run then computes on the grid's largest size, so callers keep that moderate
  (`fit_sizes` groups the sizes).

The optimiser is any optax `GradientTransformation` (`optimizer=`), by default GD with step sizes
`gd.lr` for v and `gd.lr_A` for A (`posattn.theory.optim`). The numbers a sweep varies reach the
compiled programs as arguments, never as constants: the step count and the evaluation cadence
(`gd.steps`, `gd.eval_every`), and the step sizes, which live in the optimiser's state (`gd.lr`,
`gd.lr_A` for the default; `hyperparams=` for any optimiser built with `optax.inject_hyperparams`).
A loop of `fit` calls over learning rates or step counts compiles its programs once, and

    fit_seeds(jnp.stack([key] * 4), cfg, gd, hyperparams={"lr": jnp.array([1e-3, 3e-3, 1e-2, 3e-2])})

trains one problem at four learning rates in one vmapped call. `fit` and `fit_seeds` run their loop
from Python, so `jax.jit` and `jax.vmap` cannot trace them (they say so, and name these instead);
`step.train_chunk` is the pure, jittable and vmappable loop underneath.

Seeds are split over the devices when they divide evenly, each device drawing and training its own
(`posattn.mesh.map_runs`, `posattn.mesh.split_runs`). The devices may be those of several processes (a
multi-host run, `posattn.mesh.initialize_distributed`): every process makes the same call and gets the
whole result, gathered from all of them (`posattn.mesh.gathered`); a seed sweep then gives the bits of
one process with as many devices (tests/theory/test_distributed.py).

`fit` and `fit_seeds` stop at the first step whose loss is not finite (`NonFiniteLoss`, naming the
step and the likely cause): the chunk that produced it is replayed one step at a time from its start to
find the step. `fit_grid` is one compiled call with no host in the loop; its callers read its entries.
"""

import concurrent.futures
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from posattn import compile_options
from posattn import mesh as mesh_lib
from posattn.errors import ConfigError, check_sign_labels
from posattn.theory import fused, optim, population
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import Task, check_task, make_task, sample
from posattn.theory.keys import run_keys
from posattn.theory.model import check_params, init_params
from posattn.theory.step import evaluate, init_state, make_batch, train_chunk


class NonFiniteLoss(ConfigError):
    """Training produced a non-finite loss: the run stops at that step; its step sizes (or its start)
    need changing."""


class FitResult(NamedTuple):
    """A run of `fit` (or `fit_seeds`, with a leading seed axis on every field but `history["step"]`,
    and on the history's other entries a second one). `fit(key, ..., init=result)` continues it."""

    params: dict
    init_params: dict
    task: Task
    history: dict  # name -> np.ndarray over the evaluation steps
    seconds: float
    opt_state: Any  # the optimiser's state after the last step
    key: jax.Array  # the run's key (keys, for `fit_seeds`)


# GDConfig fields that no compiled program reads as a constant: the step count and cadence drive the
# host loop and are passed to the chunks as arguments, the step sizes live in the optimiser's state, and
# the final test size is the callers'. Programs are compiled and cached under `_compiled(gd)`.
_NOT_COMPILED = ("lr", "lr_A", "steps", "eval_every", "n_final_test")


def _compiled(gd: GDConfig) -> GDConfig:
    """`gd` with the fields of `_NOT_COMPILED` at their defaults: the key of its compiled programs."""
    defaults = GDConfig()
    return dataclasses.replace(gd, **{name: getattr(defaults, name) for name in _NOT_COMPILED})


def _optimizer(
    optimizer: optax.GradientTransformation | None, gd: GDConfig, hyperparams: dict | None
) -> tuple[optax.GradientTransformation, dict]:
    """(optimiser, the hyperparameters its state starts from) of a driver's arguments: the default
    optimiser starts from `gd`'s step sizes, overridden by `hyperparams`; another from `hyperparams`
    alone (its own numbers where none)."""
    if optimizer is None:
        return optim.gradient_descent(), {**optim.gd_hyperparameters(gd), **(hyperparams or {})}
    return optimizer, dict(hyperparams or {})


def _check_not_traced(name: str, *trees) -> None:
    """A ConfigError when `name` (a driver that loops in Python) is called under `jax.jit` or
    `jax.vmap`, naming what to use instead."""
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(trees)):
        raise ConfigError(
            f"{name} runs its training loop from Python (it stops on a non-finite loss and reports "
            "progress), so jax.jit and jax.vmap cannot trace it: for many seeds in one call use "
            "fit_seeds(keys, ...); for step sizes vmapped in one call, fit_seeds(keys, ..., "
            "hyperparams={'lr': lrs}); for a jittable, vmappable loop of your own, "
            "posattn.theory.step.train_chunk"
        )


def check_samples(samples, cfg: TheoryConfig, what: str, runs: int | None = None) -> None:
    """ConfigError unless `samples` is a pair (X (n, D, d), y (n,)) of `cfg`'s D and d (with a leading
    axis of `runs` on both, for `fit_seeds`) whose labels are -1 or +1 (read where y is concrete:
    `errors.check_sign_labels`)."""
    if not isinstance(samples, (tuple, list)) or len(samples) != 2:
        raise ConfigError(f"{what}= is a pair (X, y) of arrays, not a {type(samples).__name__}")
    lead, runs_ = ((), "") if runs is None else ((runs,), f"{runs}, ")
    X, y = jnp.shape(samples[0]), jnp.shape(samples[1])
    k = len(lead)
    if len(X) != k + 3 or X[:k] != lead or X[k + 1 :] != (cfg.D, cfg.d) or y != X[: k + 1]:
        raise ConfigError(
            f"{what}: X {X} and y {y} must be ({runs_}n, D, d) = ({runs_}n, {cfg.D}, {cfg.d}) "
            f"and ({runs_}n{',' if runs is None else ''})"
        )
    check_sign_labels(samples[1], f"{what}'s y")


def _samples(X, y, cfg: TheoryConfig, what: str):
    """Caller's samples (X (n, D, d), y (n,)) as float arrays, or a ConfigError naming the shapes."""
    check_samples((X, y), cfg, what)
    X = jnp.asarray(X)
    return X, jnp.asarray(y, X.dtype)


def _check_callers_data(cfg: TheoryConfig, train, test, task, runs: int | None = None) -> None:
    """The caller's arrays of a run checked before anything compiles (`check_samples`), and a training
    set refused without the problem that made it: the test set is drawn from `task`, or from the run
    key's task when it is None, which is another problem than the one that made the caller's X (its
    w* nearly orthogonal: test errors worse than chance)."""
    if train is not None:
        check_samples(train, cfg, "train", runs)
        if task is None and test is None:
            raise ConfigError(
                "train= without task= or test=: the test set would come from the task of the "
                "run's key, not the one that made X: pass task= (the Task that made X) or "
                "test= (its test set, or a sampler(key, n))"
                if runs is None
                else "train= without test=: the test sets would come from the tasks of the keys, "
                "not the ones that made X: pass test= (arrays, or a sampler(key, n))"
            )
    if test is not None and not callable(test):
        check_samples(test, cfg, "test", runs)


def draw_start(key, cfg: TheoryConfig, gd: GDConfig, task: Task | None = None, params=None):
    """(task, params) of the run of `key`: the given ones, or drawn from its "task" and "init" streams."""
    keys = run_keys(key)
    task = make_task(keys["task"], cfg) if task is None else task
    params = init_params(keys["init"], cfg, gd, task.w_star) if params is None else params
    return task, params


def draw_run(
    key,
    cfg: TheoryConfig,
    gd: GDConfig,
    *,
    n_train: int | None = None,
    shards: int = 1,
    task: Task | None = None,
    params=None,
    train=None,
    test=None,
):
    """Everything a run draws from its key: (params, train, test, sample key, task).

    `task` and `params` default to draws from `key` (pass them for transfer or a shared start). The
    training set has `n_train` samples, by default N for the empirical risk and none otherwise (the
    other risks draw fresh samples or need none), from the key's "train" stream; the test set has
    `gd.n_test`, from its "test" stream (`posattn.theory.keys.run_keys`). `train` (X, y) and `test`
    ((X, y), or a jittable sampler(key, n) -> (X, y) called with the "test" key and `gd.n_test`) replace
    the draws with the caller's. Both sets are padded to a multiple of `shards`.
    """
    keys = run_keys(key)
    task, params = draw_start(key, cfg, gd, task, params)
    if train is not None:
        if gd.risk != "empirical":
            raise ConfigError(
                f"train= is the training set of the empirical risk (E); risk={gd.risk!r} "
                "draws its own samples: pass risk='empirical'"
            )
        train = _samples(*train, cfg, "train")
    else:
        n_train = (gd.N if gd.risk == "empirical" else 0) if n_train is None else n_train
        train = sample(keys["train"], cfg, task, n_train)
    if test is None:
        test = sample(keys["test"], cfg, task, gd.n_test)
    elif callable(test):
        test = _samples(*test(keys["test"], gd.n_test), cfg, "the test sampler's samples")
    else:
        test = _samples(*test, cfg, "test")
    return params, make_batch(*train, shards), make_batch(*test, shards), keys["train"], task


def _laid_out(run, gd: GDConfig, shards: int = 1):
    """`draw_run`'s run with its training set, if any, laid out once for the one-pass step of (E) that
    the chunks take on it (`posattn.theory.fused`): as drawn for the CPU kernel, else one block of
    tiles per device (`fused.tiled`)."""
    params, train, *rest = run
    if train.X.shape[0] and not fused.uses_kernel(train.X.dtype, gd.implementation):
        train = fused.tiled(*train, shards)
    return (params, train, *rest)


def _started(run, optimizer, hyper: dict):
    """A laid-out run with its parameters replaced by the training state (`step.init_state`)."""
    params, *rest = run
    return (init_state(params, optimizer, hyper), *rest)


def _draw(key, task, params, train, test, *, cfg: TheoryConfig, gd: GDConfig, mesh, test_sampler):
    """`draw_run`, laid out, with its arrays where `fit` keeps them on `mesh` (`_shardings`): compiled
    as one program (`fit`). Run eagerly, its dozens of small operations each compiled on first use;
    drawn on one device, the samples were then cut into shards by slicing programs that took XLA 1.6 s
    to compile at the paper preset (docs/benchmarks.md). The draws are the same bits on any mesh (JAX's
    threefry is partitionable)."""
    shards = mesh.devices.size
    run = draw_run(
        key,
        cfg,
        gd,
        shards=shards,
        task=task,
        params=params,
        train=train,
        test=test_sampler or test,
    )
    return jax.lax.with_sharding_constraint(_laid_out(run, gd, shards), _shardings(mesh))


@functools.lru_cache(maxsize=32)  # a loop of `fit` calls on one problem compiles once
def make_chunk_fn(cfg: TheoryConfig, gd: GDConfig, mesh, optimizer) -> Callable:
    """`train_chunk` compiled once, sample axis of the data sharded over `mesh`; `gd` as `_compiled`
    gives it (its step sizes and counts are not read).

    Called as chunk(state, num_steps, train, test, key, task), every argument traced: one program
    serves every chunk length, step size and step count.
    """
    sharding = mesh_lib.batch_sharding(mesh)
    rep = mesh_lib.replicated(mesh)

    def chunk(state, num_steps, train, test, key, task):
        return train_chunk(
            state,
            num_steps,
            train,
            test,
            key,
            task,
            cfg=cfg,
            gd=gd,
            optimizer=optimizer,
            sharding=sharding,
        )

    return jax.jit(
        chunk,
        in_shardings=(rep, rep, sharding, sharding, rep, rep),
        out_shardings=(rep, rep),
        donate_argnums=0,
    )


def _evaluate_fn(cfg: TheoryConfig, gd: GDConfig) -> Callable:
    return compile_options.jit_run_once(evaluate, cfg=cfg, gd=gd)


def _copy(tree):
    """A copy of the arrays of `tree` where they lie: a buffer copy, where `jnp.copy` compiles a program
    per shape and sharding (0.5 s of a run's start at the paper preset). An array spread over several
    processes is copied onto its own sharding, which `jax.device_put` does by a program."""
    sharding = lambda a: a.sharding if mesh_lib.spans_processes(a) else None
    return jax.tree.map(lambda a: jax.device_put(a, sharding(a), may_alias=False), tree)


def _to_host(tree) -> dict:
    return {k: np.asarray(v) for k, v in mesh_lib.gathered(tree).items()}


def _result(state, start, task, history: dict, t0: float, key) -> FitResult:
    """The FitResult of a driver's final training state, its arrays on this host (gathered from every
    process of a multi-process run: `posattn.mesh.gathered`)."""
    state, start, task = mesh_lib.gathered((state, start, task))
    state = jax.device_get(state)
    return FitResult(
        state["params"], start, task, history, time.perf_counter() - t0, state["opt_state"], key
    )


def _nonfinite_runs(entry: dict) -> np.ndarray:
    """Indices of the runs (seeds; [0] for a single run) whose loss or test loss is not finite."""
    bad = ~(np.isfinite(entry["loss"]) & np.isfinite(entry["test_loss"]))
    return np.flatnonzero(np.atleast_1d(bad))


def _steps(n: int):
    return jnp.asarray(n, jnp.int32)


def _first_nonfinite_step(chunk, state, step: int, n: int, args) -> tuple[int, dict]:
    """Replay steps step+1..step+n one at a time from `state` (the chunk's start); the first step whose
    entry is not finite, and that entry."""
    for t in range(step, step + n):
        state, entry = chunk(state, _steps(1), *args)
        entry = _to_host(entry)
        if _nonfinite_runs(entry).size:
            return t + 1, entry
    return (
        step + n,
        entry,
    )  # the replay stayed finite (rounding differs from the loop): the chunk's end


def _stop(step: int, entry: dict, hint: str) -> NonFiniteLoss:
    runs = _nonfinite_runs(entry)
    which = f" (runs {runs.tolist()} of the seeds)" if np.ndim(entry["loss"]) else ""
    loss = np.ravel(entry["loss"])[runs[0]]
    return NonFiniteLoss(
        f"non-finite loss ({loss}) at GD step {step}{which}: {hint}; the run stopped there "
        "(its history ends at the last finite evaluation)"
    )


def _run_chunks(
    chunk,
    evaluate_fn,
    state,
    args,
    steps,
    eval_every,
    on_eval,
    hint,
    compiling: concurrent.futures.Future | None = None,
    history: dict | None = None,
):
    """The host loop: an evaluation at the start (unless `history`, a run's so far, goes on), then
    compiled chunks of `eval_every` steps up to `steps` more; a non-finite loss raises NonFiniteLoss
    naming the first step that has one (`hint`: its likely cause). Returns (state, history).

    `compiling`: the chunk's compile, started in a thread by the caller (`_compile_ahead`); the start's
    evaluation compiles and runs meanwhile, and the chunks start once it is done."""
    step = int(np.ravel(mesh_lib.gathered(state["step"]))[0])
    entries = []
    if history is None:
        entries.append(_to_host(evaluate_fn(state["params"], state["step"], *args)))
        if _nonfinite_runs(entries[0]).size:
            raise _stop(step, entries[0], "the start or the data is not finite")
        if on_eval:
            on_eval(entries[-1])
    if compiling is not None:
        compiling.result()
    end = step + steps
    while step < end:
        n = min(eval_every, end - step)
        start = _copy(state)  # the chunk donates its state; kept for a replay
        state, entry = chunk(state, _steps(n), *args)
        entry = _to_host(entry)
        if _nonfinite_runs(entry).size:
            raise _stop(*_first_nonfinite_step(chunk, start, step, n, args), hint)
        step += n
        entries.append(entry)
        if on_eval:
            on_eval(entries[-1])
    new = {k: np.stack([e[k] for e in entries]) for k in entries[0]}
    if history is not None:
        new = {k: np.concatenate([history[k], v]) for k, v in new.items()}
    return state, new


def _compile_ahead(pool, chunk, state, args):
    """Submit to `pool` the compile of `chunk` from its arguments or their shapes
    (`jax.ShapeDtypeStruct`): the compiled program lands in jit's cache, where the chunk calls find it.
    XLA compiles a program on one core, and the chunk's compile is the longest of a run: in a thread it
    proceeds while the run draws its data and evaluates its start. (The evaluation's compile in a
    second thread gained nothing on 2 cores: three threads contend.)"""
    return pool.submit(chunk.lower(state, _steps(0), *args).compile)


def _divergence_hint(gd: GDConfig, optimizer) -> str:
    if optimizer is None:
        return f"GD diverged, lower the step sizes (gd.lr={gd.lr}, gd.lr_A={gd.lr_A})"
    return "the optimiser diverged, lower its step sizes"


def _check_start(cfg: TheoryConfig, task: Task | None, params, runs: int | None = None) -> None:
    """ConfigError unless the given task and parameters (of each run, with `runs`) have `cfg`'s shapes:
    another config's would index patches that do not exist, or fail deep inside the compiled step."""
    one = (lambda tree: tree) if runs is None else (lambda tree: jax.tree.map(lambda a: a[0], tree))
    if task is not None:
        check_task(cfg, one(task))
    if params is not None:
        check_params(one(params), cfg.D, cfg.d)


def _check_continues(init: FitResult, key, optimizer) -> None:
    """A ConfigError unless `init` (a `fit` or `fit_seeds` result) is the run of `key` and `optimizer`."""
    if not np.array_equal(jax.random.key_data(key), jax.random.key_data(init.key)):
        raise ConfigError(
            "init= continues the run of its own key (init.key): pass that key, or start "
            "a new run from its parameters with params= and task="
        )
    if jax.tree.structure(jax.eval_shape(optimizer.init, init.params)) != jax.tree.structure(
        init.opt_state
    ):
        raise ConfigError(
            "init= carries the state of another optimiser: pass the optimizer= it ran with"
        )


def _continued(init: FitResult, key, hyper: dict | None, mesh=None):
    """The training state that `init` (checked by `_check_continues`) ended in, with its step sizes,
    unless `hyper` (the caller's `hyperparams`) sets some."""
    step = jnp.full(
        jnp.shape(key), init.history["step"][-1], jnp.int32
    )  # one per seed in `fit_seeds`
    state = {
        "params": init.params,
        "opt_state": optim.with_hyperparameters(init.opt_state, hyper),
        "step": step,
    }
    return state if mesh is None else jax.device_put(state, mesh_lib.replicated(mesh))


def fit(
    key,
    cfg: TheoryConfig,
    gd: GDConfig,
    *,
    optimizer: optax.GradientTransformation | None = None,
    hyperparams: dict | None = None,
    init: FitResult | None = None,
    task: Task | None = None,
    params=None,
    train=None,
    test=None,
    devices=None,
    on_eval: Callable[[dict], None] | None = None,
) -> FitResult:
    """Train Eq. (T) from `key` for `gd.steps` steps; the final parameters, optimiser state and history.

    optimizer: any optax GradientTransformation (e.g. `optax.adam(1e-3)`); None is GD with step sizes
      `gd.lr` (v) and `gd.lr_A` (A) (`posattn.theory.optim`), the other's numbers then unused.
    hyperparams: values for the hyperparameters in the optimiser's state (`optax.inject_hyperparams`;
      the default's are "lr" and "lr_A"): like `gd`'s step counts they are arguments of the compiled
      chunk, so a loop over them compiles once.
    init: a `FitResult` of the same key and optimiser: the run goes on from its state for `gd.steps`
      more steps, its history continued (the task and samples are redrawn from the key, as they were);
      its step sizes are the run's (in its optimiser state) unless `hyperparams` sets them.
    task, params: default to draws from `key` (see `draw_run`); ConfigError for shapes of another cfg.
    train: the caller's training set (X (n, D, d), y (n,) in {-1, +1}) of (E), in place of the n = `gd.N`
      drawn. It needs the problem that made it: `task=` (the Task that made X: the test set is drawn
      from it and it is the result's task) or `test=`; without either, ConfigError (the key's task is
      another problem). With `test=` but no `task=`, the result's task and the history's parameter
      scalars (alpha, patch association, ...) are the key's task's: right when X was drawn from it
      (`posattn.theory.keys` shows how), not checked otherwise.
    test: the caller's test set (X, y), or a jittable sampler(key, n) -> (X, y), in place of the
      `gd.n_test` samples drawn (it gets the run's "test" key and `gd.n_test`; a sampler's shapes are
      checked, its labels are not: they are traced).
    devices: default all; they form the data mesh. on_eval(entry) sees every history entry as it
      arrives (progress reporting).
    Under `jax.jit` or `jax.vmap` it stops at once with a ConfigError naming what to use instead.
    """
    _check_not_traced("fit", key, task, params, train, test, hyperparams)
    hint = _divergence_hint(gd, optimizer)
    optimizer, hyper = _optimizer(optimizer, gd, hyperparams)
    if init is not None:
        if task is not None or params is not None:
            raise ConfigError(
                "init= continues a run from its own task and parameters: drop task= and params="
            )
        _check_continues(init, key, optimizer)
        task, params = init.task, init.params
    _check_callers_data(cfg, train, test, task)
    _check_start(cfg, task, params)
    mesh = mesh_lib.data_mesh(devices)
    compiled = _compiled(gd)
    draw = compile_options.jit_run_once(
        _draw, cfg=cfg, gd=compiled, mesh=mesh, test_sampler=test if callable(test) else None
    )
    # The optimiser's state starts in a program of its own: the draw serves every optimiser.
    init_state_fn = compile_options.jit_run_once(init_state, optimizer=optimizer)
    chunk = make_chunk_fn(cfg, compiled, mesh, optimizer)
    test = None if callable(test) else test
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        # The chunk needs only the shapes of the draw, so its compile starts before the draw runs.
        shapes = jax.eval_shape(draw, key, task, params, train, test)
        shapes = _placed(
            (jax.eval_shape(init_state_fn, shapes[0], hyperparams=hyper), *shapes[1:]), mesh
        )
        compiling = _compile_ahead(pool, chunk, shapes[0], shapes[1:])
        params, *data = draw(key, task, params, train, test)
        if (
            gd.risk == "population_exact"
        ):  # a start the chosen enumeration would get wrong ends here
            population.check_start(params, cfg, data[-1], gd.population_method)
        if init is None:
            start, state = _copy(params), init_state_fn(params, hyperparams=hyper)
        else:
            start, state = init.init_params, _continued(init, key, hyperparams, mesh)
        # A no-op for the arrays the draw placed; an empty training set (risks other than (E)) comes
        # out of the draw replicated, and the chunk's shardings want it split.
        state, *args = _placed((state, *data), mesh)

        t0 = time.perf_counter()
        state, history = _run_chunks(
            chunk,
            _evaluate_fn(cfg, compiled),
            state,
            args,
            gd.steps,
            gd.eval_every,
            on_eval,
            hint,
            compiling,
            None if init is None else init.history,
        )
    return _result(state, start, args[-1], history, t0, key)


def _shardings(mesh):
    """Where `fit` keeps (params or state, train, test, sample key, task) on `mesh`: the samples split
    over "data", the rest replicated."""
    batch, rep = mesh_lib.batch_sharding(mesh), mesh_lib.replicated(mesh)
    return rep, batch, batch, rep, rep


def _placed(run, mesh):
    """(state, train, test, sample key, task) of a run put where `fit` keeps them (`_shardings`), or,
    given their shapes (`jax.ShapeDtypeStruct`), their shapes with those shardings, so that a compile
    from shapes serves the calls on the arrays."""
    put = lambda tree, sharding: jax.tree.map(
        lambda a: (
            jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)
            if isinstance(a, jax.ShapeDtypeStruct)
            else jax.device_put(a, sharding)
        ),
        tree,
    )
    return tuple(put(part, sharding) for part, sharding in zip(run, _shardings(mesh)))


def _per_run(hyper: dict, runs: int) -> dict:
    """Hyperparameters with a leading run axis: scalars repeated, arrays of shape (runs, ...) as given."""
    out = {}
    for name, value in hyper.items():
        value = jnp.asarray(value)
        if value.ndim and value.shape[0] != runs:
            raise ConfigError(
                f"hyperparams[{name!r}] has shape {value.shape}: give a scalar or one value "
                f"per run ({runs},)"
            )
        out[name] = value if value.ndim else jnp.broadcast_to(value, (runs,))
    return out


# The arguments of a vmapped seed's chunk: (state, num_steps, train, test, key, task).
_OVER_SEEDS = (0, None, 0, 0, 0, 0)


@functools.lru_cache(maxsize=32)
def _seed_fns(cfg: TheoryConfig, gd: GDConfig, optimizer, test_sampler) -> tuple[Callable, ...]:
    """`fit_seeds`'s compiled (draw, chunk, evaluation), kept, so that calls that differ only in
    numbers that are not compiled in (`_NOT_COMPILED`, hyperparameters) reuse them."""

    def draw_one(run):
        key, hyper, train, test, task, params = run
        run = draw_run(
            key, cfg, gd, task=task, params=params, train=train, test=test_sampler or test
        )
        return _started(_laid_out(run, gd), optimizer, hyper)

    draw = jax.jit(lambda runs: mesh_lib.map_runs(draw_one, runs))

    @functools.partial(jax.jit, donate_argnums=0)
    def chunk(state, num_steps, train, test, keys, tasks):  # called as `make_chunk_fn`'s
        one = functools.partial(train_chunk, cfg=cfg, gd=gd, optimizer=optimizer)

        def local(runs, num_steps):  # a device's seeds
            state, *data = runs
            return jax.vmap(one, in_axes=_OVER_SEEDS)(state, num_steps, *data)

        return mesh_lib.split_runs(local, (state, train, test, keys, tasks), num_steps)

    evaluate_fn = jax.jit(jax.vmap(functools.partial(evaluate, cfg=cfg, gd=gd), in_axes=(0,) * 6))
    return draw, chunk, evaluate_fn


def fit_seeds(
    keys,
    cfg: TheoryConfig,
    gd: GDConfig,
    *,
    optimizer: optax.GradientTransformation | None = None,
    hyperparams: dict | None = None,
    init: FitResult | None = None,
    train=None,
    test=None,
    on_eval: Callable[[dict], None] | None = None,
) -> FitResult:
    """`fit` for many runs at once: every run is vmapped inside the same compiled chunks.

    keys: (S,) keys, one run each (its own task, start and samples, as `fit(keys[s], ...)` draws them).
    hyperparams: as in `fit`, each a scalar for every run or an array (S,) with one value per run: a
    sweep over step sizes in one call (e.g. {"lr": lrs} with the same key S times).
    train, test: as in `fit`, with a leading run axis (X (S, n, D, d), y (S, n)); a test sampler is
    called per run. A training set needs `test=` (ConfigError without it, unless `init` gives the
    tasks): each run's test set would otherwise come from its key's task, not the one that made X.
    init: a `fit_seeds` result of the same keys, continued.
    The result carries a leading seed axis on params, task and optimiser state, and history entries of
    shape (T, S).
    """
    _check_not_traced("fit_seeds", keys, train, test, hyperparams)
    hint = _divergence_hint(gd, optimizer)
    optimizer, hyper = _optimizer(optimizer, gd, hyperparams)
    hyper = _per_run(hyper, len(keys))
    _check_callers_data(cfg, train, test, None if init is None else init.task, len(keys))
    if init is not None:
        _check_continues(init, keys, optimizer)
        _check_start(cfg, init.task, init.params, len(keys))
    sampler = test if callable(test) else None
    draw, chunk, evaluate_fn = _seed_fns(cfg, _compiled(gd), optimizer, sampler)
    start_of = (None, None) if init is None else (init.task, init.params)
    state, *args = draw((keys, hyper, train, None if sampler else test, *start_of))
    if gd.risk == "population_exact":
        for s in range(len(keys)):
            population.check_start(
                jax.tree.map(lambda a: a[s], state["params"]),
                cfg,
                jax.tree.map(lambda a: a[s], args[-1]),
                gd.population_method,
            )
    history = None
    if init is not None:
        state = _continued(init, keys, hyperparams and _per_run(hyperparams, len(keys)))
        history = {**init.history, "step": np.repeat(init.history["step"][:, None], len(keys), 1)}
    start = _copy(state["params"]) if init is None else init.init_params
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        compiling = _compile_ahead(pool, chunk, state, args)
        state, history = _run_chunks(
            chunk,
            evaluate_fn,
            state,
            args,
            gd.steps,
            gd.eval_every,
            on_eval,
            hint,
            compiling,
            history,
        )
    history["step"] = history["step"][:, 0]  # the same for every run
    return _result(state, start, args[-1], history, t0, keys)


def fit_grid(
    keys,
    task: Task | None = None,
    A_init=None,
    *,
    cfg: TheoryConfig,
    gd: GDConfig,
    sizes: Sequence[int],
    train_A: bool = True,
    optimizer: optax.GradientTransformation | None = None,
    hyperparams: dict | None = None,
):
    """Train every (size, seed) pair for `gd.steps` on (E); returns the final history entries, each of
    shape (sizes, seeds).

    keys: (S,) seed keys. task: shared by every seed (None: each seed draws its own). A_init: the
    initial A (D, D) of every run (None: a0 I from `gd`). train_A=False trains v only (`step.descend`).
    ConfigError for a task or A_init of other shapes than `cfg`'s, or sizes that are not whole numbers
    >= 1.
    optimizer, hyperparams: as in `fit_seeds` (one value per seed, or one for all). One compiled call;
    the step count and step sizes are its arguments, so grids that differ only in them compile once.
    The final entry holds `test_error` (on the seed's `gd.n_test` samples), `patch_association_share`,
    `loss`, `alpha`, ...
    """
    optimizer, hyper = _optimizer(optimizer, gd, hyperparams)
    _check_start(cfg, task, None)
    if A_init is not None and jnp.shape(A_init) != (
        cfg.D,
        cfg.D,
    ):  # broadcast to every run's A below
        raise ConfigError(
            f"A_init has shape {jnp.shape(A_init)}: give one D x D = ({cfg.D}, {cfg.D}) "
            "matrix, the initial A of every run"
        )
    return _grid(
        keys,
        task,
        A_init,
        _per_run(hyper, len(keys)),
        _steps(gd.steps),
        cfg=cfg,
        gd=_compiled(gd),
        sizes=_sizes(sizes),
        train_A=train_A,
        optimizer=optimizer,
    )


def _sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    """`sizes` as a tuple of integers >= 1, or a ConfigError: a size 0 has no samples to average (a
    NaN loss) and int() would round a fractional one silently."""
    sizes = tuple(np.ravel(sizes).tolist())
    if not sizes or any(isinstance(n, bool) or not float(n).is_integer() or n < 1 for n in sizes):
        raise ConfigError(f"sizes={list(sizes)}: give sample sizes that are whole numbers >= 1")
    return tuple(int(n) for n in sizes)


@functools.partial(jax.jit, static_argnames=("cfg", "gd", "sizes", "train_A", "optimizer"))
def _grid(
    keys,
    task,
    A_init,
    hyper,
    steps,
    *,
    cfg: TheoryConfig,
    gd: GDConfig,
    sizes: tuple[int, ...],
    train_A: bool,
    optimizer,
):
    """`fit_grid` as one compiled program (its arguments)."""

    def draw(run, task):
        key, hyper = run
        params, *data = _laid_out(draw_run(key, cfg, gd, n_train=max(sizes), task=task), gd)
        if A_init is not None:
            params = {**params, "A": jnp.broadcast_to(A_init, params["A"].shape)}
        return _started((params, *data), optimizer, hyper)

    state, train, test, train_keys, tasks = mesh_lib.map_runs(draw, (keys, hyper), task)
    weights = (jnp.arange(max(sizes))[None, :] < jnp.asarray(sizes)[:, None]).astype(
        train.weight.dtype
    )

    def one(state, X, y, test, key, task, weight):
        return train_chunk(
            state,
            steps,
            type(train)(X, y, weight),
            test,
            key,
            task,
            cfg=cfg,
            gd=gd,
            optimizer=optimizer,
            train_A=train_A,
        )[1]

    over_seeds = jax.vmap(one, in_axes=(0, 0, 0, 0, 0, 0, None))

    def local(runs, weights):  # a device's seeds, with every size: entries (seeds, sizes)
        if (
            len(sizes) == 1
        ):  # a size axis of length 1 still batches the weights, and costs time on a CPU
            return jax.tree.map(lambda a: a[:, None], over_seeds(*runs, weights[0]))
        return jax.vmap(over_seeds, in_axes=(None,) * 6 + (0,), out_axes=1)(*runs, weights)

    entries = mesh_lib.split_runs(
        local, (state, train.X, train.y, test, train_keys, tasks), weights
    )
    return jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), entries)  # (sizes, seeds)


def size_groups(sizes: Sequence[int], spread: float = 4.0) -> list[tuple[int, ...]]:
    """Consecutive sorted sizes in groups whose largest is at most `spread` x its smallest."""
    groups = []
    for n in sorted(int(s) for s in sizes):
        if groups and n <= spread * groups[-1][0]:
            groups[-1] = (*groups[-1], n)
        else:
            groups.append((n,))
    return groups


def fit_sizes(
    keys,
    task=None,
    A_init=None,
    *,
    cfg: TheoryConfig,
    gd: GDConfig,
    sizes: Sequence[int],
    train_A: bool = True,
    spread: float = 4.0,
    optimizer: optax.GradientTransformation | None = None,
    hyperparams: dict | None = None,
) -> dict:
    """`fit_grid` over a wide log grid of sizes, one compiled call per `size_groups` group (so no run
    computes on more than `spread` x its own samples); entries concatenated in the order of `sizes`."""
    sizes = _sizes(sizes)  # before `size_groups` rounds them
    parts = [
        fit_grid(
            keys,
            task,
            A_init,
            cfg=cfg,
            gd=gd,
            sizes=group,
            train_A=train_A,
            optimizer=optimizer,
            hyperparams=hyperparams,
        )
        for group in size_groups(sizes, spread)
    ]
    entries = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    order = np.argsort(np.argsort(np.asarray(sizes)))
    return {k: v[order] for k, v in entries.items()}
