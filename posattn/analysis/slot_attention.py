"""Where a trained ViT attends on LWLC23's token grids, and attention-based token pruning (LWLC23 Section
"token sparsification", its deeper-ViT experiment on real images; docs/decisions.md, "Composite grids").

One token per slot (the patch is the base image's side). From the last block's attention weights,
averaged over the heads, `pooled_query_attention` keeps the rows of the queries that feed the classifier: every
patch token with global average pooling, the CLS token with CLS pooling. Then
- `relevant_mass`: the attention mass on label-relevant slots, from the relevant slots' queries (or the
  CLS token), averaged per grid and over grids (LWLC23 Proposition 2's quantity; chance = R / 9);
- `received`: the attention each slot receives, averaged over those queries (no labels);
- `prune_least_attended`: the keep mask that removes the k least attended slots of each grid, which
  the ViT's `keep_BxN` takes (removed tokens leave the softmax and the pooling).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data.token_grid import RELEVANT
from posattn.vision.models import attention_maps


def pooled_query_attention(model, variables, inputs_BxHxWxC) -> jax.Array:
    """att_BxQxN: the last block's attention over the patch keys, mean over heads, for the queries the
    classifier pools: all patch tokens (gap, Q = N) or the CLS token (cls, Q = 1)."""
    maps = attention_maps(model, variables, inputs_BxHxWxC)
    att_BxTxT = maps[max(maps)].mean(axis=1)  # "block_{i:02d}": the largest name is the last block
    if model.pool == "cls":
        # The CLS token's row over the patches, renormalised (its weight on itself is not a slot's).
        row_Bx1xN = att_BxTxT[:, :1, 1:]
        return row_Bx1xN / row_Bx1xN.sum(-1, keepdims=True)
    return att_BxTxT


def relevant_mass(att_BxQxN: jax.Array, types_BxN: jax.Array) -> jax.Array:
    """Per grid: the attention mass on relevant slots, averaged over the relevant slots' queries (or the
    single CLS query). (B,) ConfigError unless types_BxN has a type per slot of att_BxQxN's keys (and,
    for Q > 1, per query); a grid with no relevant slot gives NaN (no query to average over)."""
    B, Q, N = jnp.shape(att_BxQxN)
    if jnp.shape(types_BxN) != (B, N) or Q not in (1, N):
        raise ConfigError(
            f"attention of shape {(B, Q, N)} and slot types of shape {jnp.shape(types_BxN)}: "
            "give types (B, N) of the N slots the keys are, and Q = N queries or 1 (CLS)"
        )
    relevant_BxN = (types_BxN == RELEVANT).astype(jnp.float32)
    mass_BxQ = (att_BxQxN * relevant_BxN[:, None, :]).sum(-1)
    if att_BxQxN.shape[1] == 1:
        return mass_BxQ[:, 0]
    return (mass_BxQ * relevant_BxN).sum(-1) / relevant_BxN.sum(-1)


def received(att_BxQxN: jax.Array) -> jax.Array:
    """The attention each slot receives, averaged over the pooled queries (no labels). (B, N)"""
    return att_BxQxN.mean(axis=1)


def prune_least_attended(scores_BxN: jax.Array, k: int) -> jax.Array:
    """Keep mask (B, N) without the k slots of lowest score in each grid (ties: the lower index goes);
    ConfigError unless 0 <= k < N (k = N would remove every token of the grid)."""
    if isinstance(k, bool) or int(k) != k or not 0 <= k < jnp.shape(scores_BxN)[-1]:
        raise ConfigError(f"k={k!r}: give 0 <= k < {jnp.shape(scores_BxN)[-1]} slots to remove")
    rank_BxN = jnp.argsort(jnp.argsort(scores_BxN, axis=-1, stable=True), axis=-1, stable=True)
    return rank_BxN >= k


def _grid_metrics(model, variables, inputs_BxHxWxC, types_BxN):
    att_BxQxN = pooled_query_attention(model, variables, inputs_BxHxWxC)
    return relevant_mass(att_BxQxN, types_BxN), received(att_BxQxN)


def _correct(model, variables, inputs_BxHxWxC, labels_B, keep_BxN):
    logits = model.apply(variables, inputs_BxHxWxC, train=False, keep_BxN=keep_BxN)
    return jnp.argmax(logits, -1) == labels_B


def evaluate(
    model, variables, inputs_NxHxWxC, labels_N, types_NxS, ks, *, seed: int = 0, batch: int = 500
) -> dict:
    """The slot metrics of a trained ViT on the grids: relevant attention mass, and test accuracy after
    removing the k least attended slots (and, as the baseline, k random slots) for each k of `ks`; with
    the share of removed slots that were relevant. Inputs are the model's (normalised) images.
    ConfigError unless inputs, labels and slot types hold the same number of grids."""
    if not len(inputs_NxHxWxC) == len(labels_N) == len(types_NxS):
        raise ConfigError(
            f"{len(inputs_NxHxWxC)} inputs, {len(labels_N)} labels and {len(types_NxS)} slot "
            "types: give one of each per grid"
        )
    rng = np.random.default_rng(seed)
    grid_metrics = jax.jit(functools.partial(_grid_metrics, model))
    correct_fn = jax.jit(functools.partial(_correct, model))
    mass, correct = [], {"attention": {k: [] for k in ks}, "random": {k: [] for k in ks}}
    removed_relevant = {"attention": {k: [] for k in ks}, "random": {k: [] for k in ks}}
    for start in range(0, len(labels_N), batch):
        x, y = inputs_NxHxWxC[start : start + batch], labels_N[start : start + batch]
        types = jnp.asarray(types_NxS[start : start + batch])
        m, scores = grid_metrics(variables, x, types)
        mass.append(np.asarray(m))
        policies = {"attention": scores, "random": jnp.asarray(rng.random(scores.shape))}
        for policy, s in policies.items():
            for k in ks:
                keep = prune_least_attended(s, k)
                correct[policy][k].append(np.asarray(correct_fn(variables, x, y, keep)))
                removed_relevant[policy][k].append(
                    np.asarray(((~keep) & (types == RELEVANT)).sum(-1))
                )
    out = {"relevant_mass": float(np.concatenate(mass).mean()), "ks": list(ks)}
    for policy in correct:
        out[f"accuracy_{policy}_pruned"] = [
            float(np.concatenate(correct[policy][k]).mean()) for k in ks
        ]
        out[f"relevant_removed_{policy}"] = [
            float(np.concatenate(removed_relevant[policy][k]).sum() / max(k * len(labels_N), 1))
            for k in ks
        ]
    return out
