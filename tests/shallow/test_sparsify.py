"""Token sparsification: which tokens each policy removes, and that removal changes the model's output."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.shallow import removal, sparsify
from posattn.shallow.config import ModelConfig, TokenConfig
from posattn.shallow.data import IRRELEVANT, sample
from posattn.shallow.init import init_params
from posattn.shallow.metrics import evaluate

SAMPLE = jax.jit(sample, static_argnums=(1, 2))  # eager, every operation compiles on its own

TOK = TokenConfig(
    d=6, M=4, L=12, alpha_star=0.5, alpha_conf=1 / 12, tau=0.1, noisy_tokens=3, noisy_tau=0.8
)
MODEL = ModelConfig(m_a=6, m_b=6, m=8)


def test_keep_mask_removes_the_k_highest_scores():
    score = jnp.array([[0.1, 0.9, 0.5, 0.7]])
    np.testing.assert_array_equal(removal.keep_mask(score, 0), [[True] * 4])
    np.testing.assert_array_equal(removal.keep_mask(score, 2), [[True, False, True, False]])


def test_policies_remove_their_tokens_first():
    t = SAMPLE(jax.random.PRNGKey(0), TOK, 64)
    params = init_params(jax.random.PRNGKey(1), TOK, MODEL)
    key = jax.random.PRNGKey(2)
    irr = np.asarray(t.kind_BxL == IRRELEVANT)  # 5 irrelevant tokens per sample
    removed = ~np.asarray(
        removal.keep_mask(removal.removal_scores(key, "irrelevant", t, params, MODEL), 4)
    )
    assert (removed <= irr).all() and (removed.sum(1) == 4).all()
    removed = ~np.asarray(
        removal.keep_mask(removal.removal_scores(key, "noisy", t, params, MODEL), 5)
    )
    assert (removed[np.asarray(t.noisy_BxL)]).all() and (removed.sum(1) == 5).all()
    received = np.asarray(removal.received_attention(params, t.x_BxLxd, MODEL))
    np.testing.assert_allclose(received.sum(1), TOK.L, rtol=1e-5)  # every query's row sums to 1
    removed = ~np.asarray(
        removal.keep_mask(removal.removal_scores(key, "attention", t, params, MODEL), 3)
    )
    for b in range(5):
        assert set(np.nonzero(removed[b])[0]) == set(np.argsort(received[b])[:3])


def test_curve_starts_at_the_full_model_and_changes_with_k():
    t = SAMPLE(jax.random.PRNGKey(3), TOK, 64)
    params = init_params(jax.random.PRNGKey(4), TOK, MODEL)
    curve_fn = jax.jit(sparsify.sparsification_curve, static_argnums=(3, 4))
    curve = curve_fn(jax.random.PRNGKey(5), params, t, MODEL, "random", jnp.arange(4))
    np.testing.assert_allclose(
        curve["test_hinge"][0], evaluate(params, t, MODEL)["test_hinge"], rtol=1e-6
    )
    assert len(set(np.round(np.asarray(curve["test_hinge"]), 6))) == 4


def test_attention_policy_needs_attention():
    t = SAMPLE(jax.random.PRNGKey(0), TOK, 64)
    free = ModelConfig(attention="none", m_a=6, m_b=6, m=8)
    with pytest.raises(ConfigError, match="needs the ViT"):
        params = init_params(jax.random.PRNGKey(1), TOK, free)
        removal.removal_scores(jax.random.PRNGKey(0), "attention", t, params, free)
