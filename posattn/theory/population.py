r"""Exact population risk (P) of Eq. (T) and its gradient (SPEC 1.5), with no sampling over the data.

Since sigma is odd, F(-X) = -F(X) and the distribution is symmetric under (y, X) -> (-y, -X), so the
risk is the expectation at y = +1. With v = alpha w* + v_perp the data enter only through
<v, X_j> = alpha c_j + g_j, where c_j = 1 on the signal set S_l(X) and delta_j in {+1, -1, 0}
(probabilities q/2, q/2, 1-q) elsewhere, and g_j = <v, xi_j> i.i.d. N(0, t) with t = s^2 ||v_perp||^2
(orthogonal noise) or s^2 ||v||^2 (isotropic noise). Two exact enumerations of the (l(X), delta) part:

- general A (`general_risk`): every signal set and every delta pattern of the D - C other patches,
  L * 3^(D-C) patterns (D=16, C=4: 4 * 531,441), in chunks under `lax.map`;
- three-value A (`posattn.theory.population_sym`): the multisets of per-set count types with their
  multinomial weights (D=36, C=4: 319,770), feasible far beyond the general path.

The Gaussian part is a second-order heat expansion in t (`posattn.theory.heat`): exact at v_perp = 0,
O(t^3) otherwise, and a function of ||v_perp||^2 so that the gradient along v_perp vanishes at 0.

`population_risk` picks the path: a three-value A takes the multiset path; any other A the general path
if L * 3^(D-C) <= MAX_GENERAL_PATTERNS, else a ConfigError. The multiset path reads (a, gamma, rho) as
the means of A's diagonal, within-set and across-set entries, so autodiff gives the gradient in every
entry of the full matrix: dR/dA_ij = (dR/dgamma) / (D (C-1)) within sets, (dR/drho) / (D (D-C)) across,
which is the population gradient because it is three-valued by symmetry (checked against the general
path in tests/theory/test_population.py). Inside `jax.jit` (as in `posattn.theory.gd`) the check is
traced: `lax.cond` between the two paths where both exist, and a NaN risk and gradient where only the
multiset path does and A is not three-valued.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError
from posattn.theory import heat
from posattn.theory.config import TheoryConfig
from posattn.theory.data import Task, same_set_mask
from posattn.theory.model import attention
from posattn.theory.population_sym import n_multisets, three_value_risk

MAX_MULTISETS = 2_000_000  # three-value path: ~1 GB of tables (the paper preset, D=36, C=4: 319,770)
MAX_GENERAL_PATTERNS = 2**22  # general-A enumeration: L * 3^(D-C) patterns at most (D=16, C=4: 2.1M)
CHUNK_ROWS = 2**15  # patterns (times signal sets) per `lax.map` step of the general path
METHODS = ("three_value", "general")


def general_pattern_count(cfg: TheoryConfig) -> int:
    """L * 3^(D-C): the (signal set, delta pattern) pairs the general path sums over."""
    return cfg.L * 3 ** (cfg.D - cfg.C)


def check_config(cfg: TheoryConfig) -> None:
    """The problems (P) can be computed for: Assumption 1's data, and a multiset table that fits in
    memory (the three-value path is the one that scales; its tables grow with n_multisets(C, L))."""
    if cfg.dataset != "structured":
        raise ConfigError(f"risk='population_exact' needs dataset='structured' (Assumption 1); "
                          f"dataset={cfg.dataset!r} has no exact population risk here")
    if n_multisets(cfg.C, cfg.L) > MAX_MULTISETS:
        raise ConfigError(f"risk='population_exact' at D={cfg.D}, C={cfg.C} sums over "
                          f"{n_multisets(cfg.C, cfg.L):,} multisets, more than the {MAX_MULTISETS:,} that "
                          f"fit in memory; use fewer sets L = D / C, or risk='population_mc'")


def value_statistics(v: jax.Array, w_star: jax.Array, cfg: TheoryConfig):
    """(alpha, t): alpha = <v, w*> and t, the variance of the i.i.d. Gaussians g_j = <v, xi_j>.

    t = s^2 ||v - alpha w*||^2 (orthogonal noise) or s^2 ||v||^2 (isotropic): a function of the squared
    norm, so d t / d v_perp = 2 s^2 v_perp is exactly 0 at v_perp = 0.
    """
    alpha = v @ w_star
    r = v - alpha * w_star if cfg.noise == "orthogonal" else v
    return alpha, cfg.s**2 * (r @ r)


def three_value_form(A: jax.Array, sets: jax.Array):
    """(a, gamma, rho, deviation): the means of A's diagonal, within-set off-diagonal and across-set
    entries, and the largest distance of an entry of A from the three-value matrix they define."""
    D = A.shape[0]
    eye = jnp.eye(D, dtype=bool)
    same = same_set_mask(sets)
    within, across = same & ~eye, ~same
    mean = lambda m: jnp.where(m, A, 0).sum() / jnp.maximum(m.sum(), 1)
    a, rho = mean(eye), mean(across)
    gamma = jnp.where(within.any(), mean(within), rho)  # C = 1 has no within-set entries
    fit = jnp.where(eye, a, jnp.where(within, gamma, rho))
    return a, gamma, rho, jnp.abs(A - fit).max()


def is_three_valued(A: jax.Array, sets: jax.Array) -> jax.Array:
    """True when A has the three-value form up to round-off (64 ulps of its largest entry)."""
    deviation = three_value_form(A, sets)[3]
    eps = jnp.finfo(jnp.result_type(A, float)).eps
    return deviation <= 64 * eps * (1 + jnp.abs(A).max())


def general_risk(A, alpha, t, cfg: TheoryConfig, task: Task) -> jax.Array:
    """(P) for any A by enumeration of (signal set, delta pattern), SPEC 1.5 ("for a general A").

    u = alpha M c with M = D S: the signal set contributes alpha M 1_{S_l}, the other patches
    alpha M[:, others] delta. Chunks of 3^k patterns go through `lax.map` under `jax.checkpoint`, so the
    backward pass recomputes a chunk instead of storing all of them.
    """
    D, C, L = cfg.D, cfg.C, cfg.L
    n = D - C
    dtype = jnp.result_type(alpha, float)
    M = (D if cfg.scale_by_D else 1.0) * attention(A.astype(dtype), cfg)
    Q = M @ M.T
    rows = (np.arange(L)[:, None] + 1 + np.arange(L - 1)[None, :]) % L  # the sets other than l
    others = task.sets[rows].reshape(L, n)
    base = alpha * M[:, task.sets].sum(-1).T  # (L, D): sum over j in S_l of M_ij
    M_other = alpha * M.T[others]  # (L, n, D): row j of M^T for each non-signal patch j
    # P(delta) = (q/2)^nnz (1-q)^(n-nnz), tabulated by nnz so that q = 0 or 1 is exact.
    prob = jnp.asarray([(cfg.q / 2) ** k * (1 - cfg.q) ** (n - k) for k in range(n + 1)], dtype)
    powers = jnp.asarray(3 ** np.arange(n), jnp.int32)
    chunk = 3 ** min(n, int(math.log(max(CHUNK_ROWS // L, 1), 3)))

    @jax.checkpoint
    def chunk_risk(k):
        digits = ((k * chunk + jnp.arange(chunk, dtype=jnp.int32))[:, None] // powers) % 3
        delta = jnp.where(digits == 1, 1.0, jnp.where(digits == 2, -1.0, 0.0)).astype(dtype)
        u = base[:, None, :] + jnp.einsum("bn,lnd->lbd", delta, M_other)  # (L, chunk, D)
        losses = heat.expected_loss_dense(u, Q, t, cfg.activation).sum(0)
        return (prob[(digits > 0).sum(-1)] * losses).sum()

    return jax.lax.map(chunk_risk, jnp.arange(3**n // chunk)).sum() / L


def _three_value_deviation_host(A, sets) -> tuple[float, float]:
    """(deviation, tolerance) of `is_three_valued`, in numpy for concrete A (no op-by-op dispatch)."""
    A = np.asarray(A)
    sets = np.asarray(sets)
    ell = np.empty(A.shape[0], np.int64)
    ell[sets.reshape(-1)] = np.repeat(np.arange(len(sets)), sets.shape[1])
    same = ell[:, None] == ell[None, :]
    eye = np.eye(A.shape[0], dtype=bool)
    within, across = same & ~eye, ~same
    rho = A[across].mean()
    fit = np.where(eye, A[eye].mean(), np.where(within, A[within].mean() if within.any() else rho, rho))
    tol = 64 * np.finfo(np.result_type(A.dtype, np.float32)).eps * (1 + np.abs(A).max())
    return float(np.abs(A - fit).max()), float(tol)


def choose_method(params, cfg: TheoryConfig, task: Task) -> str:
    """The path for concrete params: "three_value" if A is, else "general" if it fits, else ConfigError."""
    check_config(cfg)
    dev, tol = _three_value_deviation_host(params["A"], task.sets)
    if dev <= tol:
        return "three_value"
    if general_pattern_count(cfg) <= MAX_GENERAL_PATTERNS:
        return "general"
    raise ConfigError(
        f"exact population risk: A is not three-valued (an entry is {dev:.3g} from the three-value "
        f"form) and the general enumeration at D={cfg.D}, C={cfg.C} needs L*3^(D-C) = "
        f"{general_pattern_count(cfg):.3g} patterns (limit {MAX_GENERAL_PATTERNS}); use a three-value A "
        f"(constant diagonal, within-set and across-set entries, e.g. A = a0 I; the multiset path covers "
        f"D={cfg.D} with {n_multisets(cfg.C, cfg.L)} multisets), a smaller D - C, or "
        f"risk='population_mc'")


def _traced_risk(params, cfg: TheoryConfig, task: Task, method: str | None) -> jax.Array:
    A, v = params["A"], params["v"]
    alpha, t = value_statistics(v, task.w_star.astype(v.dtype), cfg)
    a, gamma, rho, _ = three_value_form(A, task.sets)
    sym = lambda: three_value_risk(alpha, t, a, gamma, rho, cfg)
    gen = lambda: general_risk(A, alpha, t, cfg, task)
    if method == "three_value":
        return sym()
    if method == "general":
        return gen()
    ok = is_three_valued(A, task.sets)
    if general_pattern_count(cfg) <= MAX_GENERAL_PATTERNS:
        return jax.lax.cond(ok, sym, gen)
    return sym() * jnp.where(ok, 1.0, jnp.nan)  # traced A that only the general path could take


_jitted_risk = jax.jit(_traced_risk, static_argnames=("cfg", "method"))


def population_risk(params, cfg: TheoryConfig, task: Task, method: str | None = None) -> jax.Array:
    """The population risk (P) of Eq. (T): E over the data distribution of log(1 + exp(-y F(X))).

    Exact over the signal set and the features; second order in ||v_perp||^2 for the noise (module
    docstring). Differentiable with `jax.grad` in params = {"A": (D, D), "v": (d,)}; the dtype follows
    params (enable float64 with `jax.enable_x64` for tests). `method` forces a path ("three_value" reads
    A through its three means, "general" enumerates); None chooses as the module docstring says: on the
    values when params are concrete (then the call is jitted), with traced checks under a trace.
    """
    check_config(cfg)
    if method is not None and method not in METHODS:
        raise ConfigError(f"method={method!r}: choose one of {METHODS} or None")
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((params, task))):
        return _traced_risk(params, cfg, task, method)
    return _jitted_risk(params, cfg, task, method or choose_method(params, cfg, task))


@functools.partial(jax.jit, static_argnames=("cfg", "method"))
def _value_and_grad(params, task, cfg, method):
    return jax.value_and_grad(population_risk)(params, cfg, task, method)


def population_grad(params, cfg: TheoryConfig, task: Task, method: str | None = None):
    """(risk, grads) of (P), jitted per path; the path is chosen on the concrete params if not given.

    The gradient is the full one (A's diagonal included); `posattn.theory.gd.gd_update` freezes it.
    """
    if method is None:
        method = choose_method(params, cfg, task)
    return _value_and_grad(params, task, cfg, method)
