"""The "proper initial model" of LWLC23's Theorem 1.

W_V, W_K, W_Q embed the patterns close to orthonormal vectors: ||W_V mu_j - p_j|| = sigma,
||W_K mu_j - q_j|| = ||W_Q mu_j - r_j|| = delta, with {p_j}, {q_j}, {r_j} orthonormal and q_1 = r_1,
q_2 = r_2 (a discriminative query starts attending to keys of its own pattern). W_O is Gaussian. The
embeddings cover all of R^d (the patterns and the noise directions) so that token noise is carried,
not dropped; r_j for j >= 3 is drawn orthogonal to q_1, q_2 (docs/shallow_vit_results.md, Decisions).
Per-token output weights a_(l) (ModelConfig.per_token_output) have entries uniform on +-1/sqrt(m).
"""

import jax
import jax.numpy as jnp

from posattn.shallow.config import ModelConfig, TokenConfig


def orthonormal_columns(g: jax.Array) -> jax.Array:
    """The Gaussian matrix g (rows >= columns) made into orthonormal columns, uniformly random: the Q of
    g = QR with diag(R) > 0, by Gram-Schmidt (each projection done twice, for float32 accuracy). Not
    jnp.linalg.qr: vmapped over a few dozen seeds, jaxlib's batched LAPACK QR deadlocked on 2 CPU
    threads (every pool thread waiting on sub-tasks that no free thread could run)."""

    def column(j, q):
        v = g[:, j]
        for _ in range(2):  # the unfilled columns of q are zero, so they project nothing
            v = v - q @ (q.T @ v)
        return q.at[:, j].set(v / jnp.linalg.norm(v))

    return jax.lax.fori_loop(0, g.shape[1], column, jnp.zeros_like(g))


def error_columns(g: jax.Array, size) -> jax.Array:
    """The Gaussian matrix g made into columns of norm `size` in uniformly random directions: the
    initial-model error per pattern."""
    return size * g / jnp.linalg.norm(g, axis=0, keepdims=True)


def gaussian_blocks(key: jax.Array, shapes: dict) -> dict:
    """Independent standard Gaussian matrices of the given shapes from one random draw (each
    jax.random call adds about a second of XLA compile time on a CPU)."""
    sizes = [r * c for r, c in shapes.values()]
    flat = jax.random.normal(key, (sum(sizes),))
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return {
        name: flat[s : s + r * c].reshape(r, c) for (name, (r, c)), s in zip(shapes.items(), starts)
    }


def init_params(
    key: jax.Array, tokens: TokenConfig, cfg: ModelConfig, sigma=None, delta=None
) -> dict:
    """{W_Q, W_K (m_b, d), W_V (m_a, d), W_O (m, m_a)}, and a (L, m) with per-token output weights;
    sigma, delta override cfg's (may be traced)."""
    cfg.check_widths(tokens)
    sigma = cfg.sigma if sigma is None else sigma
    delta = cfg.delta if delta is None else delta
    d = tokens.d
    g = gaussian_blocks(
        key,
        {
            "p": (cfg.m_a, d),
            "b": (cfg.m_b, cfg.m_b),
            "r": (cfg.m_b - 2, d - 2),
            "ev": (cfg.m_a, d),
            "ek": (cfg.m_b, d),
            "eq": (cfg.m_b, d),
            "o": (cfg.m, cfg.m_a),
            "a": (tokens.L, cfg.m),
        },
    )
    basis_b = orthonormal_columns(g["b"])
    W_K = basis_b[:, :d]  # q_j
    rest_r = basis_b[:, 2:] @ orthonormal_columns(g["r"])  # r_j, j >= 3: orthogonal to q_1, q_2
    W_Q = jnp.concatenate([basis_b[:, :2], rest_r], axis=1)  # r_1 = q_1, r_2 = q_2
    params = {
        "W_Q": W_Q + error_columns(g["eq"], delta),
        "W_K": W_K + error_columns(g["ek"], delta),
        "W_V": orthonormal_columns(g["p"]) + error_columns(g["ev"], sigma),
        "W_O": cfg.w_o_std * g["o"],
    }
    if cfg.per_token_output:  # the sign of a standard Gaussian is uniform on {+1, -1}
        params["a"] = jnp.where(g["a"] >= 0, 1.0, -1.0) / jnp.sqrt(cfg.m)
    return params
