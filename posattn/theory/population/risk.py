r"""Exact population risk (P) of Eq. (T) and its gradient, with no sampling over the data.

Since sigma is odd, F(-X) = -F(X) and the distribution is symmetric under (y, X) -> (-y, -X), so the
risk is the expectation at y = +1. With v = alpha w* + v_perp the data enter only through
<v, X_j> = alpha c_j + g_j, where c_j = 1 on the signal set S_l(X) and delta_j in {+1, -1, 0}
(probabilities q/2, q/2, 1-q) elsewhere, and g_j = <v, xi_j> i.i.d. N(0, t) with t = s^2 ||v_perp||^2
(orthogonal noise) or s^2 ||v||^2 (isotropic noise). Two exact enumerations of the (l(X), delta) part,
chosen by the caller (`GDConfig.population_method`), never from the values of A:

- "general" (`posattn.theory.population.general`): any A, L * 3^(D-C) patterns (D=16, C=4: 2.1M);
- "multiset" (`posattn.theory.population.multiset`): A read through the means (a, gamma, rho) of its
  diagonal, within-set and across-set entries, summing over multisets of per-set count types (D=36,
  C=4: 319,770). Exact when A is three-valued, which GD on (P) keeps from A^(0) = a0 I: autodiff
  through the means gives a three-valued gradient, the population one by symmetry (checked against
  the general path in tests/theory/test_population.py). `check_start` refuses any other start.

The Gaussian part is a second-order heat expansion in t (`posattn.theory.population.heat`): exact at
v_perp = 0, O(t^3) otherwise, and a function of ||v_perp||^2 so that the gradient along v_perp vanishes
at 0.
"""

import functools

import jax
import numpy as np

from posattn.errors import ConfigError
from posattn.theory.config import POPULATION_METHODS, TheoryConfig
from posattn.theory.data import Task
from posattn.theory.population.general import (
    MAX_GENERAL_PATTERNS,
    general_pattern_count,
    general_risk,
)
from posattn.theory.population.multiset import multiset_risk, n_multisets, three_value_form

MAX_MULTISETS = 2_000_000  # multiset path: ~1 GB of tables (the paper preset, D=36, C=4: 319,770)


def check_config(cfg: TheoryConfig, method: str) -> None:
    """Refuse, before any work, a problem (P) cannot be computed for by `method`: data other than
    Assumption 1's, or an enumeration that does not fit in memory."""
    if method not in POPULATION_METHODS:
        raise ConfigError(f"population_method={method!r}: choose one of {POPULATION_METHODS}")
    if cfg.dataset != "structured":
        raise ConfigError(
            f"risk='population_exact' needs dataset='structured' (Assumption 1); "
            f"dataset={cfg.dataset!r} has no exact population risk here"
        )
    if method == "multiset" and n_multisets(cfg.C, cfg.L) > MAX_MULTISETS:
        raise ConfigError(
            f"risk='population_exact' at D={cfg.D}, C={cfg.C} sums over "
            f"{n_multisets(cfg.C, cfg.L):,} multisets, more than the {MAX_MULTISETS:,} that "
            f"fit in memory; use fewer sets L = D / C, or risk='population_mc'"
        )
    if method == "general" and general_pattern_count(cfg) > MAX_GENERAL_PATTERNS:
        raise ConfigError(
            f"population_method='general' at D={cfg.D}, C={cfg.C} needs L*3^(D-C) = "
            f"{general_pattern_count(cfg):.3g} patterns (limit {MAX_GENERAL_PATTERNS}); use "
            f"population_method='multiset' with a three-value A (e.g. A = a0 I), a smaller "
            f"D - C, or risk='population_mc'"
        )


def three_value_deviation(A, sets) -> tuple[float, float]:
    """(deviation, tolerance): how far concrete A is from its three-value form, and the round-off
    (64 ulps of its largest entry) within which it counts as three-valued. In numpy: a host check."""
    A = np.asarray(A)
    sets = np.asarray(sets)
    ell = np.empty(A.shape[0], np.int64)
    ell[sets.reshape(-1)] = np.repeat(np.arange(len(sets)), sets.shape[1])
    same = ell[:, None] == ell[None, :]
    eye = np.eye(A.shape[0], dtype=bool)
    within, across = same & ~eye, ~same
    rho = A[across].mean()
    fit = np.where(
        eye, A[eye].mean(), np.where(within, A[within].mean() if within.any() else rho, rho)
    )
    tol = 64 * np.finfo(np.result_type(A.dtype, np.float32)).eps * (1 + np.abs(A).max())
    return float(np.abs(A - fit).max()), float(tol)


def choose_method(params, cfg: TheoryConfig, task: Task) -> str:
    """The method for concrete params: "multiset" if A is three-valued, else "general" if it fits, else
    a ConfigError that says what would work."""
    dev, tol = three_value_deviation(params["A"], task.sets)
    if dev <= tol:
        return "multiset"
    if general_pattern_count(cfg) <= MAX_GENERAL_PATTERNS:
        return "general"
    raise ConfigError(
        f"exact population risk: A is not three-valued (an entry is {dev:.3g} from the three-value "
        f"form) and the general enumeration at D={cfg.D}, C={cfg.C} needs L*3^(D-C) = "
        f"{general_pattern_count(cfg):.3g} patterns (limit {MAX_GENERAL_PATTERNS}); use a three-value A "
        f"(constant diagonal, within-set and across-set entries, e.g. A = a0 I; the multiset path covers "
        f"D={cfg.D} with {n_multisets(cfg.C, cfg.L)} multisets), a smaller D - C, or "
        f"risk='population_mc'"
    )


def check_start(params, cfg: TheoryConfig, task: Task, method: str) -> None:
    """Refuse a start the method would get wrong: the multiset path needs a three-valued A."""
    check_config(cfg, method)
    if method == "multiset":
        dev, tol = three_value_deviation(params["A"], task.sets)
        if dev > tol:
            raise ConfigError(
                f"population_method='multiset' reads A through its three means, but A is not "
                f"three-valued (an entry is {dev:.3g} from the three-value form): start from A = a0 I, "
                f"or use population_method='general' (D - C small), or risk='population_mc'"
            )


def value_statistics(v: jax.Array, w_star: jax.Array, cfg: TheoryConfig):
    """(alpha, t): alpha = <v, w*> and t, the variance of the i.i.d. Gaussians g_j = <v, xi_j>.

    t = s^2 ||v - alpha w*||^2 (orthogonal noise) or s^2 ||v||^2 (isotropic): a function of the squared
    norm, so d t / d v_perp = 2 s^2 v_perp is exactly 0 at v_perp = 0.
    """
    alpha = v @ w_star
    r = v - alpha * w_star if cfg.noise == "orthogonal" else v
    return alpha, cfg.s**2 * (r @ r)


def exact_risk(params, cfg: TheoryConfig, task: Task, method: str, mesh=None) -> jax.Array:
    """The population risk (P) of Eq. (T): E over the data distribution of log(1 + exp(-y F(X))).

    Pure and traceable (GD calls it inside its compiled step); `method` is static, "multiset" or
    "general" (module docstring). Exact over the signal set and the features; second order in
    ||v_perp||^2 for the noise. The dtype follows params (float64 under `jax.enable_x64` in tests).
    With `mesh` (a "data" mesh, `posattn.mesh`), the multiset path splits its patterns over the devices.
    """
    A, v = params["A"], params["v"]
    alpha, t = value_statistics(v, task.w_star.astype(v.dtype), cfg)
    if method == "general":
        return general_risk(A, alpha, t, cfg, task)
    a, gamma, rho, _ = three_value_form(A, task.sets)
    return multiset_risk(alpha, t, a, gamma, rho, cfg, mesh)


@functools.partial(jax.jit, static_argnames=("cfg", "method"))
def population_risk(params, cfg: TheoryConfig, task: Task, method: str) -> jax.Array:
    """`exact_risk` compiled once per (cfg, method), for callers outside a trace."""
    return exact_risk(params, cfg, task, method)


@functools.partial(jax.jit, static_argnames=("cfg", "method"))
def population_grad(params, cfg: TheoryConfig, task: Task, method: str):
    """(risk, grads) of (P) in params = {"A": (D, D), "v": (d,)}, compiled per (cfg, method).

    The gradient is the full one (A's diagonal included); `posattn.theory.step.descend` freezes it.
    """
    return jax.value_and_grad(exact_risk)(params, cfg, task, method)
