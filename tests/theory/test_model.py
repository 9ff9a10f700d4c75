"""Eq. (T): symmetries that a wrong implementation breaks, and its gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.theory import GDConfig, TheoryConfig, forward, init_params, make_task, sample
from posattn.theory.model import attention, empirical_risk, sigma

CFG = TheoryConfig(D=16, C=4, d=8, q=0.4)


def _point(seed, cfg=CFG):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    task = make_task(k1, cfg)
    params = {
        "A": jax.random.normal(k2, (cfg.D, cfg.D)),
        "v": 0.2 * jax.random.normal(k3, (cfg.d,)),
    }
    X, y = sample(jax.random.key(seed + 100), cfg, task, 64)
    return params, X, y


@pytest.mark.parametrize("activation", ["cubic", "quintic"])
def test_F_is_odd(activation):
    cfg = TheoryConfig(D=16, C=4, d=8, q=0.4, activation=activation)
    params, X, _ = _point(0, cfg)
    np.testing.assert_allclose(forward(params, -X, cfg), -forward(params, X, cfg), rtol=1e-5)


def test_F_matches_eq_T_written_out():
    params, X, _ = _point(1)
    S = np.asarray(jax.nn.softmax(np.asarray(params["A"]) / np.sqrt(CFG.d), axis=1))
    Xv = np.asarray(X) @ np.asarray(params["v"])
    expected = ((CFG.D * Xv @ S.T) ** 3).sum(1)
    np.testing.assert_allclose(forward(params, X, CFG), expected, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(attention(params["A"], CFG)).sum(1), 1, rtol=1e-6)


def test_options_drop_temperature_and_D():
    cfg = TheoryConfig(D=16, C=4, d=8, q=0.4, temperature=False, scale_by_D=False)
    params, X, _ = _point(2)
    S = np.asarray(jax.nn.softmax(np.asarray(params["A"]), axis=1))
    expected = (((np.asarray(X) @ np.asarray(params["v"])) @ S.T) ** 3).sum(1)
    np.testing.assert_allclose(forward(params, X, cfg), expected, rtol=1e-4)
    np.testing.assert_allclose(sigma(jnp.array(2.0), "quintic"), 32 + 0.06, rtol=1e-6)


def test_permuting_patches_with_rows_and_columns_of_A_leaves_F_unchanged():
    params, X, _ = _point(3)
    perm = np.random.default_rng(0).permutation(CFG.D)
    permuted = {"A": params["A"][perm][:, perm], "v": params["v"]}
    np.testing.assert_allclose(
        forward(permuted, X[:, perm], CFG), forward(params, X, CFG), rtol=1e-4
    )
    # ...while permuting the patches alone does change F (A is not permutation invariant).
    assert not np.allclose(forward(params, X[:, perm], CFG), forward(params, X, CFG), rtol=1e-3)


def test_grad_matches_central_finite_differences():
    with jax.enable_x64(True):
        params, X, y = _point(4)
        params = jax.tree.map(lambda a: a.astype(jnp.float64), params)
        X, y = X.astype(jnp.float64), y.astype(jnp.float64)
        risk = lambda p: empirical_risk(p, X, y, CFG)
        grads = jax.grad(risk)(params)
        rng = np.random.default_rng(0)
        for name in ("A", "v"):
            for _ in range(4):
                direction = rng.normal(size=params[name].shape)
                eps = 1e-5
                plus = {**params, name: params[name] + eps * direction}
                minus = {**params, name: params[name] - eps * direction}
                fd = (risk(plus) - risk(minus)) / (2 * eps)
                np.testing.assert_allclose(
                    float((grads[name] * direction).sum()), float(fd), rtol=1e-6, atol=1e-10
                )


def test_init_params():
    task = make_task(jax.random.key(0), CFG)
    p = init_params(jax.random.key(1), CFG, GDConfig(a0=2.0, v_std=0.1))
    np.testing.assert_array_equal(np.asarray(p["A"]), 2.0 * np.eye(16))
    assert p["v"].shape == (8,)
    q = init_params(jax.random.key(1), CFG, GDConfig(v_init="aligned", v_std=0.1), task.w_star)
    np.testing.assert_allclose(
        np.asarray(q["v"]), 0.1 * np.sqrt(8) * np.asarray(task.w_star), rtol=1e-6
    )


def test_the_risk_refuses_labels_in_0_1_and_labels_of_another_shape():
    params, X, y = _point(0)
    with pytest.raises(
        ConfigError, match=r"labels must be -1 or \+1, got values \[0.0, 1.0\].*2 \* y - 1"
    ):
        empirical_risk(params, X, (y + 1) / 2, CFG)  # y = 0 gave a constant log 2 with no gradient
    with pytest.raises(ConfigError, match=r"y \(64, 1\): give one per sample of X"):
        empirical_risk(params, X, y[:, None], CFG)  # broadcast to a (64, 64) loss
    with pytest.raises(ConfigError, match=r"weight \(3,\)"):
        empirical_risk(params, X, y, CFG, jnp.ones(3))
    # Under jit the labels are traced: shapes only, no host sync.
    np.testing.assert_allclose(
        jax.jit(lambda y: empirical_risk(params, X, y, CFG))(y),
        empirical_risk(params, X, y, CFG),
        rtol=1e-6,
    )


def test_the_model_refuses_parameters_and_samples_of_another_config():
    params, X, _ = _point(0)
    other = TheoryConfig(D=16, C=4, d=16)
    with pytest.raises(ConfigError, match=r"X has shape \(64, 16, 8\): .* \(n, 16, 16\)"):
        forward(init_params(jax.random.key(0), other), X, other)
    with pytest.raises(
        ConfigError, match=r"Eq. \(T\) here needs \{'A': \(16, 16\), 'v': \(16,\)\}"
    ):
        forward(params, jnp.zeros((2, 16, 16)), other)
    with pytest.raises(ConfigError, match=r"A has shape \(4, 4\)"):
        attention(jnp.eye(4), CFG)  # a softmax of any square matrix ran


def test_init_refuses_a_start_gradient_descent_cannot_leave_and_a_w_star_of_another_d():
    with pytest.raises(ConfigError, match="v_std=0 starts GD at v = 0"):
        init_params(jax.random.key(0), CFG, GDConfig(v_std=0.0))
    quintic = TheoryConfig(D=16, C=4, d=8, activation="quintic")  # sigma'(0) = 0.03: v = 0 moves
    assert not np.asarray(init_params(jax.random.key(0), quintic, GDConfig(v_std=0.0))["v"]).any()
    with pytest.raises(ConfigError, match=r"needs w_star of shape \(8,\), got \(16,\)"):
        init_params(jax.random.key(0), CFG, GDConfig(v_init="aligned"), jnp.ones(16) / 4)
