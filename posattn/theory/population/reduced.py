r"""The reduced dynamics of JSL22's proof sketch (Section 4): GD on (P) as recursions on a few scalars.

If A is three-valued (diagonal a, frozen; within-set gamma; across-set rho) and v = alpha w* + v_perp,
the population risk depends on (alpha, gamma, rho, p = ||v_perp||^2) only and its gradient keeps that
form (the population gradient in A is three-valued by symmetry, and the one in v is
(dR/dalpha) w* + 2 (dR/dp) v_perp). Full-matrix GD with step sizes (lr for v, lr_A for A) is then

    gamma <- gamma - lr_A / (D (C-1)) dR/dgamma      (each of the D (C-1) within-set entries moves by
    rho   <- rho   - lr_A / (D (D-C)) dR/drho         dR/dA_ij = dR/dgamma / (D (C-1)), etc.)
    alpha <- alpha - lr dR/dalpha
    p     <- p (1 - 2 lr dR/dp)^2                     (v_perp is only rescaled: p = 0 stays 0)

with R(alpha, gamma, rho, p) = `reduced_risk` (the exact multiset enumeration of
`posattn.theory.population.multiset`; for p > 0 the noise enters through the heat expansion in
t = s^2 p, or s^2 (alpha^2 + p) with isotropic noise). tests/theory/test_population.py checks these
recursions against full-matrix GD on the general-A population gradient.

These recursions are plain GD in closed form, and only GD: they take the two step sizes, not an
optimiser (`posattn.theory.optim`). Another optimiser (momentum, Adam) keeps state per coordinate, and
its dynamics on (P) are run on the full matrices with `posattn.theory.gd.fit(..., optimizer=...)`
(risk="population_exact").
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError
from posattn.theory.config import TheoryConfig
from posattn.theory.data import Task
from posattn.theory.population import multiset, pattern_loss
from posattn.theory.population.multiset import multiset_risk, three_value_form
from posattn.theory.population.pattern_loss import N_TERMS


class ReducedState(NamedTuple):
    """The scalars of the proof sketch: v = alpha w* + v_perp with p = ||v_perp||^2; A = (a, gamma, rho)."""

    alpha: jax.Array
    gamma: jax.Array
    rho: jax.Array
    p: jax.Array


def reduced_state(params, task: Task) -> ReducedState:
    """(alpha, gamma, rho, ||v_perp||^2) of full parameters (gamma, rho: means over the entries)."""
    v, w = params["v"], task.w_star.astype(params["v"].dtype)
    alpha = v @ w
    perp = v - alpha * w
    _, gamma, rho, _ = three_value_form(params["A"], task.sets)
    return ReducedState(alpha, gamma, rho, perp @ perp)


def reduced_risk(alpha, gamma, rho, cfg: TheoryConfig, a, p=0.0) -> jax.Array:
    """The population risk (P) as a function of (alpha, gamma, rho) (and ||v_perp||^2 = p), diagonal a."""
    t = cfg.s**2 * (p if cfg.noise == "orthogonal" else alpha * alpha + p)
    return multiset_risk(alpha, t, a, gamma, rho, cfg)


def _check_step_sizes(lr, lr_A) -> None:
    """A ConfigError unless lr and lr_A are numbers (or arrays): the recursions are GD's alone."""
    for name, value in (("lr", lr), ("lr_A", lr_A)):
        if not isinstance(value, (int, float, np.number, np.ndarray, jax.Array)):
            raise ConfigError(
                f"the reduced dynamics are GD in closed form: {name} must be a step size, not "
                f"{type(value).__name__}; for another optimiser train the full model on (P), "
                "posattn.theory.gd.fit(..., optimizer=...) with risk='population_exact'"
            )


def reduced_step(state: ReducedState, cfg: TheoryConfig, a, lr, lr_A) -> ReducedState:
    """One step of the scalar recursions (module docstring): full-matrix GD on (P), in four numbers."""
    _check_step_sizes(lr, lr_A)
    risk = lambda al, g, r, p: reduced_risk(al, g, r, cfg, a, p)
    d_alpha, d_gamma, d_rho, d_p = jax.grad(risk, argnums=(0, 1, 2, 3))(*state)
    D, C = cfg.D, cfg.C
    gamma = state.gamma - lr_A / (D * (C - 1)) * d_gamma if C > 1 else state.gamma
    return ReducedState(
        state.alpha - lr * d_alpha,
        gamma,
        state.rho - lr_A / (D * (D - C)) * d_rho,
        state.p * (1 - 2 * lr * d_p) ** 2,
    )


def reduced_trajectory(state: ReducedState, cfg: TheoryConfig, a, lr, lr_A, steps: int):
    """`steps` recursions of GD (step sizes lr, lr_A) in one `lax.scan`; returns the states after each
    step (leading axis steps) and the risk before each step."""
    _check_step_sizes(lr, lr_A)
    return _trajectory(state, cfg, a, lr, lr_A, steps)


@functools.partial(jax.jit, static_argnames=("cfg", "steps"))
def _trajectory(state: ReducedState, cfg: TheoryConfig, a, lr, lr_A, steps: int):
    def body(s, _):
        risk = reduced_risk(s.alpha, s.gamma, s.rho, cfg, a, s.p)
        new = reduced_step(s, cfg, a, lr, lr_A)
        return new, (new, risk)

    _, (states, risks) = jax.lax.scan(
        body, ReducedState(*(jnp.asarray(x) for x in state)), None, length=steps
    )
    return states, risks


def alpha_drift_split(alpha, gamma, rho, cfg: TheoryConfig, a) -> dict:
    """Where the drift of alpha under GD on (P), -dR/dalpha (v on span(w*)), comes from: the patterns the
    model misclassifies (y F <= 0) against the others (docs/theory_results.md, "Phase III").

    Each pattern's loss l(yF) moves alpha by -l'(yF) d(yF)/dalpha; for the odd, homogeneous cubic
    sigma, d(yF)/dalpha = 3 yF / alpha, so a misclassified pattern always pulls alpha down (a confident
    mistake costs linear loss) and a correct one pushes it up, less and less as its margin grows. Returns
    {"misclassified": drift from y F <= 0, "classified": from the rest, "total",
    "misclassified_mass": P[y F <= 0], "full_set_mass": P[a set besides the signal set is all +1 or all
    -1], the events (f* != yC) that such a set ties or outvotes the signal set}.
    """
    tables = multiset.multiset_tables(cfg.C, cfg.L, float(cfg.q))
    full = np.flatnonzero((tables.counts[:, 0] == cfg.C) | (tables.counts[:, 1] == cfg.C))
    others = tables.mult.astype(np.int64)
    others[..., 0] -= 1  # the signal set, of type (C, 0, 0), is in every pattern
    full_set = others[..., full].sum(-1) > 0  # (n_blocks, block)

    def pattern_sums(alpha):
        coef = multiset.attention_coefficients(
            *(jnp.asarray(x, jnp.float32) for x in (a, gamma, rho)), cfg
        )
        T, qs = multiset.per_set_terms(alpha, coef, cfg, tables)
        sums = jnp.einsum(
            "nbk,nkj->nbj",
            jnp.asarray(tables.mult, jnp.float32),
            T[:, tables.s_index, :].transpose(1, 0, 2),
        )
        loss = pattern_loss.expected_loss(
            tuple(sums[..., i] for i in range(N_TERMS)), qs, jnp.float32(0.0)
        )
        return loss, sums[..., 0]  # and F (y = +1)

    (_, margin), (d_loss, _) = jax.jvp(pattern_sums, (jnp.float32(alpha),), (jnp.float32(1.0),))
    drift = -np.asarray(
        tables.weight * d_loss
    )  # -dR/dalpha, pattern by pattern (padding has weight 0)
    wrong = np.asarray(margin) <= 0
    return {
        "misclassified": float(drift[wrong].sum()),
        "classified": float(drift[~wrong].sum()),
        "total": float(drift.sum()),
        "misclassified_mass": float(tables.weight[wrong].sum()),
        "full_set_mass": float(tables.weight[full_set].sum()),
    }
