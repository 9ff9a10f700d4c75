r"""Exact population risk (P) for a three-value A, by enumeration over multisets of per-set counts.

If A has the three-value form (diagonal a, within-set off-diagonal gamma, across-set rho),
with e_x = exp(x / sqrt(d)), Z = e_a + (C-1) e_gamma + (D-C) e_rho, b = e_a - e_gamma,
c = e_gamma - e_rho, e = e_rho, the attention is S = (b I + c B + e J) / Z (B the same-set mask, J all
ones), and with y = +1 (sigma is odd) and w_j = alpha c_j the pre-activation of patch i in S_l is

    u_i = (D alpha / Z) [ b w_i + c s_l + e s ],   s_l = sum_{S_l} c_j,  s = sum_j c_j.

So, given the total s, every set contributes a term that depends on its own count type
(n+, n-, n0) only, and F is a sum of per-set terms. The signal set has type (C, 0, 0); the L-1 other sets
have i.i.d. types with multinomial probabilities p_k = C!/(n+! n-! n0!) (q/2)^(n+ + n-) (1-q)^n0, so the
risk is a finite sum over the multisets of L-1 types with weights (L-1)!/prod m_k! prod p_k^m_k
(C=4, L=9: 15 types, 319,770 multisets).

The enumeration tables are built once in numpy (`multiset_tables`, cut into chunks by
`pattern_chunks`; 8-bit multiplicities, 5 MB at the paper preset). The jitted part computes a small
table of per-set terms T[type, s, :] from (alpha, a, gamma, rho) and contracts the multiplicities with it
in blocks of patterns that share the same s (a batched matmul), chunk by chunk of blocks with the
gradient in the same pass (`risk_and_grad_from_terms`; the loss of a pattern from its 12 sums and its
gradient: `posattn.theory.population.pattern_loss`).
The Gaussian part (v_perp != 0) enters through the second-order heat expansion of
`posattn.theory.population.heat`: Q = M^2 = q1 I + q2 B + q3 J keeps the three-value form, so every
contraction P, R, A1..A4 is again a sum of per-set terms and squares of such sums.
"""

import functools
import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from posattn.mesh import DATA
from posattn.theory.config import TheoryConfig
from posattn.theory.data import same_set_mask
from posattn.theory.population import heat, pattern_loss
from posattn.theory.population.pattern_loss import N_TERMS

MAX_BLOCK = (
    512  # patterns per block of equal s (the padding costs at most one block per value of s)
)
CHUNK_BYTES = (
    1 << 20
)  # a chunk's multiplicities, sums and gradient rows (float32): they stay in cache


class MultisetTables(NamedTuple):
    """Numpy enumeration of (P) for a three-value A (all arrays are constants of the jitted risk).

    Attributes:
      counts: int (K, 3) the count type k as (n+, n-, n0), sum C.
      set_sums: int (K,) s_l = n+ - n- of a set of type k.
      mult: unsigned int (n_blocks, block, K) multiplicities of the types in each pattern, the signal
        set's type (C, 0, 0) included; padding rows are 0.
      weight: float (n_blocks, block) probability of each pattern (0 on padding); they sum to 1.
      s_index: int (n_blocks,) index of the total s of the block's patterns in `s_values`.
      s_values: int (S,) the possible totals s.
      n_patterns: number of multisets (without padding).
    """

    counts: np.ndarray
    set_sums: np.ndarray
    mult: np.ndarray
    weight: np.ndarray
    s_index: np.ndarray
    s_values: np.ndarray
    n_patterns: int


def count_types(C: int) -> np.ndarray:
    """All (n+, n-, n0) with n+ + n- + n0 = C, the signal set's type (C, 0, 0) first."""
    return np.array([(p, m, C - p - m) for p in range(C, -1, -1) for m in range(C - p + 1)])


def n_multisets(C: int, L: int) -> int:
    """Number of multisets of L-1 count types: binom(K + L - 2, L - 1), K = binom(C + 2, 2)."""
    K = (C + 1) * (C + 2) // 2
    return math.comb(K + L - 2, L - 1)


@functools.lru_cache(maxsize=8)
def multiset_tables(C: int, L: int, q: float) -> MultisetTables:
    """Enumerate the multisets of the L-1 non-signal sets' count types with their probabilities."""
    counts = count_types(C)
    K = len(counts)
    set_sums = counts[:, 0] - counts[:, 1]
    combos = np.array(
        list(itertools.combinations_with_replacement(range(K), L - 1)), dtype=np.int64
    )
    mult = np.zeros((len(combos), K), np.int64)
    np.add.at(mult, (np.repeat(np.arange(len(combos)), L - 1), combos.reshape(-1)), 1)
    # Probability of a set of each type, then multinomial over the L-1 sets (in logs; p_k = 0 when q is
    # 0 or 1, and such patterns get weight 0 rather than 0 * log 0).
    log_fact = np.array([math.lgamma(n + 1) for n in range(max(C, L) + 1)])
    type_prob = (
        np.exp(log_fact[C] - log_fact[counts].sum(1))
        * (q / 2) ** (counts[:, 0] + counts[:, 1])
        * (1 - q) ** counts[:, 2]
    )
    with np.errstate(divide="ignore", invalid="ignore"):  # 0 * log 0 only where np.where drops it
        log_p = np.log(type_prob)
        log_w = (
            log_fact[L - 1] - log_fact[mult].sum(1) + np.where(mult > 0, mult * log_p, 0.0).sum(1)
        )
    weight = np.exp(log_w)
    mult[:, 0] += 1  # the signal set, of type (C, 0, 0) for y = +1
    s = mult @ set_sums
    s_values = np.arange(-(L - 1) * C + C, L * C + 1)
    order = np.argsort(s, kind="stable")
    # Blocks about as large as the average group of equal s, so padding stays a small share.
    block = int(np.clip(2 ** int(np.log2(max(1, len(combos) // len(np.unique(s))))), 8, MAX_BLOCK))
    blocks_m, blocks_w, blocks_s = [], [], []
    for value in np.unique(s):
        idx = order[s[order] == value]
        pad = -len(idx) % block
        m = np.concatenate([mult[idx], np.zeros((pad, K), np.int64)])
        w = np.concatenate([weight[idx], np.zeros(pad)])
        blocks_m.append(m.reshape(-1, block, K))
        blocks_w.append(w.reshape(-1, block))
        blocks_s += [value - s_values[0]] * (len(m) // block)
    return MultisetTables(
        counts,
        set_sums,
        np.concatenate(blocks_m).astype(np.min_scalar_type(L)),
        np.concatenate(blocks_w),
        np.array(blocks_s, np.int32),
        s_values.astype(np.int32),
        len(combos),
    )


def attention_coefficients(a, gamma, rho, cfg: TheoryConfig):
    """(kappa b, kappa c, kappa e): M = D S = kappa (b I + c B + e J) for a three-value A."""
    scale = 1 / math.sqrt(cfg.d) if cfg.temperature else 1.0
    # Subtract the largest logit, as softmax does, so large entries do not overflow.
    top = jnp.maximum(a, jnp.maximum(gamma, rho))
    e_a, e_g, e_r = (jnp.exp((x - top) * scale) for x in (a, gamma, rho))
    Z = e_a + (cfg.C - 1) * e_g + (cfg.D - cfg.C) * e_r
    kappa = (cfg.D if cfg.scale_by_D else 1.0) / Z
    return kappa * (e_a - e_g), kappa * (e_g - e_r), kappa * e_r


def per_set_terms(alpha, coef, cfg: TheoryConfig, tables: MultisetTables):
    """T (K, S, 12): the per-set sums that F, P, R, A1..A4 are built from, for each type and total s.

    Returns (T, (q1, q2, q3)) with Q = M M^T = q1 I + q2 B + q3 J.
    """
    b, c, e = coef
    C, D = cfg.C, cfg.D
    q1, q2, q3 = b * b, 2 * b * c + C * c * c, 2 * b * e + 2 * C * c * e + D * e * e
    n = jnp.asarray(tables.counts, coef[0].dtype)  # (K, 3) for the values +1, -1, 0
    value = jnp.array([1.0, -1.0, 0.0], n.dtype)
    s_l = jnp.asarray(tables.set_sums, n.dtype)
    s = jnp.asarray(tables.s_values, n.dtype)
    u = alpha * (
        b * value[None, :, None] + c * s_l[:, None, None] + e * s[None, None, :]
    )  # (K, 3, S)
    s0, s1, s2, s3, s4 = heat.activation_derivatives(u, cfg.activation)
    n = n[:, :, None]
    set_sum = lambda x: (n * x).sum(1)  # (K, S)
    S1, S2 = set_sum(s1), set_sum(s2)
    h = (
        q1 * s1 + q2 * S1[:, None, :]
    )  # (Q sigma')_i without the across-set part q3 * sum_j sigma'_j
    T = jnp.stack(
        [
            set_sum(s0),
            S1,
            set_sum(s1 * s1),
            S2,
            set_sum(s2 * s2),
            set_sum(s3),
            set_sum(s4),
            S1 * S1,
            S2 * S2,
            set_sum(s2 * h * h),
            set_sum(s2 * h),
            set_sum(s3 * h),
        ],
        -1,
    )
    return T, (q1, q2, q3)


class PatternChunks(NamedTuple):
    """The tables in the layout of the chunked pass: chunks of blocks, the pattern axis last so that
    each of the 12 summed terms is a contiguous row (numpy; constants of the compiled risk).

    Attributes:
      mult: (chunks, blocks, K, block) multiplicities (`MultisetTables.mult`, transposed); whole
        blocks of padding (multiplicity 0, weight 0) fill the last chunk.
      weight: float64 (chunks, blocks, block).
      s_index: int32 (chunks, blocks).
      sets: L, the sum of every pattern's multiplicities.
    """

    mult: np.ndarray
    weight: np.ndarray
    s_index: np.ndarray
    sets: int


@functools.lru_cache(maxsize=8)
def pattern_chunks(C: int, L: int, q: float) -> PatternChunks:
    """`multiset_tables(C, L, q)` cut into chunks of about `CHUNK_BYTES` for the chunked pass."""
    tables = multiset_tables(C, L, q)
    n_blocks, block, K = tables.mult.shape
    # Per pattern: its multiplicities (as float32), 12 sums and 17 gradient rows stay in cache.
    per_chunk = max(1, min(n_blocks, CHUNK_BYTES // (block * 4 * (K + 2 * N_TERMS + 5))))
    pad = -n_blocks % per_chunk
    mult = np.concatenate([tables.mult, np.zeros((pad, block, K), tables.mult.dtype)]).transpose(
        0, 2, 1
    )
    weight = np.concatenate([tables.weight, np.zeros((pad, block))])
    s_index = np.concatenate([tables.s_index, np.zeros(pad, tables.s_index.dtype)])
    n = (n_blocks + pad) // per_chunk
    return PatternChunks(
        np.ascontiguousarray(mult).reshape(n, per_chunk, K, block),
        weight.reshape(n, per_chunk, block),
        s_index.reshape(n, per_chunk),
        L,
    )


def _chunk_sums(T, m, s):
    """The 12 summed terms of a chunk's patterns, each a (blocks, block) row: per block of equal s,
    (12, K) x (K, block), one batched matmul."""
    sums = jnp.einsum("njk,nkb->njb", T[:, s, :].transpose(1, 2, 0), m)
    return tuple(sums[:, j] for j in range(N_TERMS))


def _scan_chunks(body, init, xs, dtype):
    """`lax.scan` of body(carry, mult, weight, s_index) over the chunks of xs, mult cast to dtype."""
    return jax.lax.scan(lambda carry, x: body(carry, x[0].astype(dtype), x[1], x[2]), init, xs)


def _over_chunks(fn, mesh, chunks: PatternChunks, dtype, *args):
    """fn(*args, mult, weight, s_index) on the chunks' arrays, summed over patterns: on one device, or,
    with `mesh`, each of its devices on a contiguous share of the chunks (padded with empty ones, which
    add zeros) and the results added over "data" (`jax.shard_map`): on a CPU with one device per core
    (docs/decisions.md) this is what runs the pass on every core."""
    shards = 1 if mesh is None else mesh.devices.size
    pad = -len(chunks.mult) % shards
    padded = lambda a: np.concatenate([a, np.zeros((pad, *a.shape[1:]), a.dtype)])
    xs = (
        jnp.asarray(padded(chunks.mult)),
        jnp.asarray(padded(chunks.weight), dtype),
        jnp.asarray(padded(chunks.s_index)),
    )
    if shards == 1:
        return fn(*args, *xs)
    local = lambda *a: jax.lax.psum(fn(*a), DATA)  # check_vma=False: the scans start from constants
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(),) * len(args) + (P(DATA),) * 3,
        out_specs=P(),
        check_vma=False,
    )(*args, *xs)


def risk_from_terms(T, qs, t, chunks: PatternChunks, mesh=None):
    """The sum over patterns of weight x expected loss, chunk by chunk (no gradient); over the devices
    of `mesh` if given (`_over_chunks`)."""

    def local(T, qs, t, *xs):
        def body(risk, m, w, s):
            return risk + (w * pattern_loss.expected_loss(_chunk_sums(T, m, s), qs, t)).sum(), None

        return _scan_chunks(body, jnp.zeros((), T.dtype), xs, T.dtype)[0]

    return _over_chunks(local, mesh, chunks, T.dtype, T, qs, t)


def risk_and_grad_from_terms(T, qs, t, chunks: PatternChunks, mesh=None):
    """(sum over patterns of weight x expected loss, its gradient in (T, qs, t)) in one pass; over the
    devices of `mesh` if given (`_over_chunks`).

    Per chunk of about `CHUNK_BYTES`, while its arrays are in cache: the 12 summed terms (a batched
    matmul), the expected loss and its gradient in closed form (`pattern_loss`), and one batched matmul
    of the multiplicities with the 17 weighted rows (dE/dsums, E, dE/dqs, dE/dt) that gives the chunk's
    share of dR/dT. The sums over patterns of E, dE/dqs and dE/dt come out of the same matmul: every
    pattern's multiplicities add up to L (the signal set and the L-1 others), so summing its products
    over the K types gives L times the pattern's value. Done on all 319,770 patterns at once (the paper
    preset), each elementwise step wrote and read whole arrays; autodiff of the elementwise chain cost
    about twice the operations in a dozen fusions.
    """
    K, S = T.shape[0], T.shape[1]

    def local(T, qs, t, *xs):
        def body(_, m, w, s):
            E, d_sums, d_qs, d_t = pattern_loss.expected_loss_and_grad(_chunk_sums(T, m, s), qs, t)
            rows = jnp.stack([*d_sums, E, *d_qs, d_t], 1) * w[:, None]  # (blocks, 17, block)
            return None, jnp.einsum("nkb,njb->nkj", m, rows)

        _, d_blocks = _scan_chunks(body, None, xs, T.dtype)
        d_blocks = d_blocks.reshape(-1, K, N_TERMS + 5)
        # Blocks of equal s summed (the padding blocks, at index 0, add zeros).
        d_T = jax.ops.segment_sum(
            d_blocks[..., :N_TERMS], xs[2].reshape(-1), S, indices_are_sorted=False
        )
        return d_blocks[..., N_TERMS:].sum((0, 1)), d_T

    sums, d_T = _over_chunks(local, mesh, chunks, T.dtype, T, qs, t)
    totals = sums / chunks.sets  # sum over patterns of w (E, dE/dqs, dE/dt)
    return totals[0], (d_T.transpose(1, 0, 2), (totals[1], totals[2], totals[3]), totals[4])


def _expected_risk(chunks: PatternChunks, mesh=None):
    """R(T, qs, t) with the gradient that `risk_and_grad_from_terms` computes in the same pass as R
    (reverse mode only: a custom VJP)."""

    @jax.custom_vjp
    def risk(T, qs, t):
        return risk_from_terms(T, qs, t, chunks, mesh)

    def backward(grads, g):
        return jax.tree.map(lambda x: g * x, grads)

    risk.defvjp(lambda T, qs, t: risk_and_grad_from_terms(T, qs, t, chunks, mesh), backward)
    return risk


def multiset_risk(alpha, t, a, gamma, rho, cfg: TheoryConfig, mesh=None) -> jax.Array:
    """Population risk (P) of Eq. (T) at v = alpha w* (+ noise of variance t), A = (a, gamma, rho).

    Exact for t = 0; second order in t otherwise (`posattn.theory.population.heat`). Differentiable in
    all five scalars by reverse mode (`jax.grad`; the gradient in the per-set terms is computed with
    the risk, `risk_and_grad_from_terms`); the dtype follows alpha's. With `mesh`, the patterns are
    split over its devices.
    """
    tables = multiset_tables(cfg.C, cfg.L, float(cfg.q))
    dtype = jnp.result_type(alpha, float)
    coef = attention_coefficients(*(jnp.asarray(x, dtype) for x in (a, gamma, rho)), cfg)
    T, qs = per_set_terms(jnp.asarray(alpha, dtype), coef, cfg, tables)
    return _expected_risk(pattern_chunks(cfg.C, cfg.L, float(cfg.q)), mesh)(
        T, qs, jnp.asarray(t, dtype)
    )


def three_value_form(A: jax.Array, sets: jax.Array):
    """(a, gamma, rho, deviation): the means of A's diagonal, within-set off-diagonal and across-set
    entries, and the largest distance of an entry of A from the three-value matrix they define.

    The multiset path reads A through (a, gamma, rho), so autodiff spreads dR/dgamma evenly over the
    D (C-1) within-set entries (and dR/drho over the D (D-C) across-set ones): the population gradient
    itself whenever A is three-valued, since it is three-valued by symmetry.
    """
    D = A.shape[0]
    eye = jnp.eye(D, dtype=bool)
    same = same_set_mask(sets)
    within, across = same & ~eye, ~same
    mean = lambda m: jnp.where(m, A, 0).sum() / jnp.maximum(m.sum(), 1)
    a, rho = mean(eye), mean(across)
    gamma = jnp.where(within.any(), mean(within), rho)  # C = 1 has no within-set entries
    fit = jnp.where(eye, a, jnp.where(within, gamma, rho))
    return a, gamma, rho, jnp.abs(A - fit).max()
