"""The exact noiseless population against sampled estimates."""

import math

import jax
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.shallow import metrics
from posattn.shallow.config import ModelConfig, TokenConfig
from posattn.shallow.data import sample
from posattn.shallow.init import init_params
from posattn.shallow.model import forward
from posattn.shallow.population import population_metrics, population_table, table_rows

SAMPLE = jax.jit(sample, static_argnums=(1, 2))  # eager, every operation compiles on its own

TOK = TokenConfig(d=5, M=5, L=10, alpha_star=0.4, alpha_conf=0.0, tau=0.0)
MODEL = ModelConfig(m_a=5, m_b=5, m=8, w_o_std=1.0, sigma=0.3, delta=0.3)


def test_table_enumerates_every_composition_with_multinomial_weights():
    table, weight = population_table(TOK)
    assert len(weight) == table_rows(TOK) == 2 * math.comb(6 + 2, 2)
    np.testing.assert_allclose(weight.sum(), 1.0, rtol=1e-6)
    # all six irrelevant tokens on mu_3: probability (1/3)^6, for each label
    only_mu3 = (np.asarray(table.pattern_BxL)[:, 4:] == 2).all(1)
    np.testing.assert_allclose(weight[only_mu3], 0.5 * 3.0**-6, rtol=1e-6)


# The second has a confusion token (n_* = 6, n_# = 1), the other pattern's, in every sample.
@pytest.mark.parametrize(
    "tokens", [TOK, TokenConfig(d=5, M=5, L=10, alpha_star=0.6, alpha_conf=0.1, tau=0.0)]
)
def test_exact_population_matches_a_large_sample(tokens):
    params = init_params(jax.random.PRNGKey(0), tokens, MODEL)
    exact = population_metrics(params, tokens, MODEL)
    big = SAMPLE(jax.random.PRNGKey(1), tokens, 40_000)
    est = jax.jit(metrics.evaluate, static_argnames="cfg")(params, big, cfg=MODEL)
    assert (
        0.02 < float(exact["test_error"]) < 0.98
    )  # a model that is neither right nor wrong everywhere
    for name in ("test_hinge", "test_error", "attention_mass"):
        np.testing.assert_allclose(est[name], exact[name], atol=0.01, err_msg=name)


def test_noisy_tokens_have_no_exact_population():
    with pytest.raises(ConfigError, match="noiseless"):
        population_table(TokenConfig(d=5, M=5, L=10, alpha_star=0.4, alpha_conf=0.0, tau=0.1))


def test_exact_population_equals_brute_force_over_every_token_sequence():
    # Independent of the multiset table: every sequence of L patterns, with its probability under the data
    # model (types at uniformly random positions, irrelevant patterns i.i.d. uniform), for both labels.
    import itertools

    tokens = TokenConfig(
        d=4, M=4, L=5, alpha_star=0.4, alpha_conf=0.2, tau=0.0, theorem_margin=False
    )  # n_* = 2, n_# = 1, 2 irrelevant
    params = init_params(jax.random.PRNGKey(2), tokens, MODEL)
    seqs = np.array(list(itertools.product(range(tokens.M), repeat=tokens.L)))
    hinge = error = 0.0
    for y, own in ((1.0, 0), (-1.0, 1)):
        ok = ((seqs == own).sum(1) == 2) & ((seqs == 1 - own).sum(1) == 1)
        prob = (
            1 / (math.factorial(5) / (2 * 1 * 2)) * (1 / (tokens.M - 2)) ** 2
        )  # one arrangement of the types
        F = np.asarray(
            jax.jit(forward, static_argnums=2)(params, jax.nn.one_hot(seqs[ok], tokens.d), MODEL)
        )
        hinge += 0.5 * prob * np.maximum(0, 1 - y * F).sum()
        error += 0.5 * prob * (y * F <= 0).sum()
    exact = population_metrics(params, tokens, MODEL)
    np.testing.assert_allclose(exact["test_hinge"], hinge, rtol=1e-5)
    np.testing.assert_allclose(exact["test_error"], error, atol=1e-6)


def test_per_token_output_weights_have_no_exact_population():
    per_token = ModelConfig(m_a=5, m_b=5, m=8, per_token_output=True)
    with pytest.raises(ConfigError, match="per_token_output"):
        population_metrics(init_params(jax.random.PRNGKey(0), TOK, per_token), TOK, per_token)
