"""The run drivers of the theory regime: training on Eq. (T) for one run (`fit`) or many seeds
(`fit_seeds`); (sample size) x (seed) grids are `posattn.theory.grid`.

Every run draws the same things from its key (`posattn.theory.draw.draw_run`, with the streams of
`posattn.theory.keys`): its task, its start, its training and test samples; a caller may give its own
training set and test set (or test sampler) instead (`fit`'s `train` and `test`). Both drivers, and
`grid.fit_grid`, run the same compiled training chunk (`posattn.theory.step.train_chunk`), compiled
and kept by one mechanism (`posattn.theory.programs`):

- `fit`: one run, history every `gd.eval_every` steps, sample axis sharded over the devices' "data"
  mesh axis (`posattn.mesh`), so the same code runs on one CPU, a GPU or a TPU pod slice; a run
  continues from its result (`init=`), its step count, optimiser state and history going on;
- `fit_seeds`: many seeds vmapped inside the same chunks, as `fit(keys[s])` would run each, each with
  its own step sizes if asked (`hyperparams`).

The optimiser is any optax `GradientTransformation` (`optimizer=`), by default GD with step sizes
`gd.lr` for v and `gd.lr_A` for A (`posattn.theory.optim`). The numbers a sweep varies reach the
compiled programs as arguments, never as constants: the step count and the evaluation cadence
(`gd.steps`, `gd.eval_every`), and the step sizes, which live in the optimiser's state (`gd.lr`,
`gd.lr_A` for the default; `hyperparams=` for any optimiser built with `optax.inject_hyperparams`).
A loop of `fit` calls over learning rates or step counts compiles its programs once, and

    fit_seeds(jnp.stack([key] * 4), cfg, gd, hyperparams={"lr": jnp.array([1e-3, 3e-3, 1e-2, 3e-2])})

trains one problem at four learning rates in one vmapped call. `fit` and `fit_seeds` run their loop
from Python (`posattn.theory.host_loop`), so `jax.jit` and `jax.vmap` cannot trace them (they say so,
and name these instead); `step.train_chunk` is the pure, jittable and vmappable loop underneath.

Seeds are split over the devices, each device drawing and training its own (`posattn.mesh.map_runs`,
`posattn.mesh.split_runs`); a count that does not divide over them is padded once with copies of the
last seed (`posattn.mesh.pad_runs`), which the results leave out, so each seed is bitwise the run it
is in a sweep of as many seeds as devices. With fewer seeds than devices, `split_samples=True` splits
each seed's samples over the devices its seeds leave free (`posattn.theory.seed_mesh`). The devices
may be those of several processes (a multi-host run, `posattn.mesh.initialize_distributed`): every
process makes the same call and gets the whole result, gathered from all of them
(`posattn.mesh.gathered`); a seed sweep then gives the bits of one process with as many devices
(tests/theory/test_distributed.py).

`fit` and `fit_seeds` stop at the first step whose loss is not finite (`NonFiniteLoss`, naming the
step and the likely cause): the chunk that produced it is replayed one step at a time from its start to
find the step.
"""

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from posattn import mesh as mesh_lib
from posattn.errors import ConfigError
from posattn.theory import optim, population, programs, seed_mesh
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import Task
from posattn.theory.draw import check_callers_data, check_start
from posattn.theory.host_loop import (  # noqa: F401 (gd.NonFiniteLoss: what `fit` raises)
    NonFiniteLoss,
    compile_ahead,
    copy_arrays,
    divergence_hint,
    run_chunks,
    to_host,
)


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


def _result(state, start, task, history: dict, t0: float, key) -> FitResult:
    """The FitResult of a driver's final training state, its arrays on this host (gathered from every
    process of a multi-process run: `posattn.mesh.gathered`)."""
    state, start, task = mesh_lib.gathered((state, start, task))
    state = jax.device_get(state)
    return FitResult(
        state["params"], start, task, history, time.perf_counter() - t0, state["opt_state"], key
    )


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
    hint = divergence_hint(gd, optimizer)
    optimizer, hyper = programs.resolve_optimizer(optimizer, gd, hyperparams)
    if init is not None:
        if task is not None or params is not None:
            raise ConfigError(
                "init= continues a run from its own task and parameters: drop task= and params="
            )
        _check_continues(init, key, optimizer)
        task, params = init.task, init.params
    check_callers_data(cfg, train, test, task)
    check_start(cfg, task, params)
    mesh = mesh_lib.data_mesh(devices)
    fns = programs.fit_programs(cfg, gd, mesh, optimizer, test if callable(test) else None)
    test = None if callable(test) else test
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        # The chunk needs only the shapes of the draw, so its compile starts before the draw runs.
        shapes = jax.eval_shape(fns.draw, key, task, params, train, test)
        shapes = programs.place(
            (jax.eval_shape(fns.init_state, shapes[0], hyperparams=hyper), *shapes[1:]), mesh
        )
        compiling = compile_ahead(pool, fns.chunk, shapes[0], shapes[1:])
        params, *data = fns.draw(key, task, params, train, test)
        # a start the chosen enumeration would get wrong ends here
        if gd.risk == "population_exact":
            population.check_start(params, cfg, data[-1], gd.population_method)
        if init is None:
            start, state = copy_arrays(params), fns.init_state(params, hyperparams=hyper)
        else:
            start, state = init.init_params, _continued(init, key, hyperparams, mesh)
        # A no-op for the arrays the draw placed; an empty training set (risks other than (E)) comes
        # out of the draw replicated, and the chunk's shardings want it split.
        state, *args = programs.place((state, *data), mesh)

        t0 = time.perf_counter()
        state, history = run_chunks(
            fns.chunk,
            fns.evaluate,
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
    split_samples: bool = False,
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
    split_samples: with fewer seeds than devices, split each seed's training and test samples over the
      devices its seeds leave free (a ("runs", "data") mesh, `posattn.mesh.runs_mesh`: 2 seeds on 8
      devices, (2, 4); with none left free, as without it); the risk (E) only. The numbers then equal
      those without it up to float32 round-off, the sums over the samples being taken in another
      order (`posattn.theory.seed_mesh`).
    The result carries a leading seed axis on params, task and optimiser state, and history entries of
    shape (T, S).
    """
    _check_not_traced("fit_seeds", keys, train, test, hyperparams)
    hint = divergence_hint(gd, optimizer)
    optimizer, hyper = programs.resolve_optimizer(optimizer, gd, hyperparams)
    hyper = programs.per_run(hyper, len(keys))
    check_callers_data(cfg, train, test, None if init is None else init.task, len(keys))
    if init is not None:
        _check_continues(init, keys, optimizer)
        check_start(cfg, init.task, init.params, len(keys))
    sampler = test if callable(test) else None
    mesh = seed_mesh.sweep_mesh(len(keys), split_samples, gd)
    if mesh is None:
        fns = programs.seed_programs(cfg, gd, optimizer, sampler)
    else:
        fns = seed_mesh.seed_programs(cfg, gd, optimizer, sampler, mesh)
    along_runs = None if mesh is None else mesh.shape[mesh_lib.RUNS]
    # Runs that do not divide over the devices are padded once, here, by copies of the last run (the
    # draw and every chunk then split the runs evenly, with no communication between them) and cut
    # back at the end: the history as it arrives, the result's arrays after the last chunk.
    runs = len(keys)
    start_of = (None, None) if init is None else (init.task, init.params)
    drawn = (keys, hyper, train, None if sampler else test, *start_of)
    state, *args = fns.draw(mesh_lib.pad_runs(drawn, along_runs))
    if gd.risk == "population_exact":
        for s in range(runs):
            population.check_start(
                jax.tree.map(lambda a: a[s], state["params"]),
                cfg,
                jax.tree.map(lambda a: a[s], args[-1]),
                gd.population_method,
            )
    history = None
    if init is not None:
        state = _continued(init, keys, hyperparams and programs.per_run(hyperparams, runs))
        state = mesh_lib.pad_runs(state, along_runs)
        history = {**init.history, "step": np.repeat(init.history["step"][:, None], runs, 1)}
    start = copy_arrays(state["params"]) if init is None else init.init_params
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        compiling = compile_ahead(pool, fns.chunk, state, args)
        state, history = run_chunks(
            *_real_runs(fns.chunk, fns.evaluate, runs),
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
    state, start, task = mesh_lib.first_runs((state, start, args[-1]), runs)
    return _result(state, start, task, history, t0, keys)


def _real_runs(chunk, evaluate, runs: int):
    """(chunk, evaluation) of a seed program whose history entries hold the first `runs` runs alone, on
    this host: the padded copies (`mesh.pad_runs`) never reach the history, the stop on a non-finite
    loss, or `on_eval`."""
    cut = lambda entry: {k: np.asarray(v)[:runs] for k, v in to_host(entry).items()}

    def real_chunk(*args):
        state, entry = chunk(*args)
        return state, cut(entry)

    return real_chunk, lambda *args: cut(evaluate(*args))
