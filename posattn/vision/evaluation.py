"""Evaluation of an image run: every example of each split it evaluates counted once, over every host.

`make_eval_step` sums correct predictions, examples and the loss of one global batch inside the
compiled step; `evaluate` runs it over the splits of `Setup.eval_splits` (the validation examples a run
holds out, the test set unless it is not read) and gives `split_metrics` of each.
"""

import jax
import jax.numpy as jnp
import optax

from posattn.mesh import global_batch, replicated
from posattn.vision.setup import Setup
from posattn.vision.state import model_variables


def make_eval_step(setup: Setup):
    """(state, batch, totals) -> totals plus the sums over the unmasked rows of a global batch.

    totals = {"correct", "count", "loss_sum"}. Accumulating inside the compiled step (rather than
    adding the per-batch sums eagerly) keeps a multi-host evaluation to one program per batch: eager
    ops on arrays that span processes are programs of their own, interleaved with the collectives.
    """

    def step(state, batch, totals):
        logits = setup.model.apply(
            model_variables(state), setup.eval_inputs(batch["image"]), train=False
        )
        labels = jax.nn.one_hot(batch["label"], setup.info.num_classes, dtype=jnp.float32)
        mask = batch["mask"].astype(jnp.float32)
        correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
        loss = optax.softmax_cross_entropy(logits.astype(jnp.float32), labels)
        sums = {
            "correct": jnp.sum(correct * mask),
            "count": jnp.sum(mask),
            "loss_sum": jnp.sum(loss * mask),
        }
        return jax.tree.map(jnp.add, totals, sums)

    return step


def _zero_totals() -> dict:
    return {k: jnp.zeros((), jnp.float32) for k in ("correct", "count", "loss_sum")}


def split_metrics(split: str, correct, count, loss_sum) -> dict:
    """{split}_accuracy = correct / count, {split}_loss (mean) and {split}_examples of one evaluation."""
    count = int(count)
    return {
        f"{split}_accuracy": float(correct) / count,
        f"{split}_loss": float(loss_sum) / count,
        f"{split}_examples": count,
    }


def split_totals(eval_step, state, setup: Setup, mesh, zeros) -> dict:
    """{split: the eval step's totals on the host} for every split the run evaluates (`Setup.eval_splits`:
    its validation examples, its test set), each example counted once, summed over all hosts; `zeros()`
    makes the totals a split starts from (one set, or one per vmapped seed)."""
    out = {}
    for split in setup.eval_splits:
        totals = zeros()
        for local in setup.eval_batches(
            split
        ):  # the split is decoded once per Setup, not per evaluation
            totals = eval_step(state, global_batch(local, mesh), totals)
        out[split] = jax.device_get(totals)
    return out


def evaluate(eval_step, state, setup: Setup, mesh) -> dict:
    """`split_metrics` of every split the run evaluates (`split_totals`)."""
    # the zeros made where they live (no host transfer); a module-level function, so every evaluation
    # reuses one compiled program
    zeros = lambda: jax.jit(_zero_totals, out_shardings=replicated(mesh))()
    out = {}
    for split, totals in split_totals(eval_step, state, setup, mesh, zeros).items():
        out.update(split_metrics(split, **totals))
    return out


def evaluation_line(evals: dict) -> str:
    """'validation accuracy 0.9012 loss 0.3101  test accuracy ...' of the splits `evals` holds."""
    return "  ".join(
        f"{split} accuracy {evals[f'{split}_accuracy']:.4f} loss {evals[f'{split}_loss']:.4f}"
        for split in ("validation", "test")
        if f"{split}_accuracy" in evals
    )
