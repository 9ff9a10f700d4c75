"""Theorem 3.2 of JSL22, made explicit: a transformer of Eq. (T) that generalises without patch association.

The construction (docs/decisions.md, The other claims): every row i of a set S_l attends to the whole of another set S_pi(l),
with pi(l) = l + 1 mod L (a permutation without fixed points), and v = alpha w*:

    A_ij = beta if j in S_pi(l(i)) else 0 (diagonal included),    v = alpha w*.

With beta / sqrt(d) large, row i averages the C patches of S_pi(l), so with orthogonal noise
u_i = D alpha s_pi(l) / C, where s_m = sum_{j in S_m} <w*, X_j>. F sums over the rows, and pi is a
bijection, so every set's sum still enters F exactly once per row of its preimage:

    F(X) = C sum_m sigma(D alpha s_m / C),

the same function as a model whose rows attend to their own set. So it generalises as well as perfect
patch association does, while the top-C entries of every row lie in S_pi(l) and miss S_l entirely.
"""

import jax
import jax.numpy as jnp

from posattn.theory.config import TheoryConfig
from posattn.theory.data import Task, same_set_mask, set_index

BETA = 20.0  # logit gap beta / sqrt(d): attention outside S_pi(l) weighs e^-20 per entry


def shifted_sets(task: Task) -> jax.Array:
    """int (D,): for each patch i in S_l, the set pi(l) = l + 1 mod L its row attends to."""
    L = task.sets.shape[0]
    return (set_index(task.sets) + 1) % L


def construction_params(cfg: TheoryConfig, task: Task, alpha: float | None = None) -> dict:
    """The (A, v) above; alpha defaults to C / D, so that u_i = s_pi(l) lies in [-C, C]."""
    beta = BETA * jnp.sqrt(cfg.d) if cfg.temperature else BETA
    target = shifted_sets(task)
    A = jnp.where(set_index(task.sets)[None, :] == target[:, None], beta, 0.0)
    alpha = cfg.C / cfg.D if alpha is None else alpha
    return {"A": A, "v": alpha * task.w_star}


def own_set_in_top_c(A: jax.Array, task: Task) -> jax.Array:
    """bool (D,): whether any of row i's C largest entries (diagonal included) lies in i's own set.

    Entries tied with the C-th largest count as in the top C, so a tie cannot hide an own-set entry.
    """
    C = task.sets.shape[1]
    kth = -jnp.sort(-A, axis=1)[:, C - 1]
    in_top = A >= kth[:, None]
    return (in_top & same_set_mask(task.sets)).any(axis=1)
