"""Eq. (1) of LWLC23: one self-attention layer followed by a two-layer perceptron, averaged over tokens.

    F(X) = 1/|S| sum_{l in S} a_(l)^T ReLU( W_O sum_{s in S} W_V x_s softmax_{s in S}(x_s^T W_K^T W_Q x_l) )

a_(l) is one fixed vector for every token (ModelConfig.per_token_output=False: +-1/sqrt(m), half each,
the default) or, as Eq. (1) writes it, one per token position l (params["a"] of shape (L, m)).

S is the set of kept tokens (`keep_BxL`): a removed token leaves both the softmax (as a key) and the
average (as a query), so the output equals the model run on the shortened token list. With
attention="none" the same code is the attention-free network of Proposition 1,
F(X) = 1/|S| sum_l a^T ReLU(W_O W_V x_l) (every token attends only to itself).
"""

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError, check_sign_labels
from posattn.shallow.config import ModelConfig

TRAINED = ("W_Q", "W_K", "W_V", "W_O")  # SGD trains these; a per-token "a" stays fixed


def output_weights(m: int) -> jax.Array:
    """The fixed output layer a: +1/sqrt(m) on the first m/2 neurons, -1/sqrt(m) on the others."""
    return jnp.where(jnp.arange(m) < m // 2, 1.0, -1.0) / jnp.sqrt(m)


def attention_weights(
    params: dict, x_BxLxd: jax.Array, keep_BxL: jax.Array, cfg: ModelConfig
) -> jax.Array:
    """att_BxLxL[b, l, s] = softmax over kept keys s of x_s^T W_K^T W_Q x_l (query l, key s)."""
    q_BxLxm = x_BxLxd @ params["W_Q"].T
    k_BxLxm = x_BxLxd @ params["W_K"].T
    logits_BxLxL = jnp.einsum("blm,bsm->bls", q_BxLxm, k_BxLxm)
    if cfg.scale_logits:
        logits_BxLxL = logits_BxLxL / jnp.sqrt(q_BxLxm.shape[-1])
    return jax.nn.softmax(jnp.where(keep_BxL[:, None, :], logits_BxLxL, -jnp.inf), axis=-1)


def token_outputs(
    params: dict, x_BxLxd: jax.Array, keep_BxL: jax.Array, cfg: ModelConfig
) -> jax.Array:
    """a_(l)^T ReLU(W_O z_l) for every token l, with z_l the attention output (or W_V x_l without
    attention); a_(l) = params["a"][l] when the model has per-token output weights."""
    v_BxLxm = x_BxLxd @ params["W_V"].T
    if cfg.attention == "softmax":
        v_BxLxm = attention_weights(params, x_BxLxd, keep_BxL, cfg) @ v_BxLxm
    hidden_BxLxm = jax.nn.relu(v_BxLxm @ params["W_O"].T)
    if cfg.per_token_output:
        return (hidden_BxLxm * params["a"]).sum(-1)
    return hidden_BxLxm @ output_weights(cfg.m)


def check_inputs(params: dict, x_BxLxd, cfg: ModelConfig, keep_BxL=None) -> None:
    """ConfigError unless `params` are Eq. (1)'s of `cfg` for tokens x (B, L, d) (W_Q, W_K (m_b, d), W_V
    (m_a, d), W_O (m, m_a), and a (L, m) exactly when `cfg.per_token_output`: a stray one was ignored),
    `keep_BxL` is (B, L) and, where it is concrete, keeps a token of every sample (none gives F = NaN).
    Shapes are checked while tracing, so a compiled step pays nothing."""
    if jnp.ndim(x_BxLxd) != 3:
        raise ConfigError(f"x has shape {jnp.shape(x_BxLxd)}: give tokens (B, L, d)")
    B, L, d = jnp.shape(x_BxLxd)
    want = {"W_Q": (cfg.m_b, d), "W_K": (cfg.m_b, d), "W_V": (cfg.m_a, d), "W_O": (cfg.m, cfg.m_a)}
    if cfg.per_token_output:
        want["a"] = (L, cfg.m)
    got = {name: tuple(jnp.shape(w)) for name, w in params.items()}
    if got != want:
        raise ConfigError(
            f"params {got}: Eq. (1) of this ModelConfig on tokens (B, {L}, {d}) needs {want}: "
            "give parameters of this config (init_params)"
        )
    if keep_BxL is None:
        return
    if jnp.shape(keep_BxL) != (B, L):
        raise ConfigError(
            f"keep_BxL has shape {jnp.shape(keep_BxL)}: give one flag per token, ({B}, {L})"
        )
    if not isinstance(keep_BxL, jax.core.Tracer) and not np.asarray(keep_BxL).any(-1).all():
        raise ConfigError(
            "keep_BxL removes every token of some sample: F averages over kept tokens, so "
            "keep at least one per sample"
        )


def forward(
    params: dict, x_BxLxd: jax.Array, cfg: ModelConfig, keep_BxL: jax.Array | None = None
) -> jax.Array:
    """F(X) of Eq. (1) (or Proposition 1's attention-free network) for every sample: shape (B,).
    ConfigError for inputs `check_inputs` refuses."""
    check_inputs(params, x_BxLxd, cfg, keep_BxL)
    if keep_BxL is None:
        keep_BxL = jnp.ones(x_BxLxd.shape[:2], bool)
    out_BxL = token_outputs(params, x_BxLxd, keep_BxL, cfg)
    return jnp.where(keep_BxL, out_BxL, 0.0).sum(-1) / keep_BxL.sum(-1)


def hinge_loss(
    params: dict,
    x_BxLxd: jax.Array,
    y_B: jax.Array,
    cfg: ModelConfig,
    keep_BxL: jax.Array | None = None,
) -> jax.Array:
    """The empirical hinge loss 1/B sum_n max(0, 1 - y_n F(X_n)) of Theorem 1. ConfigError unless y_B
    is (B,) (a (B, 1) would broadcast to a (B, B) loss) with labels -1 or +1 where it is concrete."""
    if jnp.shape(y_B) != jnp.shape(x_BxLxd)[:1]:
        raise ConfigError(
            f"y_B has shape {jnp.shape(y_B)}: give one label per sample, ({jnp.shape(x_BxLxd)[0]},)"
        )
    check_sign_labels(y_B, "hinge_loss")
    return jax.nn.relu(1.0 - y_B * forward(params, x_BxLxd, cfg, keep_BxL)).mean()
