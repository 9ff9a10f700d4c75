"""Eq. (1): the mask removes tokens, the attention-free network, the initial model, hinge gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.shallow.config import ModelConfig, TokenConfig
from posattn.shallow.data import sample
from posattn.shallow.init import init_params
from posattn.shallow.model import forward, hinge_loss

SAMPLE = jax.jit(sample, static_argnums=(1, 2))  # eager, every operation compiles on its own

TOK = TokenConfig(d=6, M=4, L=12, alpha_star=0.5, alpha_conf=1 / 12, tau=0.2)
VIT = ModelConfig(m_a=6, m_b=8, m=10, w_o_std=0.5)
FREE = ModelConfig(attention="none", m_a=6, m_b=8, m=10, w_o_std=0.5)


@pytest.mark.slow
def test_mask_equals_model_on_the_shortened_token_list():
    t = jax.tree.map(lambda a: a[:3], SAMPLE(jax.random.PRNGKey(0), TOK, 16))
    params = init_params(jax.random.PRNGKey(1), TOK, VIT)
    keep = jax.random.bernoulli(jax.random.PRNGKey(2), 0.6, (3, TOK.L)).at[:, 0].set(True)
    run = jax.jit(forward, static_argnums=2)
    for cfg in (VIT, FREE):
        masked = np.asarray(run(params, t.x_BxLxd, cfg, keep))
        short = [
            float(run(params, t.x_BxLxd[b][np.asarray(keep[b])][None], cfg)[0]) for b in range(3)
        ]
        np.testing.assert_allclose(masked, short, rtol=1e-5, atol=1e-6)
        assert not np.allclose(masked, run(params, t.x_BxLxd, cfg), atol=1e-4)  # removal mattered


def test_attention_free_is_the_vit_with_uniform_attention_on_one_token():
    # W_Q = 0 makes every logit 0, so attention is uniform and every query sees mean_s W_V x_s: the ViT
    # is then the attention-free network applied to the single token mean_s x_s. With several tokens
    # the attention-free network differs (ReLU of a mean is not the mean of ReLUs).
    t = SAMPLE(jax.random.PRNGKey(3), TOK, 16)
    params = {**init_params(jax.random.PRNGKey(4), TOK, VIT), "W_Q": jnp.zeros((8, 6))}
    uniform = forward(params, t.x_BxLxd, VIT)
    np.testing.assert_allclose(
        uniform, forward(params, t.x_BxLxd.mean(1, keepdims=True), FREE), rtol=1e-5
    )
    assert not np.allclose(uniform, forward(params, t.x_BxLxd, FREE), atol=1e-4)
    one_token = t.x_BxLxd[:, :1]  # a single token attends to itself: both networks agree
    np.testing.assert_allclose(
        forward(params, one_token, VIT), forward(params, one_token, FREE), rtol=1e-5
    )


def test_proper_initial_model():
    cfg = ModelConfig(m_a=7, m_b=9, m=10, sigma=0.2, delta=0.3)
    p = init_params(jax.random.PRNGKey(5), TOK, cfg)
    exact = init_params(
        jax.random.PRNGKey(5), TOK, ModelConfig(m_a=7, m_b=9, m=10, sigma=0.0, delta=0.0)
    )
    for name, size in (("W_V", 0.2), ("W_K", 0.3), ("W_Q", 0.3)):
        np.testing.assert_allclose(np.linalg.norm(p[name] - exact[name], axis=0), size, rtol=1e-5)
        gram = np.asarray(exact[name].T @ exact[name])
        np.testing.assert_allclose(gram, np.eye(TOK.d), atol=1e-5)  # orthonormal embeddings
    np.testing.assert_allclose(
        exact["W_Q"][:, :2], exact["W_K"][:, :2], atol=1e-6
    )  # q_1 = r_1, q_2 = r_2
    cross = np.asarray(exact["W_Q"][:, 2:].T @ exact["W_K"][:, :2])
    np.testing.assert_allclose(cross, 0, atol=1e-5)  # r_j, j >= 3, orthogonal to q_1, q_2


def test_hinge_gradient_matches_finite_differences():
    t = SAMPLE(jax.random.PRNGKey(6), TOK, 16)
    params = init_params(jax.random.PRNGKey(7), TOK, VIT)
    params = {**params, "W_O": 2.0 * params["W_O"]}  # margins spread around 1: some hinges active
    margin = t.y_B * forward(params, t.x_BxLxd, VIT)
    assert (margin < 1).any() and np.abs(margin - 1).min() > 1e-2  # away from the kink
    loss = jax.jit(lambda p: hinge_loss(p, t.x_BxLxd, t.y_B, VIT))
    grads = jax.grad(loss)(params)
    for i, name in enumerate(sorted(params)):
        v = jax.random.normal(jax.random.PRNGKey(10 + i), params[name].shape)
        h = 1e-3
        fd = (
            loss({**params, name: params[name] + h * v})
            - loss({**params, name: params[name] - h * v})
        ) / (2 * h)
        np.testing.assert_allclose(fd, jnp.vdot(grads[name], v), rtol=2e-2, atol=1e-4, err_msg=name)
        assert abs(float(jnp.vdot(grads[name], v))) > 1e-3, name


def test_hinge_loss_refuses_labels_in_0_1_and_labels_of_another_shape():
    t = SAMPLE(jax.random.PRNGKey(6), TOK, 16)
    params = init_params(jax.random.PRNGKey(7), TOK, VIT)
    with pytest.raises(ConfigError, match=r"labels must be -1 or \+1.*2 \* y - 1"):
        hinge_loss(params, t.x_BxLxd, (t.y_B + 1) / 2, VIT)
    with pytest.raises(ConfigError, match=r"y_B has shape \(16, 1\)"):
        hinge_loss(params, t.x_BxLxd, t.y_B[:, None], VIT)  # broadcast to a (16, 16) loss


def test_forward_refuses_parameters_of_another_config_and_samples_with_no_token_kept():
    t = SAMPLE(jax.random.PRNGKey(6), TOK, 4)
    params = init_params(jax.random.PRNGKey(7), TOK, VIT)
    per_token = ModelConfig(m_a=6, m_b=8, m=10, w_o_std=0.5, per_token_output=True)
    with pytest.raises(ConfigError, match=r"needs \{.*'a': \(12, 10\)\}"):
        forward(params, t.x_BxLxd, per_token)  # was a KeyError
    with pytest.raises(ConfigError, match="Eq. \\(1\\) of this ModelConfig"):
        forward(
            init_params(jax.random.PRNGKey(7), TOK, per_token), t.x_BxLxd, VIT
        )  # "a" was ignored
    keep = jnp.ones((4, 12), bool).at[2].set(False)
    with pytest.raises(ConfigError, match="removes every token of some sample"):
        forward(params, t.x_BxLxd, VIT, keep)  # F was NaN
