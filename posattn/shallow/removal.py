"""Token removal policies of LWLC23's token sparsification (Section 4): which k tokens a sample loses.

Each policy is a score per token; the k highest-scored tokens are removed (the first three break ties
at random):
- "random": uniformly random tokens;
- "irrelevant": label-irrelevant tokens first (needs the token types, an oracle);
- "noisy": the tokens with the larger noise level first (an oracle too);
- "attention": the tokens that receive the least attention from the model, summed over all queries of
  the full token list: the magnitude-based pruning the paper's sparse attention justifies, which needs
  no labels or token types.
A removed token leaves the softmax and the average of Eq. (1) (`posattn.shallow.model`). The same
policies serve at test time (`posattn.shallow.sparsify`) and at training time (`posattn.shallow.train`).
"""

import jax
import jax.numpy as jnp

from posattn.errors import ConfigError
from posattn.shallow.config import REMOVAL_POLICIES as POLICIES
from posattn.shallow.config import ModelConfig
from posattn.shallow.data import IRRELEVANT, Tokens
from posattn.shallow.model import attention_weights


def received_attention(params: dict, x_BxLxd: jax.Array, cfg: ModelConfig) -> jax.Array:
    """(B, L): the attention each token receives as a key, summed over the queries of the full list."""
    keep_BxL = jnp.ones(x_BxLxd.shape[:2], bool)
    return attention_weights(params, x_BxLxd, keep_BxL, cfg).sum(axis=1)


def check_policy(policy: str, cfg: ModelConfig) -> None:
    """ConfigError for an unknown policy, or "attention" on the attention-free network."""
    if policy not in POLICIES:
        raise ConfigError(f"policy={policy!r}: choose one of {POLICIES}")
    if policy == "attention" and cfg.attention != "softmax":
        raise ConfigError(
            "policy='attention' needs the ViT (attention='softmax'): the attention-free "
            "network has no attention to prune by"
        )


def removal_scores(
    key: jax.Array, policy: str, tokens: Tokens, params: dict, cfg: ModelConfig
) -> jax.Array:
    """(B, L) scores: the k highest are removed. A uniform draw in [0, 1/2) breaks ties at random."""
    check_policy(policy, cfg)
    u_BxL = 0.5 * jax.random.uniform(key, tokens.kind_BxL.shape)
    if policy == "random":
        return u_BxL
    if policy == "irrelevant":
        return (tokens.kind_BxL == IRRELEVANT) + u_BxL
    if policy == "noisy":
        return tokens.noisy_BxL + u_BxL
    return -received_attention(jax.lax.stop_gradient(params), tokens.x_BxLxd, cfg)


def keep_mask(score_BxL: jax.Array, k) -> jax.Array:
    """True for the tokens kept after removing the k highest-scored of each sample (k may be traced)."""
    rank_BxL = jnp.argsort(jnp.argsort(-score_BxL, axis=-1), axis=-1)  # 0 = highest score
    return rank_BxL >= k
