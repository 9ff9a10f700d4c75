"""Issue 50's linear baseline: the ridge least-squares classifier of the mean token, checked against
numpy's own solve on the same draw, and on the data model where the answer is known."""

import jax
import numpy as np

from posattn.papers.lwlc23 import linear_baseline, regime_search
from posattn.shallow.config import TokenConfig
from posattn.shallow.data import sample


def test_the_classifier_is_the_ridge_least_squares_fit_of_the_mean_token():
    tokens = TokenConfig(d=16, M=6, L=30, alpha_star=0.3, alpha_conf=0.0, tau=2.0)
    key, N = jax.random.key(3), 16
    k_train, k_test = jax.random.split(key)
    train = sample(k_train, tokens, N, n_star=9)
    test = sample(k_test, tokens, linear_baseline.N_TEST, n_star=9)
    X = np.asarray(train.x_BxLxd, np.float64).mean(1)
    w = np.linalg.solve(X.T @ X + linear_baseline.RIDGE * np.eye(16), X.T @ np.asarray(train.y_B))
    Xt = np.asarray(test.x_BxLxd, np.float64).mean(1)
    errors = np.sum(np.sign(Xt @ w) != np.asarray(test.y_B))
    assert int(linear_baseline.test_errors(key, 9, tokens=tokens, N=N)) == errors > 0


def test_noiseless_tokens_are_separated_from_a_handful_of_samples():
    # tau = 0: the mean token is (n_* mu_y + irrelevant patterns) / L, separable along mu_1 - mu_2
    tokens = TokenConfig(d=16, M=6, L=30, alpha_star=0.3, alpha_conf=0.0, tau=0.0)
    keys = jax.random.split(jax.random.key(0), 8)
    errors = jax.vmap(lambda k: linear_baseline.test_errors(k, 9, tokens=tokens, N=8))(keys)
    assert not errors.any()
    out = linear_baseline.screen(regime_search.Setting.of("A1"), seeds=2)
    assert [r["n_star"] for r in out["rows"]] == regime_search.Setting.of("A1").n_stars()
