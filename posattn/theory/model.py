"""The simplified ViT of JSL22, Eq. (T): positional attention with a trained matrix A and one value v.

    S_ij = softmax_j(A_ij / sqrt(d)),    F(X) = sum_i sigma( D * sum_j S_ij <v, X_j> )

Parameters are a plain dict {"A": (D, D), "v": (d,)}; the diagonal of A is frozen by the optimiser
(`posattn.theory.gd`), not here.
"""
import jax
import jax.numpy as jnp

from posattn.theory.config import GDConfig, TheoryConfig


def sigma(z: jax.Array, activation: str) -> jax.Array:
    """The odd activation of Eq. (T): cubic z^3 (default) or quintic z^5 + 0.03 z."""
    if activation == "cubic":
        return z**3
    return z**5 + 0.03 * z


def attention(A: jax.Array, cfg: TheoryConfig) -> jax.Array:
    """Score matrix S = softmax_j(A_ij / sqrt(d)) (Definition 3.2; temperature optional)."""
    logits = A / jnp.sqrt(cfg.d) if cfg.temperature else A
    return jax.nn.softmax(logits, axis=-1)


def pre_activations(params, X: jax.Array, cfg: TheoryConfig) -> jax.Array:
    """u_i = D * sum_j S_ij <v, X_j>, shape (n, D): the argument of sigma in Eq. (T)."""
    S = attention(params["A"], cfg)
    u = (X @ params["v"]) @ S.T
    return cfg.D * u if cfg.scale_by_D else u


def forward(params, X: jax.Array, cfg: TheoryConfig) -> jax.Array:
    """F(X) of Eq. (T), shape (n,), for X of shape (n, D, d)."""
    return sigma(pre_activations(params, X, cfg), cfg.activation).sum(-1)


def logistic_loss(margin: jax.Array) -> jax.Array:
    """l(z) = log(1 + exp(-z)), computed stably."""
    return jax.nn.softplus(-margin)


def empirical_risk(params, X, y, cfg: TheoryConfig, weight=None) -> jax.Array:
    """Risk (E): mean logistic loss of y F(X); `weight` (n,) masks padding (mean over weight > 0)."""
    losses = logistic_loss(y * forward(params, X, cfg))
    if weight is None:
        return losses.mean()
    return (weight * losses).sum() / weight.sum()


def init_params(key: jax.Array, cfg: TheoryConfig, gd: GDConfig = GDConfig(), w_star=None):
    """A^(0) = a0 I (uniform attention at a0 = 0) and v^(0) ~ N(0, v_std^2 I_d), or along w*.

    `gd.v_init="aligned"` puts v^(0) = v_std sqrt(d) w* (same expected norm as the random draw) and needs
    `w_star`.
    """
    A = gd.a0 * jnp.eye(cfg.D)
    if gd.v_init == "aligned":
        if w_star is None:
            raise ValueError("v_init='aligned' needs w_star")
        v = gd.v_std * jnp.sqrt(cfg.d) * w_star
    else:
        v = gd.v_std * jax.random.normal(key, (cfg.d,))
    return {"A": A, "v": v}
