"""Samplers of JSL22's synthetic data: Assumption 1 (spatially structured) and Figure 2 (Gaussian).

The randomness is kept in three places: `make_task` draws what is fixed for a learning problem (the
partition S_1..S_L and the feature w*; for Figure 2 the CNN labeller), `sample` draws data points, and
model initialisation takes its own key. `sample` is a pure function of its key, jittable (with `cfg`
and `n` static) and vmappable over keys.
"""
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from posattn.theory.config import TheoryConfig


class Task(NamedTuple):
    """What a learning problem fixes once: the partition and the feature(s).

    Attributes:
      sets: int (L, C), row l lists the patches of S_l (0-based, sorted).
      w_star: float (d,), the unit feature w*.
      cnn_filters: float (m, C, d) filters w_{r,k} of the Figure-2 CNN labeller (None otherwise).
      cnn_out: float (m,) its output weights a_r (None otherwise).
    """

    sets: jax.Array
    w_star: jax.Array
    cnn_filters: jax.Array | None = None
    cnn_out: jax.Array | None = None


def grid_sets(D: int, C: int) -> jax.Array:
    """The spatially localised partition: k x k blocks of the sqrt(D) x sqrt(D) grid, row-major.

    D=16, C=4 gives (0-based) {0,1,4,5}, {2,3,6,7}, {8,9,12,13}, {10,11,14,15} (Figure 1b-(1)).
    """
    side, k = math.isqrt(D), math.isqrt(C)
    idx = jnp.arange(D).reshape(side // k, k, side // k, k)  # (block row, in-row, block col, in-col)
    return jnp.transpose(idx, (0, 2, 1, 3)).reshape(D // C, C)


def set_index(sets: jax.Array) -> jax.Array:
    """int (D,): the set l that patch j belongs to."""
    L, C = sets.shape
    return jnp.zeros(L * C, jnp.int32).at[sets.reshape(-1)].set(jnp.repeat(jnp.arange(L, dtype=jnp.int32), C))


def same_set_mask(sets: jax.Array) -> jax.Array:
    """bool (D, D): True where patches i and j lie in the same set (the "true block mask")."""
    ell = set_index(sets)
    return ell[:, None] == ell[None, :]


def unit_vector(key: jax.Array, d: int) -> jax.Array:
    w = jax.random.normal(key, (d,))
    return w / jnp.linalg.norm(w)


def make_task(key: jax.Array, cfg: TheoryConfig) -> Task:
    """Draw the partition S_1..S_L (Definition 2.1) and the unit feature w* (Assumption 1)."""
    k_sets, k_w, k_cnn, k_out = jax.random.split(key, 4)
    if cfg.partition == "grid":
        sets = grid_sets(cfg.D, cfg.C)
    else:
        sets = jnp.sort(jax.random.permutation(k_sets, cfg.D).reshape(cfg.L, cfg.C), axis=1)
    w_star = unit_vector(k_w, cfg.d)
    if cfg.dataset == "structured":
        return Task(sets, w_star)
    # Figure 2 [D]: filters scaled so each pre-activation sum_k <w_{r,k}, X_{S_l[k]}> has unit variance.
    filters = jax.random.normal(k_cnn, (cfg.cnn_width, cfg.C, cfg.d)) / math.sqrt(cfg.C * cfg.d)
    if cfg.cnn_shared_filter:  # one filter for the whole block: w_{r,k} = w_{r,0} for every k
        filters = jnp.repeat(filters[:, :1], cfg.C, axis=1)
    out = jnp.where(jax.random.bernoulli(k_out, 0.5, (cfg.cnn_width,)), 1.0, -1.0)
    return Task(sets, w_star, filters, out)


def sample_coefficients(key: jax.Array, cfg: TheoryConfig, task: Task, n: int):
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


def patch_noise(key: jax.Array, cfg: TheoryConfig, w_star: jax.Array, shape) -> jax.Array:
    """xi ~ N(0, s^2 (I - w* w*^T)) ("orthogonal", the paper's) or N(0, s^2 I) ("isotropic")."""
    xi = cfg.s * jax.random.normal(key, (*shape, cfg.d))
    if cfg.noise == "orthogonal":
        xi = xi - (xi @ w_star)[..., None] * w_star
    return xi


def cnn_labeller(X: jax.Array, task: Task) -> jax.Array:
    """Figure 2's labeller f*(X) = sum_l sum_r a_r (sum_k <w_{r,k}, X_{S_l[k]}>)^3 (JSL22, Figure 2)."""
    X_blocks = X[:, task.sets, :]  # (n, L, C, d)
    h = jnp.einsum("nlkd,rkd->nlr", X_blocks, task.cnn_filters)
    return jnp.einsum("nlr,r->n", h**3, task.cnn_out)


def threshold(z: jax.Array, c: float) -> jax.Array:
    """Threshold_c(z) = z if |z| > c else 0 (Assumption 1)."""
    return jnp.where(jnp.abs(z) > c, z, 0.0)


def labelling_function(X: jax.Array, cfg: TheoryConfig, task: Task) -> jax.Array:
    """f*(X) of Assumption 1: sum_l Threshold_{0.9C}(sum_{i in S_l} <w*, X_i>); Figure 2: the CNN."""
    if cfg.dataset == "gaussian_cnn":
        return cnn_labeller(X, task)
    per_set = (X @ task.w_star)[:, task.sets].sum(-1)  # (n, L)
    return threshold(per_set, 0.9 * cfg.C).sum(-1)


def sample(key: jax.Array, cfg: TheoryConfig, task: Task, n: int):
    """Draw n data points (X (n, D, d), y (n,)) from Assumption 1, or from Figure 2's Gaussian data.

    Jittable with `cfg` and `n` static, and vmappable over `key`.
    """
    k_coef, k_noise = jax.random.split(key)
    if cfg.dataset == "gaussian_cnn":
        X = jax.random.normal(k_noise, (n, cfg.D, cfg.d))
        return X, jnp.where(cnn_labeller(X, task) >= 0, 1.0, -1.0)
    coef, y, _ = sample_coefficients(k_coef, cfg, task, n)
    X = coef[..., None] * task.w_star + patch_noise(k_noise, cfg, task.w_star, (n, cfg.D))
    return X, y
