"""Token sparsification (LWLC23, Section 4): remove k tokens per test sample and re-evaluate.

Policies, each a score per token (the k highest-scored tokens are removed; the first three break ties
at random):
- "random": uniformly random tokens;
- "irrelevant": label-irrelevant tokens first (needs the token types, an oracle);
- "noisy": the tokens with the larger noise level first (an oracle too);
- "attention": the tokens that receive the least attention from the trained model, summed over all
  queries of the full token list: the magnitude-based pruning the paper's sparse attention justifies,
  which needs no labels or token types.
A removed token leaves the softmax and the average of Eq. (1) (`posattn.shallow.model`).
"""
import functools

import jax
import jax.numpy as jnp

from posattn.errors import ConfigError
from posattn.shallow import grid, metrics, train
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig
from posattn.shallow.data import IRRELEVANT, Tokens
from posattn.shallow.model import attention_weights

POLICIES = ("random", "irrelevant", "noisy", "attention")


def received_attention(params: dict, x_BxLxd: jax.Array, cfg: ModelConfig) -> jax.Array:
    """(B, L): the attention each token receives as a key, summed over the queries of the full list."""
    keep_BxL = jnp.ones(x_BxLxd.shape[:2], bool)
    return attention_weights(params, x_BxLxd, keep_BxL, cfg).sum(axis=1)


def removal_scores(key: jax.Array, policy: str, test: Tokens, params: dict, cfg: ModelConfig) -> jax.Array:
    """(B, L) scores: the k highest are removed. A uniform draw in [0, 1/2) breaks ties at random."""
    if policy not in POLICIES:
        raise ConfigError(f"policy={policy!r}: choose one of {POLICIES}")
    if policy == "attention" and cfg.attention != "softmax":
        raise ConfigError("policy='attention' needs the ViT (attention='softmax'): the attention-free "
                          "network has no attention to prune by")
    u_BxL = 0.5 * jax.random.uniform(key, test.kind_BxL.shape)
    if policy == "random":
        return u_BxL
    if policy == "irrelevant":
        return (test.kind_BxL == IRRELEVANT) + u_BxL
    if policy == "noisy":
        return test.noisy_BxL + u_BxL
    return -received_attention(params, test.x_BxLxd, cfg)


def keep_mask(score_BxL: jax.Array, k) -> jax.Array:
    """True for the tokens kept after removing the k highest-scored of each sample (k may be traced)."""
    rank_BxL = jnp.argsort(jnp.argsort(-score_BxL, axis=-1), axis=-1)  # 0 = highest score
    return rank_BxL >= k


def sparsification_curve(key: jax.Array, params: dict, test: Tokens, cfg: ModelConfig, policy: str,
                         ks: jax.Array) -> dict:
    """`metrics.evaluate` on `test` after removing k tokens per sample by `policy`, for every k in ks."""
    score_BxL = removal_scores(key, policy, test, params, cfg)
    return jax.vmap(lambda k: metrics.evaluate(params, test, cfg, keep_mask(score_BxL, k)))(jnp.asarray(ks))


@functools.partial(jax.jit, static_argnames=("tokens", "model", "sgd", "policies"))
def sparsification_runs(keys_R, ks, *, tokens: TokenConfig, model: ModelConfig, sgd: SGDConfig,
                        policies: tuple[str, ...] = POLICIES) -> dict:
    """Train one model per seed (on full token lists), then evaluate its test set after removing k tokens
    by each policy, for every k in ks: {policy: {"test_hinge", "test_error", "attention_mass"} of
    (R, len(ks)) arrays}. Every policy sees the same trained models and test sets; one compiled call."""
    cell = grid.base_cell(tokens, model, sgd)

    def one(key):
        params, train_set, test, k_sgd = grid.draw_run(key, cell, tokens, model, sgd, sgd.N)
        params = train.train(params, k_sgd, train_set, sgd.N, model, sgd)
        k_policy = jax.random.fold_in(key, 1)  # the same tie-breaking draw for every policy
        return {p: sparsification_curve(k_policy, params, test, model, p, ks) for p in policies}

    return jax.vmap(one)(keys_R)
