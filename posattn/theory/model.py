"""The simplified ViT of JSL22, Eq. (T): positional attention with a trained matrix A and one value v.

    S_ij = softmax_j(A_ij / sqrt(d)),    F(X) = sum_i sigma( D * sum_j S_ij <v, X_j> )

Parameters are a plain dict {"A": (D, D), "v": (d,)}; the diagonal of A is frozen by the optimiser
(`posattn.theory.gd`), not here.
"""

import jax
import jax.numpy as jnp

from posattn.errors import ConfigError, check_choice, check_sign_labels
from posattn.theory.config import ACTIVATIONS, GDConfig, TheoryConfig
from posattn.theory.data import check_patches


def check_params(params, D: int, d: int) -> None:
    """ConfigError unless `params` is Eq. (T)'s {"A": (D, D), "v": (d,)} (shapes only: free under jit)."""
    shapes = (
        {k: tuple(jnp.shape(a)) for k, a in params.items()} if isinstance(params, dict) else None
    )
    if shapes != {"A": (D, D), "v": (d,)}:
        raise ConfigError(
            f"params {shapes or type(params).__name__}: Eq. (T) here needs {{'A': ({D}, {D}), "
            f"'v': ({d},)}} (D={D}, d={d}): give parameters of this config (init_params)"
        )


def sigma(z: jax.Array, activation: str) -> jax.Array:
    """The odd activation of Eq. (T): cubic z^3 (default) or quintic z^5 + 0.03 z; any other name is a
    ConfigError (checked at trace time, so it costs nothing in a compiled step)."""
    if check_choice(activation, ACTIVATIONS, "activation") == "cubic":
        return z**3
    return z**5 + 0.03 * z


def attention(A: jax.Array, cfg: TheoryConfig) -> jax.Array:
    """Score matrix S = softmax_j(A_ij / sqrt(d)) (Definition 3.2; temperature optional); ConfigError
    unless A is D x D."""
    if jnp.shape(A) != (cfg.D, cfg.D):
        raise ConfigError(
            f"A has shape {jnp.shape(A)}: the attention matrix of Eq. (T) is D x D = "
            f"({cfg.D}, {cfg.D})"
        )
    logits = A / jnp.sqrt(cfg.d) if cfg.temperature else A
    return jax.nn.softmax(logits, axis=-1)


def mix(S: jax.Array, z_nxD: jax.Array, cfg: TheoryConfig) -> jax.Array:
    """u_i = D * sum_j S_ij z_j, shape (n, D), from the patch values z_nj = <v, X_nj>."""
    u = z_nxD @ S.T
    return cfg.D * u if cfg.scale_by_D else u


def pre_activations(params, X: jax.Array, cfg: TheoryConfig) -> jax.Array:
    """u_i = D * sum_j S_ij <v, X_j>, shape (n, D): the argument of sigma in Eq. (T)."""
    return mix(attention(params["A"], cfg), X @ params["v"], cfg)


def forward(params, X: jax.Array, cfg: TheoryConfig) -> jax.Array:
    """F(X) of Eq. (T), shape (n,), for X of shape (n, D, d); ConfigError for params or X of other
    shapes than `cfg`'s (checked while tracing: free in a compiled step)."""
    check_params(params, cfg.D, cfg.d)
    check_patches(X, cfg)
    return sigma(pre_activations(params, X, cfg), cfg.activation).sum(-1)


def logistic_loss(margin: jax.Array) -> jax.Array:
    """l(z) = log(1 + exp(-z)), computed stably."""
    return jax.nn.softplus(-margin)


def empirical_risk(params, X, y, cfg: TheoryConfig, weight=None) -> jax.Array:
    """Risk (E): mean logistic loss of y F(X); `weight` (n,) masks padding (mean over weight > 0).

    ConfigError unless y (and weight) are (n,) for X (n, D, d) (a y of shape (n, 1) would broadcast to
    an (n, n) loss), and, where y is concrete, unless its labels are -1 or +1 (`check_sign_labels`).
    """
    n = jnp.shape(X)[:1]
    if jnp.shape(y) != n or (weight is not None and jnp.shape(weight) != n):
        raise ConfigError(
            f"y {jnp.shape(y)}"
            + ("" if weight is None else f", weight {jnp.shape(weight)}")
            + f": give one per sample of X {jnp.shape(X)}, shape {n}"
        )
    check_sign_labels(y, "empirical_risk")
    losses = logistic_loss(y * forward(params, X, cfg))
    if weight is None:
        return losses.mean()
    return (weight * losses).sum() / weight.sum()


def init_params(key: jax.Array, cfg: TheoryConfig, gd: GDConfig = GDConfig(), w_star=None):
    """A^(0) = a0 I (uniform attention at a0 = 0) and v^(0) ~ N(0, v_std^2 I_d), or along w*.

    `gd.v_init="aligned"` puts v^(0) = v_std sqrt(d) w* (same expected norm as the random draw) and needs
    `w_star`.
    ConfigError for `w_star` of another shape than (d,), and for a start GD cannot leave: v^(0) = 0
    (v_std = 0) with the cubic sigma, where every gradient of Eq. (T) vanishes (sigma'(0) = 0).
    """
    if gd.v_std == 0 and cfg.activation == "cubic":
        raise ConfigError(
            "v_std=0 starts GD at v = 0, where every gradient of Eq. (T) with sigma = z^3 "
            "vanishes and nothing trains: give v_std > 0"
        )
    A = gd.a0 * jnp.eye(cfg.D)
    if gd.v_init == "aligned":
        if w_star is None or jnp.shape(w_star) != (cfg.d,):
            raise ConfigError(
                f"v_init='aligned' needs w_star of shape ({cfg.d},), got "
                f"{None if w_star is None else jnp.shape(w_star)}: pass task.w_star"
            )
        v = gd.v_std * jnp.sqrt(cfg.d) * w_star
    else:
        v = gd.v_std * jax.random.normal(key, (cfg.d,))
    return {"A": A, "v": v}
