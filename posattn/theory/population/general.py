r"""Exact population risk (P) of Eq. (T) for any A: enumeration of every (signal set, delta pattern).

With y = +1 (sigma is odd) and v = alpha w* + v_perp, the pre-activations are u = alpha M c + M g with
M = D S, c_j = 1 on the signal set S_l(X) and delta_j in {+1, -1, 0} (probabilities q/2, q/2, 1-q)
elsewhere. This path sums over all L * 3^(D-C) values of (l(X), delta) (D=16, C=4: 4 * 531,441), in
chunks under `lax.map`; the Gaussian part g enters through the heat expansion of
`posattn.theory.population.heat`. It is the reference that the multiset path is checked against.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from posattn.theory.config import TheoryConfig
from posattn.theory.data import Task
from posattn.theory.model import attention
from posattn.theory.population import heat

MAX_GENERAL_PATTERNS = 2**22  # L * 3^(D-C) patterns at most (D=16, C=4: 2.1M)
CHUNK_ROWS = 2**15  # patterns (times signal sets) per `lax.map` step


def general_pattern_count(cfg: TheoryConfig) -> int:
    """L * 3^(D-C): the (signal set, delta pattern) pairs the general path sums over."""
    return cfg.L * 3 ** (cfg.D - cfg.C)


def general_risk(A, alpha, t, cfg: TheoryConfig, task: Task) -> jax.Array:
    """(P) for any A by enumeration of (signal set, delta pattern) ("for a general A").

    u = alpha M c with M = D S: the signal set contributes alpha M 1_{S_l}, the other patches
    alpha M[:, others] delta. Chunks of 3^k patterns go through `lax.map` under `jax.checkpoint`, so the
    backward pass recomputes a chunk instead of storing all of them.
    """
    D, C, L = cfg.D, cfg.C, cfg.L
    n = D - C
    dtype = jnp.result_type(alpha, float)
    M = (D if cfg.scale_by_D else 1.0) * attention(A.astype(dtype), cfg)
    Q = M @ M.T
    rows = (np.arange(L)[:, None] + 1 + np.arange(L - 1)[None, :]) % L  # the sets other than l
    others = task.sets[rows].reshape(L, n)
    base = alpha * M[:, task.sets].sum(-1).T  # (L, D): sum over j in S_l of M_ij
    M_other = alpha * M.T[others]  # (L, n, D): row j of M^T for each non-signal patch j
    # P(delta) = (q/2)^nnz (1-q)^(n-nnz), tabulated by nnz so that q = 0 or 1 is exact.
    prob = jnp.asarray([(cfg.q / 2) ** k * (1 - cfg.q) ** (n - k) for k in range(n + 1)], dtype)
    powers = jnp.asarray(3 ** np.arange(n), jnp.int32)
    chunk = 3 ** min(n, int(math.log(max(CHUNK_ROWS // L, 1), 3)))

    @jax.checkpoint
    def chunk_risk(k):
        digits = ((k * chunk + jnp.arange(chunk, dtype=jnp.int32))[:, None] // powers) % 3
        delta = jnp.where(digits == 1, 1.0, jnp.where(digits == 2, -1.0, 0.0)).astype(dtype)
        u = base[:, None, :] + jnp.einsum("bn,lnd->lbd", delta, M_other)  # (L, chunk, D)
        losses = heat.expected_loss_dense(u, Q, t, cfg.activation).sum(0)
        return (prob[(digits > 0).sum(-1)] * losses).sum()

    return jax.lax.map(chunk_risk, jnp.arange(3**n // chunk)).sum() / L
