"""`fit_seeds`' and `fit_grid`'s programs on a ("runs", "data") mesh (`posattn.mesh.runs_mesh`): few
seeds, many samples (their `split_samples=True`).

With as many seeds as devices or more, `posattn.theory.programs` gives each device whole seeds. With
fewer, most devices would wait (or train padded copies): here the seeds split over "runs" and each
seed's training samples over "data", so 2 seeds on 8 devices run on a (2, 4) mesh, a quarter of each
seed's samples on a device. A step of (E) then needs one reduction: the partial sums of the risk and
its gradient are added over "data" (`jax.lax.psum` inside `jax.shard_map`, `step.train_steps`'s
`sample_axis`). The loop is a `shard_map` rather than left to the compiler's sharding propagation,
which cannot split the CPU kernel's custom call (`posattn.theory.one_pass_kernel`) and would gather
each seed's samples onto every device around it; inside, each device calls the kernel on its own block.
The draw and the evaluations have no custom call: they are vmapped over the seeds and partitioned by
the compiler from the shardings of their results (the draws are the same bits on any mesh: JAX's
threefry is partitionable).

The numbers are those of the one-axis programs up to float32 round-off: the sums over the samples are
taken in another order (blocks of N / |data| samples, then a sum over the devices), as `fit` sharded
over the devices differs from a vmapped seed on one (tests/theory/test_gd.py).
"""

import functools

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from posattn.errors import ConfigError
from posattn.mesh import DATA, RUNS, runs_mesh
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.draw import draw_seed
from posattn.theory.programs import Programs, compiled_key, grid_draw, size_weights
from posattn.theory.step import evaluate, train_steps


def sweep_mesh(runs: int, split_samples: bool, gd: GDConfig) -> jax.sharding.Mesh | None:
    """The ("runs", "data") mesh of a driver's `split_samples=True` for `runs` seeds, or None (the
    one-axis programs) where it is False or the seeds leave no device free; ConfigError for a risk
    other than (E), which has no training samples to split."""
    if not split_samples:
        return None
    if gd.risk != "empirical":
        raise ConfigError(
            f"split_samples=True splits the training samples of (E); risk={gd.risk!r} has "
            "none: drop split_samples or pass risk='empirical'"
        )
    mesh = runs_mesh(runs)
    return mesh if mesh.shape[DATA] > 1 else None


def _constrain(tree, sharding):
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)


@functools.lru_cache(maxsize=32)
def _seed_programs(cfg: TheoryConfig, gd: GDConfig, optimizer, test_sampler, mesh) -> Programs:
    shards = mesh.shape[DATA]
    over_runs, over_samples = NamedSharding(mesh, P(RUNS)), NamedSharding(mesh, P(RUNS, DATA))

    draw_one = functools.partial(
        draw_seed, cfg=cfg, gd=gd, optimizer=optimizer, test_sampler=test_sampler, shards=shards
    )

    @jax.jit
    def draw(runs):
        state, train, test, keys, tasks = jax.vmap(draw_one)(runs)
        return (
            _constrain(state, over_runs),
            _constrain(train, over_samples),  # `fused.Tiles` split as blocks of samples, too
            _constrain(test, over_samples),
            _constrain(keys, over_runs),
            _constrain(tasks, over_runs),
        )

    evaluate_all = jax.vmap(functools.partial(evaluate, cfg=cfg, gd=gd), in_axes=(0,) * 6)
    steps = functools.partial(train_steps, cfg=cfg, gd=gd, optimizer=optimizer, sample_axis=DATA)

    def local(state, num_steps, train, keys, tasks):  # a device's seeds, its block of their samples
        return jax.vmap(steps, in_axes=(0, None, 0, 0, 0))(state, num_steps, train, keys, tasks)

    @functools.partial(jax.jit, donate_argnums=0)
    def chunk(state, num_steps, train, test, keys, tasks):
        # check_vma=False: the kernel's outputs carry no mark of varying over the mesh; the state that
        # leaves is the same on every "data" device, each having added the same partial sums.
        state = jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P(RUNS), P(), P(RUNS, DATA), P(RUNS), P(RUNS)),
            out_specs=P(RUNS),
            check_vma=False,
        )(state, num_steps, train, keys, tasks)
        return state, evaluate_all(state["params"], state["step"], train, test, keys, tasks)

    return Programs(draw, None, chunk, jax.jit(evaluate_all))


def seed_programs(cfg: TheoryConfig, gd: GDConfig, optimizer, test_sampler, mesh) -> Programs:
    """`fit_seeds`'s programs on `mesh` ("runs", "data"), called as `programs.seed_programs`' are and
    kept as they are: the seeds (a multiple of the "runs" devices) split over "runs", the training and
    test samples over "data". (E) only: the other risks have no training samples to split."""
    return _seed_programs(cfg, compiled_key(gd), optimizer, test_sampler, mesh)


@functools.partial(jax.jit, static_argnames=("cfg", "gd", "sizes", "train_A", "optimizer", "mesh"))
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
    mesh,
):
    """`programs.grid_program` on `mesh` ("runs", "data"): the seeds (a multiple of the "runs"
    devices) split over "runs", each seed's samples, and the weights that pick a size's first ones,
    over "data"; the final entries, (sizes, seeds)."""
    draw = functools.partial(
        grid_draw,
        cfg=cfg,
        gd=gd,
        sizes=sizes,
        A_init=A_init,
        optimizer=optimizer,
        shards=mesh.shape[DATA],
    )
    over_runs, over_samples = NamedSharding(mesh, P(RUNS)), NamedSharding(mesh, P(RUNS, DATA))
    state, train, test, keys, tasks = jax.vmap(draw, in_axes=(0, None))((keys, hyper), task)
    state, keys, tasks = _constrain((state, keys, tasks), over_runs)
    train, test = _constrain((train, test), over_samples)
    weights = _constrain(size_weights(sizes, train), NamedSharding(mesh, P(None, DATA)))
    Samples = type(train)
    run = functools.partial(
        train_steps, cfg=cfg, gd=gd, optimizer=optimizer, train_A=train_A, sample_axis=DATA
    )

    def local(state, steps, X, y, keys, tasks, weights):  # a device's seeds, every size
        one = lambda state, X, y, key, task, w: run(state, steps, Samples(X, y, w), key, task)
        over_seeds = jax.vmap(one, in_axes=(0, 0, 0, 0, 0, None))
        return jax.vmap(over_seeds, in_axes=(None,) * 5 + (0,))(state, X, y, keys, tasks, weights)

    finals = jax.shard_map(  # (sizes, seeds); check_vma=False as in `seed_programs`' chunk
        local,
        mesh=mesh,
        in_specs=(P(RUNS), P(), P(RUNS, DATA), P(RUNS, DATA), P(RUNS), P(RUNS), P(None, DATA)),
        out_specs=P(None, RUNS),
        check_vma=False,
    )(state, steps, train.X, train.y, keys, tasks, weights)

    def entry(state, X, y, test, key, task, w):
        return evaluate(
            state["params"], state["step"], Samples(X, y, w), test, key, task, cfg=cfg, gd=gd
        )

    over_seeds = jax.vmap(entry, in_axes=(0, 0, 0, 0, 0, 0, None))
    return jax.vmap(over_seeds, in_axes=(0,) + (None,) * 5 + (0,))(
        finals, train.X, train.y, test, keys, tasks, weights
    )
