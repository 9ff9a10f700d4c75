"""JSL22's spatially structured data (Definition 2.1, Assumption 1).

For the signal set S_l(X) (uniform in [L]) every patch is y w* + xi; every other patch is delta w* + xi
with delta = +1, -1, 0 with probabilities q/2, q/2, 1-q; the noise xi ~ N(0, s^2 (I - w* w*^T)) (or
isotropic, `TheoryConfig.noise`). Labels y are uniform in {-1, +1}.
"""

import jax
import jax.numpy as jnp

from posattn.theory.task import Task, set_index


def integer_labelling(cfg) -> bool:
    """f* = sum of the per-set sums of <w*, X_i> is an integer (0, +-C, ...) under the paper's noise,
    orthogonal to w*; isotropic noise adds N(0, s^2) to every <w*, X_i>."""
    return cfg.noise == "orthogonal"


def check(cfg) -> None:
    """Every TheoryConfig that passes its own checks is valid here."""


def make_labeller(key, cfg):
    """f* needs nothing beyond the partition and w*."""
    return None


def sample_coefficients(key: jax.Array, cfg, task: Task, n: int):
    """The w*-coefficients of Assumption 1, without the noise.

    Returns (coef (n, D), y (n,), signal_set (n,)): coef_j = y on the signal set S_{l(X)} and
    delta_j in {+1, -1, 0} with probabilities q/2, q/2, 1-q elsewhere.
    """
    k_y, k_l, k_delta = jax.random.split(key, 3)
    y = jnp.where(jax.random.bernoulli(k_y, 0.5, (n,)), 1.0, -1.0)
    signal_set = jax.random.randint(k_l, (n,), 0, cfg.L)
    u = jax.random.uniform(k_delta, (n, cfg.D))
    delta = jnp.where(u < cfg.q / 2, 1.0, jnp.where(u < cfg.q, -1.0, 0.0))
    in_signal = set_index(task.sets)[None, :] == signal_set[:, None]
    return jnp.where(in_signal, y[:, None], delta), y, signal_set


def patch_noise(key: jax.Array, cfg, w_star: jax.Array, shape) -> jax.Array:
    """xi ~ N(0, s^2 (I - w* w*^T)) ("orthogonal", the paper's) or N(0, s^2 I) ("isotropic")."""
    xi = cfg.s * jax.random.normal(key, (*shape, cfg.d))
    if cfg.noise == "orthogonal":
        xi = xi - (xi @ w_star)[..., None] * w_star
    return xi


def threshold(z: jax.Array, c: float) -> jax.Array:
    """Threshold_c(z) = z if |z| > c else 0 (Assumption 1)."""
    return jnp.where(jnp.abs(z) > c, z, 0.0)


def labelling_function(X: jax.Array, cfg, task: Task) -> jax.Array:
    """f*(X) = sum_l Threshold_{0.9C}(sum_{i in S_l} <w*, X_i>) (Assumption 1)."""
    per_set = (X @ task.w_star)[:, task.sets].sum(-1)  # (n, L)
    return threshold(per_set, 0.9 * cfg.C).sum(-1)


def sample(key: jax.Array, cfg, task: Task, n: int):
    """n data points (X (n, D, d), y (n,)) of Assumption 1."""
    k_coef, k_noise = jax.random.split(key)
    coef, y, _ = sample_coefficients(k_coef, cfg, task, n)
    X = coef[..., None] * task.w_star + patch_noise(k_noise, cfg, task.w_star, (n, cfg.D))
    return X, y
