"""(sample size N) x (seed) runs of the theory regime as one compiled call: `fit_grid`, and `fit_sizes`
for wide grids.

Only the final history entry of each run is kept. A run at size N trains on the first N of its seed's
samples (the rest carry weight 0, in `step.Batch` or `fused.Tiles`), so sizes are nested subsamples
and differ only by N; every run then computes on the grid's largest size, so callers keep that
moderate (`fit_sizes` groups the sizes). The call has no host in the loop (`programs.grid_program`):
its callers read its entries, non-finite ones included.
"""

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
import optax

from posattn import mesh as mesh_lib
from posattn.errors import ConfigError
from posattn.theory import programs, seed_mesh
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import Task
from posattn.theory.draw import check_start
from posattn.theory.host_loop import steps_arg


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
    split_samples: bool = False,
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
    split_samples: as in `fit_seeds`: with fewer seeds than devices, each seed's samples split over
    the devices its seeds leave free (`posattn.theory.seed_mesh`), the numbers then equal to float32
    round-off.
    """
    optimizer, hyper = programs.resolve_optimizer(optimizer, gd, hyperparams)
    check_start(cfg, task, None)
    if A_init is not None and jnp.shape(A_init) != (
        cfg.D,
        cfg.D,
    ):  # broadcast to every run's A below
        raise ConfigError(
            f"A_init has shape {jnp.shape(A_init)}: give one D x D = ({cfg.D}, {cfg.D}) "
            "matrix, the initial A of every run"
        )
    # Seeds that do not divide over the devices are padded by copies of the last seed and cut back
    # after the program, which thus splits its seeds evenly (`mesh.pad_runs`).
    mesh = seed_mesh.sweep_mesh(len(keys), split_samples, gd)
    along_runs = None if mesh is None else mesh.shape[mesh_lib.RUNS]
    padded_keys, padded_hyper = mesh_lib.pad_runs(
        (keys, programs.per_run(hyper, len(keys))), along_runs
    )
    options = dict(
        cfg=cfg,
        gd=programs.compiled_key(gd),
        sizes=_sizes(sizes),
        train_A=train_A,
        optimizer=optimizer,
    )
    if mesh is None:
        entries = programs.grid_program(
            padded_keys, task, A_init, padded_hyper, steps_arg(gd.steps), **options
        )
    else:
        entries = seed_mesh.grid_program(
            padded_keys, task, A_init, padded_hyper, steps_arg(gd.steps), mesh=mesh, **options
        )
    cut = lambda a: a if a.shape[1] == len(keys) else a[:, : len(keys)]
    return {k: cut(v) for k, v in entries.items()}


def _sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    """`sizes` as a tuple of integers >= 1, or a ConfigError: a size 0 has no samples to average (a
    NaN loss) and int() would round a fractional one silently."""
    sizes = tuple(np.ravel(sizes).tolist())
    if not sizes or any(isinstance(n, bool) or not float(n).is_integer() or n < 1 for n in sizes):
        raise ConfigError(f"sizes={list(sizes)}: give sample sizes that are whole numbers >= 1")
    return tuple(int(n) for n in sizes)


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
    split_samples: bool = False,
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
            split_samples=split_samples,
        )
        for group in size_groups(sizes, spread)
    ]
    entries = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    order = np.argsort(np.argsort(np.asarray(sizes)))
    return {k: v[order] for k, v in entries.items()}
