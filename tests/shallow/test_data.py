"""The token sampler: exact type counts, the majority label, bounded noise, traced knobs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.shallow.config import TokenConfig
from posattn.shallow.data import CONFUSION, IRRELEVANT, RELEVANT, majority_label, sample

# One compiled sampler for every test (n_* and tau passed as traced values): eager, every operation
# compiles on its own, and every new static argument compiles the whole sampler again.
SAMPLE = jax.jit(sample, static_argnums=(1, 2))

CFG = TokenConfig(
    d=8, M=5, L=20, alpha_star=0.35, alpha_conf=0.05, tau=0.3, noisy_tokens=4, noisy_tau=0.9
)


def test_type_counts_patterns_and_majority_label():
    t = SAMPLE(jax.random.PRNGKey(0), CFG, 400, CFG.n_star, CFG.tau)
    kind, pattern, y = np.asarray(t.kind_BxL), np.asarray(t.pattern_BxL), np.asarray(t.y_B)
    np.testing.assert_array_equal((kind == RELEVANT).sum(1), 7)
    np.testing.assert_array_equal((kind == CONFUSION).sum(1), 1)
    np.testing.assert_array_equal((kind == IRRELEVANT).sum(1), 12)
    own = np.where(y > 0, 0, 1)[:, None] * np.ones_like(pattern)
    np.testing.assert_array_equal(pattern[kind == RELEVANT], own[kind == RELEVANT])
    np.testing.assert_array_equal(pattern[kind == CONFUSION], 1 - own[kind == CONFUSION])
    irr = pattern[kind == IRRELEVANT]
    assert irr.min() == 2 and irr.max() == CFG.M - 1
    np.testing.assert_array_equal(majority_label(t.pattern_BxL), y)
    assert 0.4 < (y > 0).mean() < 0.6
    # every type appears at every position: positions carry nothing
    assert (kind == RELEVANT).mean(0).min() > 0.15


def test_noise_is_bounded_and_noisy_tokens_counted():
    t = SAMPLE(jax.random.PRNGKey(1), CFG, 400, CFG.n_star, CFG.tau)
    z = np.asarray(t.x_BxLxd) - np.asarray(jax.nn.one_hot(t.pattern_BxL, CFG.d))
    norm, noisy = np.linalg.norm(z, axis=-1), np.asarray(t.noisy_BxL)
    np.testing.assert_array_equal(noisy.sum(1), 4)
    assert norm[~noisy].max() <= 0.3 + 1e-5 and norm[noisy].max() <= 0.9 + 1e-5
    assert norm[noisy].mean() > 2 * norm[~noisy].mean()  # the noisy tokens really are noisier
    clean = SAMPLE(
        jax.random.PRNGKey(1), CFG, 400, CFG.n_star, 0.0
    )  # tau = 0: only the noisy tokens move
    z = np.asarray(clean.x_BxLxd) - np.asarray(jax.nn.one_hot(clean.pattern_BxL, CFG.d))
    np.testing.assert_array_equal(z[~np.asarray(clean.noisy_BxL)], 0)


def test_knobs_can_be_traced_and_vmapped():
    draw = jax.jit(jax.vmap(lambda k, n, tau: sample(k, CFG, 400, n_star=n, tau=tau)))
    t = draw(jax.random.split(jax.random.PRNGKey(2), 2), jnp.array([5, 9]), jnp.array([0.0, 0.3]))
    np.testing.assert_array_equal(
        (np.asarray(t.kind_BxL) == RELEVANT).sum(-1), [[5] * 400, [9] * 400]
    )
    z = np.asarray(t.x_BxLxd) - np.asarray(jax.nn.one_hot(t.pattern_BxL, CFG.d))
    assert np.abs(z[0][~np.asarray(t.noisy_BxL[0])]).max() == 0


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(alpha_star=0.1, alpha_conf=0.1, theorem_margin=False), "majority vote"),
        (dict(alpha_star=0.2, alpha_conf=0.1), "n_\\*=6 < 2e n_# = 16.31"),
        # Theorem 1's margin on the counts the data use: 0.3 >= 2e 0.05 as fractions, but 9 < 2e 2 tokens.
        (dict(alpha_star=0.3, alpha_conf=0.05), "n_\\*=9 < 2e n_# = 10.87"),
        (dict(d=4, M=6), "d=4 must be >= M=6"),
        (dict(tau=-1.0), "tau=-1.0"),
        (dict(noisy_tokens=40), "noisy_tokens=40"),
        (dict(L=30.0), "TokenConfig.L=30.0: give an integer"),
        (dict(tau=float("inf")), "TokenConfig.tau=inf: give a finite number"),
    ],
)
def test_bad_configs_say_what_to_change(kwargs, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        TokenConfig(**kwargs)


def test_theorem_margin_holds_on_the_rounded_counts():
    # alpha_* = 0.2 < 2e 0.04 as fractions, but the samples hold 6 >= 2e 1 tokens of each kind.
    tokens = TokenConfig(alpha_star=0.2, alpha_conf=0.04)
    assert (tokens.n_star, tokens.n_conf) == (6, 1)


@pytest.mark.parametrize(
    "n, knobs, words",
    [
        (-1, {}, "n=-1: draw an integer"),  # was an MLIR error about a tensor dimension
        (
            4,
            dict(n_star=1, n_conf=1),
            "need 0 <= n_conf < n_star",
        ),  # a tie: y was not the tokens' majority
        (4, dict(n_star=25), "n_star \\+ n_conf <= L=20"),
        (4, dict(noisy_tokens=21), "noisy_tokens=21 must lie in \\[0, L=20\\]"),
        (4, dict(noisy_tau=-0.5), "noisy_tau=-0.5: the noise bound must be >= 0"),
    ],
)
def test_sample_refuses_a_count_and_concrete_knobs_outside_the_data_model(n, knobs, words):
    with pytest.raises(ConfigError, match=words):
        sample(jax.random.PRNGKey(0), CFG, n, **knobs)
