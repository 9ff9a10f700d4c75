"""The host loop of the run drivers `fit` and `fit_seeds` (`posattn.theory.gd`): compiled chunks of
`gd.eval_every` steps, an evaluation after each, and a stop at the first non-finite loss.

`run_chunks` stops at the first step whose loss is not finite (`NonFiniteLoss`, naming the step and
the likely cause): the chunk that produced it is replayed one step at a time from its start to find
the step.
"""

import concurrent.futures

import jax
import jax.numpy as jnp
import numpy as np

from posattn import mesh as mesh_lib
from posattn.errors import ConfigError
from posattn.theory.config import GDConfig


class NonFiniteLoss(ConfigError):
    """Training produced a non-finite loss: the run stops at that step; its step sizes (or its start)
    need changing."""


def copy_arrays(tree):
    """A copy of the arrays of `tree` where they lie: a buffer copy, where `jnp.copy` compiles a program
    per shape and sharding (0.5 s of a run's start at the paper preset). An array spread over several
    processes is copied onto its own sharding, which `jax.device_put` does by a program."""
    sharding = lambda a: a.sharding if mesh_lib.spans_processes(a) else None
    return jax.tree.map(lambda a: jax.device_put(a, sharding(a), may_alias=False), tree)


def to_host(tree) -> dict:
    return {k: np.asarray(v) for k, v in mesh_lib.gathered(tree).items()}


def _nonfinite_runs(entry: dict) -> np.ndarray:
    """Indices of the runs (seeds; [0] for a single run) whose loss or test loss is not finite."""
    bad = ~(np.isfinite(entry["loss"]) & np.isfinite(entry["test_loss"]))
    return np.flatnonzero(np.atleast_1d(bad))


def steps_arg(n: int):
    return jnp.asarray(n, jnp.int32)


def _first_nonfinite_step(chunk, state, step: int, n: int, args) -> tuple[int, dict]:
    """Replay steps step+1..step+n one at a time from `state` (the chunk's start); the first step whose
    entry is not finite, and that entry."""
    for t in range(step, step + n):
        state, entry = chunk(state, steps_arg(1), *args)
        entry = to_host(entry)
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


def run_chunks(
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

    `compiling`: the chunk's compile, started in a thread by the caller (`compile_ahead`); the start's
    evaluation compiles and runs meanwhile, and the chunks start once it is done."""
    step = int(np.ravel(mesh_lib.gathered(state["step"]))[0])
    entries = []
    if history is None:
        entries.append(to_host(evaluate_fn(state["params"], state["step"], *args)))
        if _nonfinite_runs(entries[0]).size:
            raise _stop(step, entries[0], "the start or the data is not finite")
        if on_eval:
            on_eval(entries[-1])
    if compiling is not None:
        compiling.result()
    end = step + steps
    while step < end:
        n = min(eval_every, end - step)
        start = copy_arrays(state)  # the chunk donates its state; kept for a replay
        state, entry = chunk(state, steps_arg(n), *args)
        entry = to_host(entry)
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


def compile_ahead(pool, chunk, state, args):
    """Submit to `pool` the compile of `chunk` from its arguments or their shapes
    (`jax.ShapeDtypeStruct`): the compiled program lands in jit's cache, where the chunk calls find it.
    XLA compiles a program on one core, and the chunk's compile is the longest of a run: in a thread it
    proceeds while the run draws its data and evaluates its start. (The evaluation's compile in a
    second thread gained nothing on 2 cores: three threads contend.)"""
    return pool.submit(chunk.lower(state, steps_arg(0), *args).compile)


def divergence_hint(gd: GDConfig, optimizer) -> str:
    if optimizer is None:
        return f"GD diverged, lower the step sizes (gd.lr={gd.lr}, gd.lr_A={gd.lr_A})"
    return "the optimiser diverged, lower its step sizes"
