"""The seed axis of `posattn.vision.seeds`: S seeds' states, batches and numbers stacked on a leading
axis and laid out on the mesh (the state replicated, each seed's batch split along "data" as a separate
run's), the vmapped train and eval programs, and each seed's slice back.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from posattn.mesh import DATA, batch_sharding, replicate_from_host, replicated
from posattn.vision import evaluation, train_step


def seed_batch(local_batches: list[dict], mesh) -> dict:
    """Each seed's host-local batch (this process's rows) -> global arrays (S, B, ...), the B axis split
    along "data" (the seeds' batches laid out as a separate run's batch is)."""
    sharding = NamedSharding(mesh, P(None, DATA))
    out = {}
    for key in local_batches[0]:
        local = np.stack([np.asarray(b[key]) for b in local_batches])
        shape = (local.shape[0], local.shape[1] * jax.process_count(), *local.shape[2:])
        out[key] = jax.make_array_from_process_local_data(sharding, local, shape)
    return out


def stack(trees: list):
    """Pytrees of equal structure -> one pytree whose leaves have a leading axis over them."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees)


def seed_slice(tree, s: int):
    """Seed s's slice of a stacked host pytree, as a separate run's (0-d arrays stay arrays)."""
    return jax.tree.map(lambda a: np.asarray(a[s]), tree)


def compile_programs(setup, mesh, state_S, batch_S, hyper_S, eval_batch):
    """The vmapped train step (state, batch and hyperparameters with a seed axis) and eval step (the
    seeds' states on one shared evaluation batch), compiled for these arguments."""
    repl = replicated(mesh)
    step_S = jax.jit(
        jax.vmap(train_step.make_train_step(setup)),
        in_shardings=(repl, NamedSharding(mesh, P(None, DATA)), repl),
        out_shardings=(repl, repl),
        donate_argnums=(0,),
    )
    eval_step = jax.jit(
        jax.vmap(evaluation.make_eval_step(setup), in_axes=(0, None, 0)),
        in_shardings=(repl, batch_sharding(mesh), repl),
        out_shardings=repl,
        donate_argnums=(2,),
    )
    totals = zero_totals(len(hyper_S["seed"]), mesh)
    return (
        step_S.lower(state_S, batch_S, hyper_S).compile(),
        eval_step.lower(state_S, eval_batch, totals).compile(),
    )


def zero_totals(num_seeds: int, mesh) -> dict:
    """`evaluation.make_eval_step`'s totals, one per seed, replicated (made on the host: nothing to compile)."""
    zeros = {k: np.zeros((num_seeds,), np.float32) for k in ("correct", "count", "loss_sum")}
    return replicate_from_host(zeros, mesh)


def evaluate_seeds(eval_step, state_S, setup, mesh, num_seeds: int) -> list[dict]:
    """`evaluation.evaluate` of every seed: `evaluation.split_metrics` of each split the run evaluates, per seed."""
    per_split = evaluation.split_totals(
        eval_step, state_S, setup, mesh, lambda: zero_totals(num_seeds, mesh)
    )
    out = [{} for _ in range(num_seeds)]
    for split, totals in per_split.items():
        for s in range(num_seeds):
            out[s].update(evaluation.split_metrics(split, **{k: v[s] for k, v in totals.items()}))
    return out
