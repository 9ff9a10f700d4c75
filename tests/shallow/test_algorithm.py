"""The paper's SGD by default: one step size, T = ceil(t_scale / (alpha_* eta)), a traced T, the fixed
per-token output weights a_(l), and token sparsification at training time."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.shallow import grid, phase_map, removal, train
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig
from posattn.shallow.data import IRRELEVANT, sample, sample_at
from posattn.shallow.init import init_params
from posattn.shallow.model import forward, hinge_loss

TOK = TokenConfig(
    d=6, M=4, L=12, alpha_star=0.5, alpha_conf=1 / 12, tau=0.3, noisy_tokens=3, noisy_tau=0.9
)
MODEL = ModelConfig(m_a=6, m_b=6, m=8, w_o_std=0.5)
SGD = SGDConfig(N=40, batch=4, n_test=32)


def test_defaults_are_the_papers_sgd():
    assert SGD.eta_attention is None and SGD.steps is None and SGD.train_remove == 0
    assert train.iterations(SGD, 0.25) == math.ceil(SGD.t_scale / (0.25 * SGD.eta))
    assert train.iterations(dataclasses.replace(SGD, steps=7), 0.25) == 7
    T = train.iterations(SGD, jnp.array([0.5, 0.25]))  # traced: one T per grid cell
    np.testing.assert_array_equal(T, [math.ceil(12 / 0.1), math.ceil(12 / 0.05)])
    cells, _ = grid.product_cells(TOK, MODEL, SGD, n_star=[3, 6])
    np.testing.assert_array_equal(
        cells.T, [train.iterations(SGD, 3 / 12), train.iterations(SGD, 6 / 12)]
    )


@pytest.mark.slow  # (seconds of training: `pytest -m slow`, as .ci/run)
def test_one_step_size_for_every_matrix_and_a_stays_fixed():
    model = dataclasses.replace(MODEL, per_token_output=True)
    params = init_params(jax.random.PRNGKey(0), TOK, model)
    batch = jax.jit(sample, static_argnums=(1, 2))(jax.random.PRNGKey(1), TOK, SGD.batch)
    batches = lambda key: batch
    new = jax.jit(lambda p: train.sgd_step(p, jax.random.PRNGKey(2), batches, model, SGD))(params)
    grads = jax.grad(hinge_loss)(params, batch.x_BxLxd, batch.y_B, model)
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        np.testing.assert_allclose(
            new[name], params[name] - SGD.eta * grads[name], rtol=1e-5, atol=1e-6
        )
        assert np.abs(grads[name]).max() > 1e-4, name
    np.testing.assert_array_equal(new["a"], params["a"])
    split = dataclasses.replace(SGD, eta_attention=1.0)  # the option: W_Q, W_K take their own step
    new = jax.jit(lambda p: train.sgd_step(p, jax.random.PRNGKey(2), batches, model, split))(params)
    np.testing.assert_allclose(new["W_Q"], params["W_Q"] - 1.0 * grads["W_Q"], rtol=1e-5, atol=1e-6)


def test_per_token_output_weights_follow_eq_1():
    model = dataclasses.replace(MODEL, per_token_output=True)
    params = init_params(jax.random.PRNGKey(3), TOK, model)
    a = np.asarray(params["a"])
    assert a.shape == (TOK.L, MODEL.m) and set(np.round(np.unique(a) * math.sqrt(MODEL.m), 6)) == {
        -1.0,
        1.0,
    }
    x = np.asarray(
        jax.jit(sample, static_argnums=(1, 2))(jax.random.PRNGKey(4), TOK, 3).x_BxLxd, np.float64
    )
    P = {k: np.asarray(v, np.float64) for k, v in params.items()}
    expected = []
    for X in x:  # Eq. (1) written out: F(X) = 1/L sum_l a_l^T relu(W_O sum_s W_V x_s softmax_s(x_s^T W_K^T W_Q x_l))
        logits = (X @ P["W_K"].T) @ (X @ P["W_Q"].T).T  # [s, l]
        att = np.exp(logits - logits.max(0)) / np.exp(logits - logits.max(0)).sum(0)
        z = (X @ P["W_V"].T).T @ att  # column l: sum_s W_V x_s att[s, l]
        expected.append(np.mean([a[l] @ np.maximum(P["W_O"] @ z[:, l], 0) for l in range(TOK.L)]))
    np.testing.assert_allclose(
        forward(params, jnp.asarray(x, jnp.float32), model), expected, rtol=1e-4, atol=1e-6
    )
    shared = forward(
        {k: v for k, v in params.items() if k != "a"}, jnp.asarray(x, jnp.float32), MODEL
    )
    assert not np.allclose(shared, expected, atol=1e-4)  # per-token weights change the output


@pytest.mark.slow  # (seconds of training: `pytest -m slow`, as .ci/run)
def test_a_traced_T_equals_the_same_run_of_static_T():
    params = init_params(jax.random.PRNGKey(5), TOK, MODEL)
    batches = train.drawn_batches(jax.random.PRNGKey(6), 40, SGD.batch, TOK)
    run = jax.jit(lambda T: train.train(params, jax.random.PRNGKey(7), batches, T, MODEL, SGD))
    static = jax.jit(lambda: train.train(params, jax.random.PRNGKey(7), batches, 9, MODEL, SGD))()
    both = jax.vmap(run)(
        jnp.array([9, 15])
    )  # vmapped: the loop runs to 15, the first run stops at 9
    for name in static:
        np.testing.assert_allclose(both[name][0], static[name], rtol=1e-5, atol=1e-6)
    assert not np.allclose(both["W_O"][1], static["W_O"])


def test_drawn_training_samples_do_not_depend_on_the_batch():
    key = jax.random.PRNGKey(8)
    draw = jax.jit(lambda idx: sample_at(key, idx, TOK))
    both, one = draw(jnp.array([3, 7])), draw(jnp.array([7]))
    np.testing.assert_array_equal(both.x_BxLxd[1], one.x_BxLxd[0])
    assert not np.allclose(both.x_BxLxd[0], both.x_BxLxd[1])


@pytest.mark.slow
def test_training_time_sparsification_trains_on_the_kept_tokens():
    params = init_params(jax.random.PRNGKey(9), TOK, MODEL)
    batch = jax.jit(sample, static_argnums=(1, 2))(jax.random.PRNGKey(10), TOK, SGD.batch)
    sgd = dataclasses.replace(SGD, train_remove=4, train_policy="irrelevant")
    key = jax.random.PRNGKey(11)
    new = jax.jit(lambda p: train.sgd_step(p, key, lambda k: batch, MODEL, sgd))(params)
    k_remove = jax.random.split(key)[1]
    keep = removal.keep_mask(
        removal.removal_scores(k_remove, "irrelevant", batch, params, MODEL), 4
    )
    assert (
        np.asarray(~keep) <= np.asarray(batch.kind_BxL == IRRELEVANT)
    ).all()  # only irrelevant tokens go
    grads = jax.grad(hinge_loss)(params, batch.x_BxLxd, batch.y_B, MODEL, keep)
    np.testing.assert_allclose(
        new["W_V"], params["W_V"] - SGD.eta * grads["W_V"], rtol=1e-5, atol=1e-6
    )
    full = jax.jit(lambda p: train.sgd_step(p, key, lambda k: batch, MODEL, SGD))(params)
    assert not np.allclose(new["W_V"], full["W_V"], atol=1e-6)


def test_noisy_tokens_of_irrelevant_kind_only():
    tok = dataclasses.replace(TOK, noisy_kind="irrelevant", noisy_tokens=4)
    t = jax.jit(sample, static_argnums=(1, 2))(jax.random.PRNGKey(12), tok, 64)
    noisy = np.asarray(t.noisy_BxL)
    assert (noisy.sum(1) == 4).all() and (np.asarray(t.kind_BxL)[noisy] == IRRELEVANT).all()
    cells, _ = grid.product_cells(
        TOK, MODEL, SGD, noisy_irrelevant=[0, 1]
    )  # the same as a traced grid knob
    assert cells.noisy_irrelevant.tolist() == [0, 1]


def test_short_top_rows_names_the_rows_that_never_reach_1():
    result = {"alpha_star": [0.2, 0.3], "success_rate": [[0, 0.5, 0.9], [0, 1, 1]]}
    assert phase_map.short_top_rows(result) == [0.2]
