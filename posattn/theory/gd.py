"""The run driver of the theory regime: GD on Eq. (T) for one run, many seeds, or seeds x sample sizes.

Every run draws the same things from its key (`draw_run`, with the streams of `posattn.theory.keys`):
its task, its start, its training and test samples. The three entry points run the same compiled GD
chunk (`posattn.theory.step.train_chunk`):

- `fit`: one run, history every `gd.eval_every` steps, sample axis sharded over the devices' "data"
  mesh axis (`posattn.mesh`), so the same code runs on one CPU, a GPU or a TPU pod slice;
- `fit_seeds`: many seeds vmapped inside the same chunks, as `fit(keys[s])` would run each;
- `fit_grid` (`fit_sizes` for wide grids): (sample size N) x (seed) runs as one compiled call, only the
  final history entry of each. A run at size N trains on the first N of its seed's samples (the rest
  carry weight 0, in `step.Batch` or `fused.Tiles`), so sizes are nested subsamples and differ only
  by N; every run then computes on the grid's largest size, so callers keep that moderate
  (`fit_sizes` groups the sizes).

Seeds are split over the devices when they divide evenly, each device drawing and training its own
(`posattn.mesh.map_runs`, `posattn.mesh.split_runs`).

`fit` and `fit_seeds` stop at the first GD step whose loss is not finite (`NonFiniteLoss`, naming the
step and the likely cause): the chunk that produced it is replayed one step at a time from its start to
find the step. `fit_grid` is one compiled call with no host in the loop; its callers read its entries.
"""
import concurrent.futures
import functools
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posattn import compile_options, mesh as mesh_lib
from posattn.errors import ConfigError
from posattn.theory import fused, population
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import Task, make_task, sample
from posattn.theory.keys import run_keys
from posattn.theory.model import init_params
from posattn.theory.step import evaluate, make_batch, train_chunk


class NonFiniteLoss(ConfigError):
    """GD produced a non-finite loss: the run stops at that step; its step sizes (or its start) need
    changing."""


class FitResult(NamedTuple):
    params: dict
    init_params: dict
    task: Task
    history: dict  # name -> np.ndarray over the evaluation steps
    seconds: float


def draw_start(key, cfg: TheoryConfig, gd: GDConfig, task: Task | None = None, params=None):
    """(task, params) of the run of `key`: the given ones, or drawn from its "task" and "init" streams."""
    keys = run_keys(key)
    task = make_task(keys["task"], cfg) if task is None else task
    params = init_params(keys["init"], cfg, gd, task.w_star) if params is None else params
    return task, params


def draw_run(key, cfg: TheoryConfig, gd: GDConfig, *, n_train: int | None = None, shards: int = 1,
             task: Task | None = None, params=None):
    """Everything a run draws from its key: (params, train, test, sample key, task).

    `task` and `params` default to draws from `key` (pass them for transfer or a shared start). The
    training set has `n_train` samples, by default N for the empirical risk and none otherwise (the
    other risks draw fresh samples or need none); the test set has `gd.n_test`. Both are padded to a
    multiple of `shards`.
    """
    keys = run_keys(key)
    task, params = draw_start(key, cfg, gd, task, params)
    if n_train is None:
        n_train = gd.N if gd.risk == "empirical" else 0
    train = make_batch(*sample(keys["train"], cfg, task, n_train), shards)
    test = make_batch(*sample(keys["test"], cfg, task, gd.n_test), shards)
    return params, train, test, keys["train"], task


def _draw_fn(cfg: TheoryConfig, gd: GDConfig, mesh) -> Callable:
    """`draw_run` as one compiled program whose arrays come out where `fit` keeps them on `mesh`
    (`_shardings`). Run eagerly, its dozens of small operations each compiled on first use; drawn on one
    device, the samples were then cut into shards by slicing programs that took XLA 1.6 s to compile
    at the paper preset (docs/benchmarks.md). The draws are the same bits on any mesh (JAX's threefry
    is partitionable)."""
    return compile_options.jit_run_once(_draw, cfg=cfg, gd=gd, mesh=mesh)


def _draw(key, task, params, *, cfg: TheoryConfig, gd: GDConfig, mesh):
    run = draw_run(key, cfg, gd, shards=mesh.devices.size, task=task, params=params)
    return jax.lax.with_sharding_constraint(_laid_out(run, mesh.devices.size), _shardings(mesh))


def _laid_out(run, shards: int = 1):
    """`draw_run`'s run with its training set, if any, laid out once for the one-pass step of (E) that
    the chunks take on it (`posattn.theory.fused`): as drawn for the CPU kernel, else one block of
    tiles per device (`fused.tiled`)."""
    params, train, *rest = run
    if train.X.shape[0] and not fused.uses_kernel(train.X.dtype):
        train = fused.tiled(*train, shards)
    return (params, train, *rest)


@functools.lru_cache(maxsize=32)  # a loop of `fit` calls on one problem compiles once
def make_chunk_fn(cfg: TheoryConfig, gd: GDConfig, mesh) -> Callable:
    """`train_chunk` compiled once per `num_steps`, sample axis of the data sharded over `mesh`.

    Called as chunk(params, step, train, test, key, task, num_steps): `jit` takes no keyword arguments
    beside `in_shardings`, so `num_steps` comes last by position, declared static by its name.
    """
    sharding = mesh_lib.batch_sharding(mesh)
    rep = mesh_lib.replicated(mesh)

    def chunk(params, step, train, test, key, task, num_steps):
        return train_chunk(params, step, train, test, key, task, num_steps=num_steps, cfg=cfg, gd=gd,
                           sharding=sharding)

    return jax.jit(
        chunk,
        static_argnames="num_steps",
        in_shardings=(rep, rep, sharding, sharding, rep, rep),
        out_shardings=(rep, rep),
        donate_argnums=0,
    )


def _evaluate_fn(cfg: TheoryConfig, gd: GDConfig) -> Callable:
    return compile_options.jit_run_once(evaluate, cfg=cfg, gd=gd)


def _copy(tree):
    """A copy of the arrays of `tree` where they lie: a buffer copy, where `jnp.copy` compiles a program
    per shape and sharding (0.5 s of a run's start at the paper preset)."""
    return jax.device_put(tree, may_alias=False)


def _to_host(tree) -> dict:
    return {k: np.asarray(v) for k, v in tree.items()}


def _nonfinite_runs(entry: dict) -> np.ndarray:
    """Indices of the runs (seeds; [0] for a single run) whose loss or test loss is not finite."""
    bad = ~(np.isfinite(entry["loss"]) & np.isfinite(entry["test_loss"]))
    return np.flatnonzero(np.atleast_1d(bad))


def _first_nonfinite_step(chunk, params, step: int, n: int, args) -> tuple[int, dict]:
    """Replay steps step+1..step+n one at a time from `params` (the chunk's start); the first step whose
    entry is not finite, and that entry."""
    for t in range(step, step + n):
        params, entry = chunk(params, jnp.asarray(t), *args, 1)
        entry = _to_host(entry)
        if _nonfinite_runs(entry).size:
            return t + 1, entry
    return step + n, entry  # the replay stayed finite (rounding differs from the scan): the chunk's end


def _stop(step: int, entry: dict, hint: str) -> NonFiniteLoss:
    runs = _nonfinite_runs(entry)
    which = f" (runs {runs.tolist()} of the seeds)" if np.ndim(entry["loss"]) else ""
    loss = np.ravel(entry["loss"])[runs[0]]
    return NonFiniteLoss(f"non-finite loss ({loss}) at GD step {step}{which}: {hint}; the run stopped there "
                         "(its history ends at the last finite evaluation)")


def _run_chunks(chunk, evaluate_fn, params, args, steps, eval_every, on_eval, hint,
                compiling: concurrent.futures.Future | None = None):
    """The host loop: an evaluation at step 0, then compiled chunks of `eval_every` steps; a non-finite
    loss raises NonFiniteLoss naming the first step that has one (`hint`: its likely cause).

    `compiling`: the chunk's compile, started in a thread by the caller (`_compile_ahead`); the step-0
    evaluation compiles and runs meanwhile, and the chunks start once it is done."""
    history = [_to_host(evaluate_fn(params, 0, *args))]
    if compiling is not None:
        compiling.result()
    if _nonfinite_runs(history[0]).size:
        raise _stop(0, history[0], "the start or the data is not finite")
    if on_eval:
        on_eval(history[-1])
    step = 0
    while step < steps:
        n = min(eval_every, steps - step)
        start = _copy(params)  # the chunk donates its parameters; kept for a replay
        params, entry = chunk(params, jnp.asarray(step), *args, n)
        entry = _to_host(entry)
        if _nonfinite_runs(entry).size:
            raise _stop(*_first_nonfinite_step(chunk, start, step, n, args), hint)
        step += n
        history.append(entry)
        if on_eval:
            on_eval(history[-1])
    return params, {k: np.stack([h[k] for h in history]) for k in history[0]}


def _compile_ahead(pool, chunk, params, args, steps: int, eval_every: int):
    """Submit to `pool` the compile of `chunk` for a run's first chunk, from its arguments or their
    shapes (`jax.ShapeDtypeStruct`): the compiled program lands in jit's cache, where the chunk calls
    find it. XLA compiles a program on one core, and the chunk's compile is the longest of a run: in a
    thread it proceeds while the run draws its data and evaluates its start. None when steps is 0.
    (The evaluation's compile in a second thread gained nothing on 2 cores: three threads contend.)"""
    if not steps:
        return None
    return pool.submit(chunk.lower(params, jnp.asarray(0), *args, min(eval_every, steps)).compile)


def _divergence_hint(gd: GDConfig) -> str:
    return f"GD diverged, lower the step sizes (gd.lr={gd.lr}, gd.lr_A={gd.lr_A})"


def fit(key, cfg: TheoryConfig, gd: GDConfig, *, task: Task | None = None, params=None,
        devices=None, on_eval: Callable[[dict], None] | None = None) -> FitResult:
    """Run GD from `key` and return the final parameters and the history.

    `task` and `params` default to draws from `key` (see `draw_run`); `devices` (default: all) form the
    data mesh; `on_eval(entry)` sees every history entry as it arrives (progress reporting).
    """
    mesh = mesh_lib.data_mesh(devices)
    draw = _draw_fn(cfg, gd, mesh)
    chunk = make_chunk_fn(cfg, gd, mesh)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        # The chunk needs only the shapes of the draw, so its compile starts before the draw runs.
        shapes = _placed(jax.eval_shape(draw, key, task, params), mesh)
        compiling = _compile_ahead(pool, chunk, shapes[0], shapes[1:], gd.steps, gd.eval_every)
        params, train, test, sample_key, task = draw(key, task, params)
        if gd.risk == "population_exact":  # a start the chosen enumeration would get wrong ends here
            population.check_start(params, cfg, task, gd.population_method)
        start = _copy(params)
        # A no-op for the arrays the draw placed; an empty training set (risks other than (E)) comes
        # out of the draw replicated, and the chunk's shardings want it split.
        params, *args = _placed((params, train, test, sample_key, task), mesh)

        t0 = time.perf_counter()
        params, history = _run_chunks(chunk, _evaluate_fn(cfg, gd), params, args, gd.steps, gd.eval_every,
                                      on_eval, _divergence_hint(gd), compiling)
    return FitResult(jax.device_get(params), start, task, history, time.perf_counter() - t0)


def _shardings(mesh):
    """Where `fit` keeps (params, train, test, sample key, task) on `mesh`: the samples split over
    "data", the rest replicated."""
    batch, rep = mesh_lib.batch_sharding(mesh), mesh_lib.replicated(mesh)
    return rep, batch, batch, rep, rep


def _placed(run, mesh):
    """(params, train, test, sample key, task) of a run put where `fit` keeps them (`_shardings`), or,
    given their shapes (`jax.ShapeDtypeStruct`), their shapes with those shardings, so that a compile
    from shapes serves the calls on the arrays."""
    put = lambda tree, sharding: jax.tree.map(
        lambda a: (jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)
                   if isinstance(a, jax.ShapeDtypeStruct) else jax.device_put(a, sharding)), tree)
    return tuple(put(part, sharding) for part, sharding in zip(run, _shardings(mesh)))


def fit_seeds(keys, cfg: TheoryConfig, gd: GDConfig, *,
              on_eval: Callable[[dict], None] | None = None) -> FitResult:
    """`fit` for many seeds at once: every seed's run is vmapped inside the same compiled chunks.

    keys: (S,) keys, one run each (its own task, start and samples, as `fit(keys[s], ...)` draws them).
    The result carries a leading seed axis on params and task, and history entries of shape (T, S).
    """
    draw = jax.jit(lambda ks: mesh_lib.map_runs(lambda k: _laid_out(draw_run(k, cfg, gd)), ks))
    params, train, test, sample_keys, tasks = draw(keys)  # the compiled chunks follow their split
    if gd.risk == "population_exact":
        for s in range(len(keys)):
            population.check_start(jax.tree.map(lambda a: a[s], params), cfg,
                                   jax.tree.map(lambda a: a[s], tasks), gd.population_method)
    start = _copy(params)
    over_seeds = (0, None, 0, 0, 0, 0)

    @functools.partial(jax.jit, static_argnames="num_steps", donate_argnums=0)
    def chunk(params, step, train, test, keys, tasks, num_steps):  # called as `make_chunk_fn`'s
        one = functools.partial(train_chunk, num_steps=num_steps, cfg=cfg, gd=gd)

        def local(runs, step):  # a device's seeds
            params, *data = runs
            return jax.vmap(one, in_axes=over_seeds)(params, step, *data)

        return mesh_lib.split_runs(local, (params, train, test, keys, tasks), step)

    evaluate_fn = jax.jit(jax.vmap(functools.partial(evaluate, cfg=cfg, gd=gd), in_axes=over_seeds))
    args = (train, test, sample_keys, tasks)
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        compiling = _compile_ahead(pool, chunk, params, args, gd.steps, gd.eval_every)
        params, history = _run_chunks(chunk, evaluate_fn, params, args, gd.steps, gd.eval_every, on_eval,
                                      _divergence_hint(gd), compiling)
    history["step"] = history["step"][:, 0] if history["step"].ndim == 2 else history["step"]
    return FitResult(jax.device_get(params), start, tasks, history, time.perf_counter() - t0)


@functools.partial(jax.jit, static_argnames=("cfg", "gd", "sizes", "train_A"))
def fit_grid(keys, task: Task | None = None, A_init=None, *, cfg: TheoryConfig, gd: GDConfig,
             sizes: tuple[int, ...], train_A: bool = True):
    """Train every (size, seed) pair for `gd.steps` on (E); returns the final history entries, each of
    shape (sizes, seeds).

    keys: (S,) seed keys. task: shared by every seed (None: each seed draws its own). A_init: the
    initial A of every run (None: a0 I from `gd`). train_A=False trains v only (`step.train_chunk`).
    The final entry holds `test_error` (on the seed's `gd.n_test` samples), `patch_association_share`,
    `loss`, `alpha`, ...
    """
    draw = lambda k, t: _laid_out(draw_run(k, cfg, gd, n_train=max(sizes), task=t))
    params, train, test, train_keys, tasks = mesh_lib.map_runs(draw, keys, task)
    if A_init is not None:
        params = {**params, "A": jnp.broadcast_to(A_init, params["A"].shape)}
    weights = (jnp.arange(max(sizes))[None, :] < jnp.asarray(sizes)[:, None]).astype(train.weight.dtype)

    def one(params, X, y, test, key, task, weight):
        return train_chunk(params, 0, type(train)(X, y, weight), test, key, task, num_steps=gd.steps,
                           cfg=cfg, gd=gd, train_A=train_A)[1]

    over_seeds = jax.vmap(one, in_axes=(0, 0, 0, 0, 0, 0, None))

    def local(runs, weights):  # a device's seeds, with every size: entries (seeds, sizes)
        if len(sizes) == 1:  # a size axis of length 1 still batches the weights, and costs time on a CPU
            return jax.tree.map(lambda a: a[:, None], over_seeds(*runs, weights[0]))
        return jax.vmap(over_seeds, in_axes=(None,) * 6 + (0,), out_axes=1)(*runs, weights)

    entries = mesh_lib.split_runs(local, (params, train.X, train.y, test, train_keys, tasks), weights)
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


def fit_sizes(keys, task=None, A_init=None, *, cfg: TheoryConfig, gd: GDConfig, sizes: Sequence[int],
              train_A: bool = True, spread: float = 4.0) -> dict:
    """`fit_grid` over a wide log grid of sizes, one compiled call per `size_groups` group (so no run
    computes on more than `spread` x its own samples); entries concatenated in the order of `sizes`."""
    parts = [fit_grid(keys, task, A_init, cfg=cfg, gd=gd, sizes=group, train_A=train_A)
             for group in size_groups(sizes, spread)]
    entries = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    order = np.argsort(np.argsort(np.asarray(sizes)))
    return {k: v[order] for k, v in entries.items()}
