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

from posattn.shallow.config import ModelConfig


TRAINED = ("W_Q", "W_K", "W_V", "W_O")  # SGD trains these; a per-token "a" stays fixed


def output_weights(m: int) -> jax.Array:
    """The fixed output layer a: +1/sqrt(m) on the first m/2 neurons, -1/sqrt(m) on the others."""
    return jnp.where(jnp.arange(m) < m // 2, 1.0, -1.0) / jnp.sqrt(m)


def attention_weights(params: dict, x_BxLxd: jax.Array, keep_BxL: jax.Array, cfg: ModelConfig) -> jax.Array:
    """att_BxLxL[b, l, s] = softmax over kept keys s of x_s^T W_K^T W_Q x_l (query l, key s)."""
    q_BxLxm = x_BxLxd @ params["W_Q"].T
    k_BxLxm = x_BxLxd @ params["W_K"].T
    logits_BxLxL = jnp.einsum("blm,bsm->bls", q_BxLxm, k_BxLxm)
    if cfg.scale_logits:
        logits_BxLxL = logits_BxLxL / jnp.sqrt(q_BxLxm.shape[-1])
    return jax.nn.softmax(jnp.where(keep_BxL[:, None, :], logits_BxLxL, -jnp.inf), axis=-1)


def token_outputs(params: dict, x_BxLxd: jax.Array, keep_BxL: jax.Array, cfg: ModelConfig) -> jax.Array:
    """a_(l)^T ReLU(W_O z_l) for every token l, with z_l the attention output (or W_V x_l without
    attention); a_(l) = params["a"][l] when the model has per-token output weights."""
    v_BxLxm = x_BxLxd @ params["W_V"].T
    if cfg.attention == "softmax":
        v_BxLxm = attention_weights(params, x_BxLxd, keep_BxL, cfg) @ v_BxLxm
    hidden_BxLxm = jax.nn.relu(v_BxLxm @ params["W_O"].T)
    if cfg.per_token_output:
        return (hidden_BxLxm * params["a"]).sum(-1)
    return hidden_BxLxm @ output_weights(cfg.m)


def forward(params: dict, x_BxLxd: jax.Array, cfg: ModelConfig, keep_BxL: jax.Array | None = None) -> jax.Array:
    """F(X) of Eq. (1) (or Proposition 1's attention-free network) for every sample: shape (B,)."""
    if keep_BxL is None:
        keep_BxL = jnp.ones(x_BxLxd.shape[:2], bool)
    out_BxL = token_outputs(params, x_BxLxd, keep_BxL, cfg)
    return jnp.where(keep_BxL, out_BxL, 0.0).sum(-1) / keep_BxL.sum(-1)


def hinge_loss(params: dict, x_BxLxd: jax.Array, y_B: jax.Array, cfg: ModelConfig,
               keep_BxL: jax.Array | None = None) -> jax.Array:
    """The empirical hinge loss 1/B sum_n max(0, 1 - y_n F(X_n)) of Theorem 1."""
    return jax.nn.relu(1.0 - y_B * forward(params, x_BxLxd, cfg, keep_BxL)).mean()
