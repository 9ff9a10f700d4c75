"""The token data of LWLC23 (Section 2): label-relevant, confusion and label-irrelevant tokens.

`sample(key, cfg, n)` is a pure function of its key, jittable (with `cfg` and `n` static) and
vmappable over keys. The grid knobs n_*, n_#, tau and the noisy tokens' count and bound may be given as
traced arrays (keyword arguments of `sample`), so a whole phase map over them is one vmapped computation
(`posattn.shallow.grid`). `sample_at(key, idx_B, ...)` draws training sample i from fold_in(key, i): a
training set of any size that is never stored, of which the first N are the same for every N.
"""

import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError
from posattn.shallow.config import TokenConfig

RELEVANT, CONFUSION, IRRELEVANT = 0, 1, 2  # token types; "noisy" is a separate flag (any type)


class Tokens(NamedTuple):
    """n samples of L tokens, with what each token is (for metrics and token sparsification).

    Attributes:
      x_BxLxd: the tokens x_l = mu_(pattern) + z_l.
      y_B: labels in {+1, -1}.
      kind_BxL: RELEVANT (the label's pattern), CONFUSION (the other discriminative pattern) or
        IRRELEVANT (one of mu_3..mu_M).
      pattern_BxL: index j of the pattern mu_(j+1) of each token (0 = mu_1, 1 = mu_2, ...).
      noisy_BxL: True for the tokens with the larger noise bound `noisy_tau`.
    """

    x_BxLxd: jax.Array
    y_B: jax.Array
    kind_BxL: jax.Array
    pattern_BxL: jax.Array
    noisy_BxL: jax.Array


def ranks(u_BxL: jax.Array) -> jax.Array:
    """int (n, L): the rank of each token in its sample by `u` (a uniformly random permutation when u is
    i.i.d. uniform). Types are assigned by rank (rank < n_* is relevant, ...), so the counts are exact
    and may be traced values, and the positions of each type are uniformly random."""
    return jnp.argsort(jnp.argsort(u_BxL, axis=-1), axis=-1)


def bounded_noise(key: jax.Array, bound_BxL: jax.Array, d: int) -> jax.Array:
    """z ~ N(0, bound^2/d I) clipped to norm `bound` (so ||z|| <= tau, as the data model requires)."""
    g_BxLxd = jax.random.normal(key, (*bound_BxL.shape, d)) * (bound_BxL / jnp.sqrt(d))[..., None]
    norm_BxL = jnp.linalg.norm(g_BxLxd, axis=-1)
    shrink_BxL = jnp.where(norm_BxL > bound_BxL, bound_BxL / jnp.maximum(norm_BxL, 1e-30), 1.0)
    return g_BxLxd * shrink_BxL[..., None]


def check_knobs(
    cfg: TokenConfig, n_star=None, n_conf=None, noisy_tokens=None, tau=None, noisy_tau=None
):
    """ConfigError unless `sample`'s overrides that are given and concrete keep the data model's
    invariants (as TokenConfig checks its own): 0 <= n_# < n_* (the label is the majority vote of the
    discriminative tokens: else it disagrees with them), n_* + n_# <= L, 0 <= noisy tokens <= L and
    noise bounds >= 0. Traced values (a grid's, under vmap) are not known here."""
    traced = lambda v: isinstance(v, jax.core.Tracer)
    if (n_star is not None or n_conf is not None) and not (traced(n_star) or traced(n_conf)):
        star = np.asarray(cfg.n_star if n_star is None else n_star)
        conf = np.asarray(cfg.n_conf if n_conf is None else n_conf)
        if not ((0 <= conf) & (conf < star) & (star + conf <= cfg.L)).all():
            raise ConfigError(
                f"n_star={star.tolist()}, n_conf={conf.tolist()}: need 0 <= n_conf < n_star "
                f"and n_star + n_conf <= L={cfg.L} (the label is the discriminative tokens' "
                "majority)"
            )
    if noisy_tokens is not None and not traced(noisy_tokens):
        if not ((0 <= np.asarray(noisy_tokens)) & (np.asarray(noisy_tokens) <= cfg.L)).all():
            raise ConfigError(
                f"noisy_tokens={np.asarray(noisy_tokens).tolist()} must lie in [0, L={cfg.L}]"
            )
    for name, bound in (("tau", tau), ("noisy_tau", noisy_tau)):
        if bound is not None and not traced(bound) and (np.asarray(bound) < 0).any():
            raise ConfigError(f"{name}={np.asarray(bound).tolist()}: the noise bound must be >= 0")


def sample(
    key: jax.Array,
    cfg: TokenConfig,
    n: int,
    n_star=None,
    tau=None,
    n_conf=None,
    noisy_tokens=None,
    noisy_tau=None,
    noisy_irrelevant=None,
) -> Tokens:
    """Draw n samples of the data model: y uniform on {+1, -1}; n_* tokens of the label's pattern, n_#
    of the other discriminative pattern, the rest irrelevant patterns drawn uniformly from mu_3..mu_M;
    every token plus noise of norm <= tau (`noisy_tokens` of them, of any type or irrelevant only as
    cfg.noisy_kind says, <= `noisy_tau`).

    n_star, tau, n_conf, noisy_tokens, noisy_tau: override cfg's (may be traced, e.g. vmapped over a grid);
    noisy_irrelevant: 1 = noisy tokens of irrelevant kind only, 0 = any (default: cfg.noisy_kind).
    ConfigError for n that is not an integer >= 0, and for concrete overrides outside TokenConfig's
    ranges (`check_knobs`; traced ones, a grid's, are the caller's to keep in range).
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ConfigError(f"n={n!r}: draw an integer number of samples >= 0")
    check_knobs(cfg, n_star, n_conf, noisy_tokens, tau, noisy_tau)
    n_star = cfg.n_star if n_star is None else n_star
    tau = cfg.tau if tau is None else tau
    n_conf = cfg.n_conf if n_conf is None else n_conf
    noisy_tokens = cfg.noisy_tokens if noisy_tokens is None else noisy_tokens
    noisy_tau = cfg.noisy_tau if noisy_tau is None else noisy_tau
    noisy_irrelevant = (
        (cfg.noisy_kind == "irrelevant") if noisy_irrelevant is None else noisy_irrelevant
    )
    # Two random draws in all (each jax.random call adds about a second of XLA compile time on a CPU).
    k_u, k_noise = jax.random.split(key)
    u = jax.random.uniform(k_u, (n, 3 * cfg.L + 1))
    y_B = jnp.where(u[:, 0] < 0.5, 1.0, -1.0)
    rank_BxL = ranks(u[:, 1 : cfg.L + 1])
    kind_BxL = jnp.where(
        rank_BxL < n_star, RELEVANT, jnp.where(rank_BxL < n_star + n_conf, CONFUSION, IRRELEVANT)
    )
    own_B = jnp.where(y_B > 0, 0, 1)  # mu_1 for y = +1, mu_2 for y = -1
    u_irr = u[:, cfg.L + 1 : 2 * cfg.L + 1]  # uniform on mu_3..mu_M: floor(u (M - 2)), u < 1
    irrelevant_BxL = 2 + jnp.minimum(jnp.floor(u_irr * (cfg.M - 2)), cfg.M - 3).astype(jnp.int32)
    pattern_BxL = jnp.where(
        kind_BxL == RELEVANT,
        own_B[:, None],
        jnp.where(kind_BxL == CONFUSION, 1 - own_B[:, None], irrelevant_BxL),
    )
    # noisy_irrelevant: irrelevant tokens rank first (u < 1 < 2) among the candidates for noise
    u_noisy = u[:, 2 * cfg.L + 1 :] + 2.0 * noisy_irrelevant * (kind_BxL != IRRELEVANT)
    noisy_BxL = ranks(u_noisy) < noisy_tokens
    bound_BxL = jnp.where(noisy_BxL, noisy_tau, tau)
    x_BxLxd = jax.nn.one_hot(pattern_BxL, cfg.d) + bounded_noise(k_noise, bound_BxL, cfg.d)
    return Tokens(x_BxLxd, y_B, kind_BxL, pattern_BxL, noisy_BxL)


def sample_at(key: jax.Array, idx_B: jax.Array, cfg: TokenConfig, **knobs) -> Tokens:
    """The training samples number idx_B of the set drawn from `key`: sample i comes from
    fold_in(key, i), so it does not depend on which other samples are drawn. `knobs` as `sample`'s."""
    one = lambda i: jax.tree.map(
        lambda a: a[0], sample(jax.random.fold_in(key, i), cfg, 1, **knobs)
    )
    return jax.vmap(one)(idx_B)


def majority_label(pattern_BxL: jax.Array) -> jax.Array:
    """The label the discriminative tokens vote for: +1 if mu_1 outnumbers mu_2, -1 if fewer, 0 on a tie."""
    votes_B = (pattern_BxL == 0).sum(-1) - (pattern_BxL == 1).sum(-1)
    return jnp.sign(votes_B).astype(jnp.float32)
