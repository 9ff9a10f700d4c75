"""Many GD runs of Eq. (T) as one compiled call: seeds and sample sizes vmapped (SPEC 1.6, issue 4).

A grid of runs is (sample size N) x (seed). Every seed draws its own task (or shares a given one),
initialisation, N_max training samples and a test set; the run at size N trains on the first N of its
seed's samples (the rest carry weight 0, `gd.Batch`), so sizes are nested subsamples and differ only
by N. Both axes are `jax.vmap`s over `gd.train_chunk` (all `gd.steps` in one `lax.scan`) inside one
`jax.jit`: a sweep is one compiled call, not a Python loop over runs. The price of vmapping sizes is
that every run computes on N_max samples; callers keep the grid's largest size moderate. Seeds are
split over the devices when they divide evenly (`posattn.mesh.map_runs`), so a sweep spreads
over a GPU host or a pod slice with no communication between devices.

`train_A=False` trains v only, from a given A (transfer with A frozen, Theorem 5.1).
"""
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from posattn import mesh as mesh_lib
from posattn.theory import gd as gd_lib
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import Task, make_task, sample
from posattn.theory.model import empirical_risk, init_params


def seed_data(key, cfg: TheoryConfig, gd: GDConfig, n_train: int, n_test: int, task: Task | None = None):
    """One seed's draws, from the same key streams as `gd.fit`: (params, train, test, key, task)."""
    keys = gd_lib.split_keys(key)
    task = make_task(keys["task"], cfg) if task is None else task
    params = init_params(keys["init"], cfg, gd, task.w_star)
    train = gd_lib.make_batch(*sample(keys["train"], cfg, task, n_train))
    test = gd_lib.make_batch(*sample(keys["test"], cfg, task, n_test))
    return params, train, test, keys["train"], task


def train_run(params, train, test, key, task, *, cfg: TheoryConfig, gd: GDConfig, train_A: bool = True):
    """`gd.steps` of GD from `params`; returns (params, the final history entry of `gd.evaluate`)."""
    if train_A:
        return gd_lib.train_chunk(params, 0, train, test, key, task, gd.steps, cfg=cfg, gd=gd)

    def one_step(v, _):  # A frozen: gradient descent on v alone
        grad = jax.grad(lambda v: empirical_risk({**params, "v": v}, train.X, train.y, cfg, train.weight))
        return v - gd.lr * grad(v), None

    v, _ = jax.lax.scan(one_step, params["v"], None, length=gd.steps)
    params = {**params, "v": v}
    return params, gd_lib.evaluate(params, gd.steps, train, test, key, task, cfg=cfg, gd=gd)


@functools.partial(jax.jit, static_argnames=("cfg", "gd", "sizes", "n_test", "train_A"))
def run_grid(keys, task: Task | None = None, A_init=None, *, cfg: TheoryConfig, gd: GDConfig,
             sizes: tuple[int, ...], n_test: int = 2000, train_A: bool = True):
    """Train every (size, seed) pair; returns the final history entries, each of shape (sizes, seeds).

    keys: (S,) seed keys. task: shared by every seed (None: each seed draws its own). A_init: the
    initial A of every run (None: a0 I from `gd`). The final entry holds `test_error` (on the seed's
    `n_test` samples), `patch_association_share`, `loss`, `alpha`, ...
    """
    draw = lambda k, t: seed_data(k, cfg, gd, max(sizes), n_test, t)
    params, train, test, train_keys, tasks = mesh_lib.map_runs(draw, keys, task)
    if A_init is not None:
        params = {**params, "A": jnp.broadcast_to(A_init, params["A"].shape)}
    weights = (jnp.arange(max(sizes))[None, :] < jnp.asarray(sizes)[:, None]).astype(train.weight.dtype)

    def one(params, X, y, weight, test, key, task):
        return train_run(params, gd_lib.Batch(X, y, weight), test, key, task, cfg=cfg, gd=gd,
                         train_A=train_A)[1]

    over_seeds = jax.vmap(one, in_axes=(0, 0, 0, None, 0, 0, 0))
    if len(sizes) == 1:  # a size axis of length 1 still batches the weights, and costs time on a CPU
        entries = over_seeds(params, train.X, train.y, weights[0], test, train_keys, tasks)
        return jax.tree.map(lambda a: a[None], entries)
    over_sizes = jax.vmap(over_seeds, in_axes=(None, None, None, 0, None, None, None))
    return over_sizes(params, train.X, train.y, weights, test, train_keys, tasks)


def seed_keys(seed: int, n: int) -> jax.Array:
    return jax.random.split(jax.random.PRNGKey(seed), n)


def summarise(entries: dict, sizes: Sequence[int]) -> dict:
    """Per size: success rate of patch association and the test error's mean, std and quartiles."""
    err = np.asarray(entries["test_error"])
    success = np.asarray(entries["patch_association_share"]) >= 1.0
    return {
        "sizes": [int(n) for n in sizes],
        "seeds": int(err.shape[1]),
        "patch_association_rate": success.mean(1).tolist(),
        "test_error_mean": err.mean(1).tolist(),
        "test_error_std": err.std(1).tolist(),
        "test_error_q25": np.quantile(err, 0.25, axis=1).tolist(),
        "test_error_q75": np.quantile(err, 0.75, axis=1).tolist(),
    }


def size_groups(sizes: Sequence[int], spread: float = 4.0) -> list[tuple[int, ...]]:
    """Consecutive sorted sizes in groups whose largest is at most `spread` x its smallest."""
    groups = []
    for n in sorted(int(s) for s in sizes):
        if groups and n <= spread * groups[-1][0]:
            groups[-1] = (*groups[-1], n)
        else:
            groups.append((n,))
    return groups


def run_sizes(keys, task=None, A_init=None, *, cfg: TheoryConfig, gd: GDConfig, sizes: Sequence[int],
              n_test: int = 2000, train_A: bool = True, spread: float = 4.0) -> dict:
    """`run_grid` over a wide log grid of sizes, one compiled call per `size_groups` group (so no run
    computes on more than `spread` x its own samples); entries concatenated in the order of `sizes`."""
    parts = [run_grid(keys, task, A_init, cfg=cfg, gd=gd, sizes=group, n_test=n_test, train_A=train_A)
             for group in size_groups(sizes, spread)]
    entries = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    order = np.argsort(np.argsort(np.asarray(sizes)))
    return {k: v[order] for k, v in entries.items()}
