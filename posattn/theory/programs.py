"""The compiled programs of the theory regime's run drivers, one mechanism for all three.

`fit` (`fit_programs`), `fit_seeds` (`seed_programs`) and `fit_grid` (`grid_program`) ask here for
their programs by (cfg, gd, optimiser, ...), and every program is compiled and kept under
`compiled_key(gd)`: `gd` with the fields no program reads as a constant at their defaults. The numbers
a sweep varies reach the programs as arguments, never as constants: the step count and the evaluation
cadence (`gd.steps`, `gd.eval_every`) and the step sizes, which live in the optimiser's state
(`resolve_optimizer`, `per_run`). A loop of driver calls over learning rates or step counts therefore
compiles its programs once. Each program is built from the same pieces: the run's draw
(`posattn.theory.draw`) and the pure training chunk `posattn.theory.step.train_chunk`, for one run
sharded over the devices' "data" mesh axis, or for many runs vmapped and split over the devices
(`posattn.mesh.map_runs`, `posattn.mesh.split_runs`: the drivers pad a run count that does not divide
over them once, before these programs, `posattn.mesh.pad_runs`), or for few runs split over "runs"
and their samples over "data" (`posattn.theory.seed_mesh`).
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from posattn import compile_options
from posattn import mesh as mesh_lib
from posattn.errors import ConfigError
from posattn.theory import optim
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.draw import draw_run, draw_seed, lay_out, with_state
from posattn.theory.step import evaluate, init_state, train_chunk

# GDConfig fields that no compiled program reads as a constant: the step count and cadence drive the
# host loop and are passed to the chunks as arguments, the step sizes live in the optimiser's state, and
# the final test size is the callers'. Programs are compiled and cached under `compiled_key(gd)`.
_NOT_COMPILED = ("lr", "lr_A", "steps", "eval_every", "n_final_test")


def compiled_key(gd: GDConfig) -> GDConfig:
    """`gd` with the fields of `_NOT_COMPILED` at their defaults: the key of its compiled programs."""
    defaults = GDConfig()
    return dataclasses.replace(gd, **{name: getattr(defaults, name) for name in _NOT_COMPILED})


def resolve_optimizer(
    optimizer: optax.GradientTransformation | None, gd: GDConfig, hyperparams: dict | None
) -> tuple[optax.GradientTransformation, dict]:
    """(optimiser, the hyperparameters its state starts from) of a driver's arguments: the default
    optimiser starts from `gd`'s step sizes, overridden by `hyperparams`; another from `hyperparams`
    alone (its own numbers where none)."""
    if optimizer is None:
        return optim.gradient_descent(), {**optim.gd_hyperparameters(gd), **(hyperparams or {})}
    return optimizer, dict(hyperparams or {})


def per_run(hyper: dict, runs: int) -> dict:
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


def shardings(mesh):
    """Where `fit` keeps (params or state, train, test, sample key, task) on `mesh`: the samples split
    over "data", the rest replicated."""
    batch, rep = mesh_lib.batch_sharding(mesh), mesh_lib.replicated(mesh)
    return rep, batch, batch, rep, rep


def place(run, mesh):
    """(state, train, test, sample key, task) of a run put where `fit` keeps them (`shardings`), or,
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
    return tuple(put(part, sharding) for part, sharding in zip(run, shardings(mesh)))


class Programs(NamedTuple):
    """A driver's compiled programs: its draw (laid out, and for `fit_seeds` started), the start of the
    optimiser's state (`fit` only: its draw serves every optimiser), the training chunk, called as
    chunk(state, num_steps, train, test, key, task), and the evaluation of a history entry."""

    draw: Callable
    init_state: Callable | None
    chunk: Callable
    evaluate: Callable


def _draw(key, task, params, train, test, *, cfg: TheoryConfig, gd: GDConfig, mesh, test_sampler):
    """`draw_run`, laid out, with its arrays where `fit` keeps them on `mesh` (`shardings`): compiled
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
    return jax.lax.with_sharding_constraint(lay_out(run, gd, shards), shardings(mesh))


@functools.lru_cache(maxsize=32)  # a loop of `fit` calls on one problem compiles once
def make_chunk_fn(cfg: TheoryConfig, gd: GDConfig, mesh, optimizer) -> Callable:
    """`train_chunk` compiled once, sample axis of the data sharded over `mesh`; `gd` as `compiled_key`
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


def fit_programs(cfg: TheoryConfig, gd: GDConfig, mesh, optimizer, test_sampler) -> Programs:
    """`fit`'s programs on `mesh`, kept under `compiled_key(gd)`. The draw, the state's start and the
    evaluation run once per run and compile with `compile_options.run_once`'s options; the chunk, whose
    run time matters, with XLA's."""
    gd = compiled_key(gd)
    return Programs(
        compile_options.jit_run_once(_draw, cfg=cfg, gd=gd, mesh=mesh, test_sampler=test_sampler),
        compile_options.jit_run_once(init_state, optimizer=optimizer),
        make_chunk_fn(cfg, gd, mesh, optimizer),
        compile_options.jit_run_once(evaluate, cfg=cfg, gd=gd),
    )


# The arguments of a vmapped seed's chunk: (state, num_steps, train, test, key, task).
_OVER_SEEDS = (0, None, 0, 0, 0, 0)


@functools.lru_cache(maxsize=32)
def _seed_programs(cfg: TheoryConfig, gd: GDConfig, optimizer, test_sampler) -> Programs:
    """`fit_seeds`'s compiled (draw, chunk, evaluation), kept, so that calls that differ only in
    numbers that are not compiled in (`_NOT_COMPILED`, hyperparameters) reuse them."""

    draw_one = functools.partial(
        draw_seed, cfg=cfg, gd=gd, optimizer=optimizer, test_sampler=test_sampler
    )
    draw = jax.jit(lambda runs: mesh_lib.map_runs(draw_one, runs))

    @functools.partial(jax.jit, donate_argnums=0)
    def chunk(state, num_steps, train, test, keys, tasks):  # called as `make_chunk_fn`'s
        one = functools.partial(train_chunk, cfg=cfg, gd=gd, optimizer=optimizer)

        def local(runs, num_steps):  # a device's seeds
            state, *data = runs
            return jax.vmap(one, in_axes=_OVER_SEEDS)(state, num_steps, *data)

        return mesh_lib.split_runs(local, (state, train, test, keys, tasks), num_steps)

    evaluate_fn = jax.jit(jax.vmap(functools.partial(evaluate, cfg=cfg, gd=gd), in_axes=(0,) * 6))
    return Programs(draw, None, chunk, evaluate_fn)


def seed_programs(cfg: TheoryConfig, gd: GDConfig, optimizer, test_sampler) -> Programs:
    """`fit_seeds`'s programs (every run vmapped, the runs split over the devices), kept under
    `compiled_key(gd)`: the draw starts each run's state too. On a ("runs", "data") mesh:
    `posattn.theory.seed_mesh.seed_programs`."""
    return _seed_programs(cfg, compiled_key(gd), optimizer, test_sampler)


@functools.partial(jax.jit, static_argnames=("cfg", "gd", "sizes", "train_A", "optimizer"))
def grid_program(
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
    """`fit_grid` as one compiled program (its arguments), `gd` as `compiled_key` gives it."""
    draw = functools.partial(
        grid_draw, cfg=cfg, gd=gd, sizes=sizes, A_init=A_init, optimizer=optimizer
    )
    state, train, test, train_keys, tasks = mesh_lib.map_runs(draw, (keys, hyper), task)
    weights = size_weights(sizes, train)

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


def grid_draw(run, task, *, cfg, gd, sizes, A_init, optimizer, shards: int = 1):
    """A `fit_grid` seed (key, hyperparameters) drawn with the grid's largest size of samples, laid
    out for `shards` devices, A set to `A_init` where given, and started."""
    key, hyper = run
    run = draw_run(key, cfg, gd, n_train=max(sizes), shards=shards, task=task)
    params, *data = lay_out(run, gd, shards)
    if A_init is not None:
        params = {**params, "A": jnp.broadcast_to(A_init, params["A"].shape)}
    return with_state((params, *data), optimizer, hyper)


def size_weights(sizes: tuple[int, ...], train) -> jax.Array:
    """(sizes, n): the weights of a grid's training samples at each size, 1 on the first `size`
    samples and 0 past them (and on the padding to a multiple of the devices)."""
    n = train.weight.shape[-1]
    return (jnp.arange(n)[None, :] < jnp.asarray(sizes)[:, None]).astype(train.weight.dtype)
