"""Theorem 5.1 of JSL22: patch association makes learning a new feature on the same partition cheap.

Pre-train Eq. (T) on w* (GD on (E), `gd.fit`), then learn a downstream problem with the same partition
S_1..S_L and a new unit feature w' orthogonal to w* from N' samples, two ways (docs/decisions.md, The other claims):
(i) A frozen at its pre-trained value and v re-trained from a fresh initialisation; (ii) (A, v) from
scratch (A = a0 I). Both use the same GD settings, seeds, data and test sets, over a log grid of N';
each is a `posattn.theory.grid.fit_sizes` grid (seeds vmapped in one compiled call per group of sizes).

The number compared is the smallest N' whose mean test error over the seeds reaches `target`, for
each way, and their ratio scratch / frozen (Theorem 5.1: frozen needs far fewer samples).
"""

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from posattn.papers.jsl22.sweep import summarise
from posattn.theory import gd as gd_lib
from posattn.theory import grid as grid_lib
from posattn.theory import keys as keys_lib
from posattn.theory import metrics
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import Task, unit_vector


def orthogonal_feature(key, w_star: jax.Array) -> jax.Array:
    """A unit vector drawn uniformly among those orthogonal to w*."""
    w = unit_vector(key, w_star.shape[0])
    w = w - (w @ w_star) * w_star
    return w / jax.numpy.linalg.norm(w)


def downstream_task(key, task: Task) -> Task:
    """Same partition, new feature w' orthogonal to w* (Section 5)."""
    return Task(task.sets, orthogonal_feature(key, task.w_star))


def smallest_size(sizes: Sequence[int], errors: Sequence[float], target: float) -> int | None:
    """The first N' of the grid whose mean test error is <= target (None if none is)."""
    for n, e in zip(sizes, errors):
        if e <= target:
            return int(n)
    return None


def transfer(
    key,
    cfg: TheoryConfig,
    gd: GDConfig,
    *,
    pretrain_N: int,
    pretrain_steps: int | None = None,
    sizes: Sequence[int],
    seeds: int = 10,
    target: float = 0.05,
    n_test: int = 2000,
    spread: float = 2.0,
) -> dict:
    """Pre-train on w*, then (i) frozen A vs (ii) scratch on w' at every N' of `sizes`.

    Returns the pre-training outcome, per-way summaries (`claims.sweep.summarise`), the smallest N' of each
    way that reaches `target` and their ratio (None where a way never reaches it on the grid; a lower
    bound, `ratio_is_lower_bound`, where frozen A reaches it at the grid's smallest N').
    """
    streams = keys_lib.transfer_keys(key)
    pre = gd_lib.fit(
        streams["pretrain"],
        cfg,
        dataclasses.replace(gd, N=pretrain_N, steps=pretrain_steps or gd.steps),
    )
    _, associated = metrics.patch_association(pre.params["A"], pre.task)
    down = downstream_task(streams["downstream"], pre.task)
    keys = keys_lib.seed_keys(int(jax.random.randint(streams["seeds"], (), 0, 2**30)), seeds)
    sizes = tuple(int(n) for n in sizes)
    gd = dataclasses.replace(gd, n_test=n_test)
    ways = {
        "frozen_A": grid_lib.fit_sizes(
            keys, down, pre.params["A"], cfg=cfg, gd=gd, sizes=sizes, train_A=False, spread=spread
        ),
        "scratch": grid_lib.fit_sizes(keys, down, None, cfg=cfg, gd=gd, sizes=sizes, spread=spread),
    }
    out = {
        "pretrain": {
            "N": pretrain_N,
            "patch_association": bool(associated),
            "test_error": float(pre.history["test_error"][-1]),
            "seconds": pre.seconds,
        },
        "target": target,
        "pretrained_A": np.asarray(pre.params["A"]).tolist(),
    }
    for name, entries in ways.items():
        summary = summarise(entries, sizes)
        summary["smallest_size"] = smallest_size(sizes, summary["test_error_mean"], target)
        out[name] = summary
    n_frozen, n_scratch = out["frozen_A"]["smallest_size"], out["scratch"]["smallest_size"]
    out["ratio"] = None if n_frozen is None or n_scratch is None else n_scratch / n_frozen
    # Frozen A already at the target on the grid's smallest N': its own smallest N' may be smaller still.
    out["ratio_is_lower_bound"] = n_frozen == min(sizes)
    return out
