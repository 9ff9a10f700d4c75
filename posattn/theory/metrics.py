"""What the theory measures: patch association (Definition 2.2) and the scalars of the proof sketch.

All functions are pure and jittable; they take the task because S_1..S_L and w* define them.
"""

import jax
import jax.numpy as jnp

from posattn.errors import ConfigError
from posattn.theory.data import Task, same_set_mask
from posattn.theory.model import check_params


def check_attention_matrix(A: jax.Array, task: Task) -> None:
    """ConfigError unless A is the D x D attention matrix of Eq. (T) for `task`'s D patches."""
    D = task.sets.size
    if jnp.shape(A) != (D, D):
        raise ConfigError(
            f"A has shape {jnp.shape(A)}: the attention matrix of Eq. (T) is D x D = ({D}, {D}) "
            f"for this task's {D} patches"
        )


def patch_association(A: jax.Array, task: Task):
    """Definition 2.2 of JSL22: for every l and i in S_l, the C largest entries of row i of A are S_l.

    The diagonal is included (the definition's "C largest entries" of row i). A row passes when every
    entry inside its set is strictly larger than every entry outside it, so ties count as failure.

    Returns (rows bool (D,), verdict bool scalar: all rows pass). ConfigError if A is not D x D.
    """
    check_attention_matrix(A, task)
    mask = same_set_mask(task.sets)
    lowest_inside = jnp.where(mask, A, jnp.inf).min(axis=1)
    highest_outside = jnp.where(mask, -jnp.inf, A).max(axis=1)
    rows = lowest_inside > highest_outside
    return rows, rows.all()


@jax.jit  # run op by op, its half-dozen small programs each compiled on first use
def top_c_overlap(A: jax.Array, task: Task) -> jax.Array:
    """Mean share of row i's C largest entries that fall in its own set (chance: C / D)."""
    check_attention_matrix(A, task)
    C = task.sets.shape[1]
    top = jnp.argsort(-A, axis=1)[:, :C]
    mask = same_set_mask(task.sets)
    return jnp.take_along_axis(mask, top, axis=1).mean()


@jax.jit  # as `top_c_overlap`
def off_diagonal_overlap(A: jax.Array, task: Task) -> jax.Array:
    """Mean share of row i's C - 1 largest off-diagonal entries that fall in S_l(i) minus i (chance:
    (C - 1) / (D - 1)). The frozen diagonal a0 sits in every row's top C once a0 is large, which would
    add 1 / C to `top_c_overlap` whatever GD learnt; this counts only the entries GD moves."""
    check_attention_matrix(A, task)
    D, C = A.shape[0], task.sets.shape[1]
    eye = jnp.eye(D, dtype=bool)
    top = jnp.argsort(-jnp.where(eye, -jnp.inf, A), axis=1)[:, : C - 1]
    return jnp.take_along_axis(same_set_mask(task.sets) & ~eye, top, axis=1).mean()


def within_across_means(A: jax.Array, task: Task):
    """Mean off-diagonal entry of A within sets (gamma of the proof sketch) and across sets (rho)."""
    check_attention_matrix(A, task)
    mask = same_set_mask(task.sets)
    off_diagonal = ~jnp.eye(A.shape[0], dtype=bool)
    within = mask & off_diagonal
    across = ~mask
    return (
        jnp.where(within, A, 0).sum() / within.sum(),
        jnp.where(across, A, 0).sum() / across.sum(),
    )


def value_alignment(v: jax.Array, w_star: jax.Array):
    """alpha = <v, w*>, cos(v, w*) and ||v_perp||, the part of v orthogonal to w*."""
    alpha = v @ w_star
    v_perp = jnp.linalg.norm(v - alpha * w_star)
    return alpha, alpha / jnp.maximum(jnp.linalg.norm(v), 1e-30), v_perp


def parameter_metrics(params, task: Task) -> dict:
    """The per-step scalars of the history that depend on the parameters only; ConfigError for
    parameters of another shape than the task's ({"A": (D, D), "v": (d,)})."""
    check_params(params, task.sets.size, task.w_star.shape[0])
    alpha, cos, v_perp = value_alignment(params["v"], task.w_star)
    within, across = within_across_means(params["A"], task)
    rows, _ = patch_association(params["A"], task)
    return {
        "alpha": alpha,
        "cos_v_wstar": cos,
        "v_perp_norm": v_perp,
        "A_within": within,
        "A_across": across,
        "patch_association_share": rows.mean(),
    }
