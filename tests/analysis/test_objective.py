"""The objective of PK22's Hessians and landscapes: NLL on mixed-up, smoothed targets + its L2 term."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from posattn.analysis import objective
from posattn.errors import ConfigError


def pk22_l2(params):
    """PK22's ops/norm.py l2, in numpy: sum over parameters of torch.norm(param) (not squared)."""
    return sum(np.sqrt(np.sum(np.asarray(t, np.float64) ** 2)) for t in jax.tree.leaves(params))


def _timm_mixup_targets(labels, num_classes, lam, smoothing):
    """timm's mixup_target (PK22's transform, losslandscape.ipynb), in numpy: smoothed one-hots of y and of
    y flipped, mixed by lam."""
    off = smoothing / num_classes
    one_hot = lambda y: np.where(np.arange(num_classes) == y[:, None], 1.0 - smoothing + off, off)  # noqa: E731
    return lam * one_hot(labels) + (1 - lam) * one_hot(labels[::-1])


def test_l2_penalty_is_pk22s_sum_of_norms():
    params = {"w": jnp.full((2, 2), 3.0), "b": jnp.arange(4.0), "s": {"c": -jnp.ones((1, 1, 5))}}
    assert objective.WEIGHT_DECAY == 0.05  # PK22's configs/cifar100_vit.yaml
    np.testing.assert_allclose(
        objective.l2_penalty(params, objective.WEIGHT_DECAY), 0.05 * pk22_l2(params), rtol=1e-6
    )
    # a tensor at zero (a zero-initialised bias) leaves the Hessian finite
    zero = {"w": jnp.ones((2, 2)), "b": jnp.zeros(3)}
    assert np.isfinite(ravel_pytree(jax.hessian(objective.l2_penalty)(zero, 0.05))[0]).all()
    squares = sum(np.sum(np.asarray(t) ** 2) for t in jax.tree.leaves(params))
    np.testing.assert_allclose(
        objective.l2_penalty(params, 0.1, "squared"), 0.05 * squares, rtol=1e-6
    )


def test_mixed_targets_are_timms_mixup_with_pk22s_alpha_and_smoothing():
    x = jax.random.normal(jax.random.key(0), (6, 4, 4, 1))
    y = jnp.array([0, 1, 2, 2, 1, 0])
    xm, t = objective.mixed_targets(jax.random.key(1), x, y, 3)
    x, xm = np.asarray(x, np.float64), np.asarray(xm, np.float64)
    lam = (xm[0] - x[5]).ravel() @ (x[0] - x[5]).ravel() / np.sum((x[0] - x[5]) ** 2)
    assert 0 < lam < 1 and abs(lam - 0.5) < 0.5
    np.testing.assert_allclose(xm, lam * x + (1 - lam) * x[::-1], atol=1e-5)
    np.testing.assert_allclose(t, _timm_mixup_targets(np.asarray(y), 3, lam, 0.1), atol=1e-5)
    # alpha = 0: no mixup
    x0, t0 = objective.mixed_targets(jax.random.key(1), jnp.asarray(x), y, 3, alpha=0.0)
    np.testing.assert_array_equal(x0, x)
    np.testing.assert_allclose(t0, _timm_mixup_targets(np.asarray(y), 3, 1.0, 0.1), atol=1e-6)


def test_mixed_targets_refuse_labels_out_of_range_one_hot_labels_and_a_negative_alpha():
    x = jnp.zeros((4, 2, 2, 1))
    # a label of 3 for 3 classes: today a target of smoothing / K only, summing to 0.1, not 1
    with pytest.raises(ConfigError, match=r"labels must be integer class indices in \[0, 3\)"):
        objective.mixed_targets(jax.random.key(0), x, jnp.array([0, 1, 2, 3]), 3)
    with pytest.raises(ConfigError, match="one class index per example"):
        objective.mixed_targets(jax.random.key(0), x, jnp.eye(4, 3), 3)
    with pytest.raises(ConfigError, match="alpha=-1.0"):
        objective.mixed_targets(jax.random.key(0), x, jnp.array([0, 1, 2, 0]), 3, alpha=-1.0)
