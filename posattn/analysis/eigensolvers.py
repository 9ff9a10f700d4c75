"""The k eigenpairs of largest magnitude of a symmetric operator given only by its products v -> A v:
PK22's power iteration with deflation (`power_iteration`, and its jittable step `power_step`), and ARPACK's
implicitly restarted Lanczos method (`lanczos`, from the host), both returning `Eigenpairs` with each
eigenvalue's convergence. `posattn.analysis.hessian` runs them on Hessian-vector products.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

from posattn.errors import ConfigError

TOP_K = 5  # PK22 Figure 2
TOLERANCE = 1e-3  # PK22: relative change of the eigenvalue estimate between iterations
MAX_ITERATIONS = 100
# A converged eigenpair also has ||H v - lambda v|| / |lambda| at most this: for a unit v some eigenvalue
# of H lies within ||H v - lambda v|| of lambda, so within 10% of it. PK22's stopping rule alone can
# stall: with eigenvalues near +a and -a, v swings between them and lambda stays put (QUICK's positional
# ViT, measured: a run stopped by the rule at -2.0 with residual 2.9, beside eigenvalues near +-5)
RESIDUAL_TOLERANCE = 0.1


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Eigenpairs:
    """The k eigenvalues of largest magnitude that power iteration or Lanczos found, in descending order
    of magnitude (the order a converged deflation finds them), each with its convergence; leading axes
    (e.g. M mini-batches) before k. A pytree: `jax.jit` and `jax.lax.map` return it.

    `iterations`: the operator products its run used (Lanczos: those of the whole run, the same for its
    k eigenpairs); `residuals`: ||A v - lambda v|| / |lambda| of the eigenpair (power: A the operator
    deflated by the eigenvectors found before it), 0 for an exact one; `converged`: whether its run met
    the tolerance before its cap (power: relative change of lambda between two iterations; Lanczos:
    ARPACK's), with a residual of at most `RESIDUAL_TOLERANCE`. A power eigenvalue whose run hit the cap
    is an estimate of unknown error: a deflation run that stopped early may even be smaller than the
    next one; a Lanczos eigenvalue that did not converge is NaN (ARPACK returns none), last. `vectors`
    (..., k, P): the unit eigenvectors (None where not kept: `top_eigenvalues`, `spectrum`).
    """

    values: Any
    iterations: Any
    residuals: Any
    converged: Any
    vectors: Any = None


def check_stopping(max_iterations: int, tolerance: float) -> None:
    """ConfigError unless max_iterations >= 2 and tolerance > 0: a run meets the tolerance after two
    iterations at the earliest, so a cap below 2 would leave every eigenvalue unconverged."""
    if (
        isinstance(max_iterations, bool)
        or int(max_iterations) != max_iterations
        or max_iterations < 2
        or not tolerance > 0
    ):
        raise ConfigError(
            f"max_iterations={max_iterations!r}, tolerance={tolerance!r}: give "
            "max_iterations >= 2 and tolerance > 0"
        )


def power_init(v0_P: jax.Array, k: int = TOP_K) -> dict:
    """The state of `power_step` before its first step: k eigenpairs to find from the start vector v0_P
    (P,). "i" counts the eigenpairs found; "v", "lam", "old_lam", "it" are those of the run under way;
    "residuals" and "converged" those of the runs ended (`Eigenpairs`). ConfigError unless 1 <= k <= P."""
    P = jnp.shape(v0_P)[0] if jnp.ndim(v0_P) == 1 else 0
    if isinstance(k, bool) or int(k) != k or not 1 <= k <= P:
        # k beyond P would deflate everything away and return eigenvalues of 0
        raise ConfigError(
            f"k={k!r} eigenvalues from a start vector of shape {jnp.shape(v0_P)}: give a "
            "vector (P,) and 1 <= k <= P"
        )
    v0_P = v0_P.astype(jnp.float32)
    U_kxP = jnp.zeros((k, v0_P.shape[0]), jnp.float32)
    return {
        "v0": v0_P,
        "U": U_kxP,
        "lams": jnp.zeros((k,), jnp.float32),
        "iters": jnp.zeros((k,), jnp.int32),
        "residuals": jnp.zeros((k,), jnp.float32),
        "converged": jnp.zeros((k,), bool),
        "i": jnp.int32(0),
        "v": _start(v0_P, U_kxP, 0),
        "lam": jnp.float32(0.0),
        "old_lam": jnp.float32(0.0),
        "it": jnp.int32(0),
    }


def eigenpairs(state: dict, *, with_vectors: bool = False) -> Eigenpairs:
    """The `Eigenpairs` of a finished `power_step` state (state["i"] == k), sorted by descending
    magnitude; jittable, and on the host for numpy states."""
    xp = np if isinstance(state["lams"], np.ndarray) else jnp
    order = xp.argsort(-xp.abs(state["lams"]), stable=True)
    return Eigenpairs(
        values=state["lams"][order],
        iterations=state["iters"][order],
        residuals=state["residuals"][order],
        converged=state["converged"][order],
        vectors=state["U"][order] if with_vectors else None,
    )


def _project_out(v_P, U_kxP):
    # the rows of U not yet found are zero, so projecting on them does nothing
    return v_P - U_kxP.T @ (U_kxP @ v_P)


def _normalise(v_P):
    return v_P / jnp.maximum(jnp.linalg.norm(v_P), jnp.finfo(jnp.float32).tiny)


def _start(v0_P, U_kxP, i):
    """Run i's start vector: v0 rolled by i (so no run starts where another ended), the eigenvectors
    found so far projected out."""
    return _normalise(_project_out(jnp.roll(v0_P, i), U_kxP))


def power_step(
    matvec: Callable[[jax.Array], jax.Array],
    state: dict,
    *,
    max_iterations: int = MAX_ITERATIONS,
    tolerance: float = TOLERANCE,
) -> dict:
    """One iteration (one `matvec`) of power iteration with deflation, from `power_init`'s state.

    Eigenvector i is sought in the orthogonal complement of eigenvectors 0..i-1 (every iterate is
    projected out of them, Gram-Schmidt, as PyHessian does), so the i-th run converges to the i-th
    largest |lambda|. A run ends when |lambda_t - lambda_{t-1}| <= tolerance * |lambda_{t-1}| (after at
    least two iterations) or after `max_iterations`; its eigenpair is then stored, with its iterations,
    residual and convergence (`Eigenpairs`; not converged either where an earlier run did not converge,
    since its vector deflated this run's operator), and run i + 1 starts.
    A state with state["i"] == k is done (a further step changes nothing stored).
    """
    Hv_P = _project_out(matvec(state["v"]), state["U"])
    lam = jnp.vdot(state["v"], Hv_P)  # Rayleigh quotient of the unit vector v
    v_P, it, old_lam = _normalise(Hv_P), state["it"] + 1, state["lam"]
    moved = jnp.abs(lam - old_lam) > tolerance * jnp.abs(old_lam)
    met = (it >= 2) & ~moved
    ended = (state["i"] < state["U"].shape[0]) & (met | (it >= max_iterations))

    def end_run(
        _,
    ):  # store the eigenpair, start run i + 1 (only here: the start costs two k x P products)
        i = state["i"]
        U_kxP = state["U"].at[i].set(v_P)
        # the residual of (lam, v): v, not v_P, is the vector whose Rayleigh quotient lam is
        tiny = jnp.finfo(jnp.float32).tiny
        residual = jnp.linalg.norm(Hv_P - lam * state["v"]) / jnp.maximum(jnp.abs(lam), tiny)
        # a run deflated by a vector of an unconverged run (no eigenvector) finds an eigenvalue of another
        # operator, however small its residual there: unknown, not converged
        earlier_converged = jnp.all(
            state["converged"] | (jnp.arange(state["converged"].shape[0]) >= i)
        )
        converged = met & (residual <= RESIDUAL_TOLERANCE) & earlier_converged
        return {
            **state,
            "U": U_kxP,
            "lams": state["lams"].at[i].set(lam),
            "iters": state["iters"].at[i].set(it),
            "residuals": state["residuals"].at[i].set(residual),
            "converged": state["converged"].at[i].set(converged),
            "i": i + 1,
            "v": _start(state["v0"], U_kxP, i + 1),
            "lam": jnp.zeros_like(lam),
            "old_lam": jnp.zeros_like(lam),
            "it": jnp.zeros_like(it),
        }

    def go_on(_):
        return {**state, "v": v_P, "lam": lam, "old_lam": old_lam, "it": it}

    return jax.lax.cond(ended, end_run, go_on, None)


def power_iteration(
    matvec: Callable[[jax.Array], jax.Array],
    v0_P: jax.Array,
    *,
    k: int = TOP_K,
    max_iterations: int = MAX_ITERATIONS,
    tolerance: float = TOLERANCE,
) -> Eigenpairs:
    """The k eigenvalues of largest magnitude of a symmetric operator, by power iteration with deflation
    (`power_step` until k runs have ended, in one `lax.while_loop`).

    `matvec` maps a vector of shape (P,) to the operator applied to it. Returns the `Eigenpairs` with
    their eigenvectors (k, P), in descending order of magnitude, each with its iterations, residual and
    whether it converged.
    """
    step = lambda s: power_step(matvec, s, max_iterations=max_iterations, tolerance=tolerance)  # noqa: E731
    check_stopping(max_iterations, tolerance)
    state = jax.lax.while_loop(lambda s: s["i"] < k, step, power_init(v0_P, k))
    return eigenpairs(state, with_vectors=True)


def lanczos(
    matvec: Callable[[jax.Array], jax.Array],
    v0_P,
    *,
    k: int = TOP_K,
    max_iterations: int = MAX_ITERATIONS,
    tolerance: float = TOLERANCE,
) -> Eigenpairs:
    """The k eigenvalues of largest magnitude of a symmetric operator by the implicitly restarted Lanczos
    method (ARPACK: `scipy.sparse.linalg.eigsh`, which="LM", in float64 on the host), from the start
    vector v0_P (P,). Not jittable: `matvec` (a vector (P,) in float32 -> the operator applied to it, e.g.
    a jitted `hvp_matvec`) is called from Python once per product.

    ARPACK stops when each of the k Ritz pairs has ||A v - lambda v|| <= tolerance * |lambda| (its own
    estimate) or after at most k * max_iterations products, power iteration's cap for k eigenvalues
    (k + 3 where that is more: ARPACK's least, for k <= 2 and a cap of 2). The residual of each
    eigenpair is then measured with one more product each (float32 products, not ARPACK's estimate);
    `converged` as in `Eigenpairs`. Returns the `Eigenpairs` (numpy) with their
    eigenvectors (k, P), in descending order of magnitude; `iterations` counts every product, the k of
    the residuals included. ConfigError unless 1 <= k < P (ARPACK's bound), max_iterations >= 2 and
    tolerance > 0.
    """
    check_stopping(max_iterations, tolerance)
    v0_P = np.asarray(v0_P, np.float64)
    P = v0_P.shape[0] if v0_P.ndim == 1 else 0
    if isinstance(k, bool) or int(k) != k or not 1 <= k < P:
        raise ConfigError(
            f"k={k!r} eigenvalues from a start vector of shape {v0_P.shape}: give a vector "
            "(P,) and 1 <= k < P for method 'lanczos' (ARPACK), or method 'power' for k = P"
        )
    products = 0

    def apply(x):
        nonlocal products
        products += 1
        return np.asarray(matvec(jnp.asarray(x.reshape(-1), jnp.float32)), np.float64).reshape(
            x.shape
        )

    budget = k * max_iterations
    # ARPACK's products (counted): 1 + ncv for its first basis of ncv Lanczos vectors, then at most
    # ncv - k per restart. ncv: scipy's default, fewer where the budget holds less than two bases
    ncv = min(P, max(2 * k + 1, 20), max(k + 1, (budget - 1 + k) // 2))
    restarts = max(1, (budget - 1 - ncv) // (ncv - k))
    operator = LinearOperator((P, P), matvec=apply, dtype=np.float64)
    try:
        lams, V_Pxn = eigsh(
            operator, k=k, which="LM", v0=v0_P, ncv=ncv, maxiter=restarts, tol=tolerance
        )
    except (
        ArpackNoConvergence
    ) as stopped:  # it returns the pairs that did converge, none for the others
        lams, V_Pxn = stopped.eigenvalues.real, stopped.eigenvectors.real
    residuals = [
        np.linalg.norm(apply(v) - lam * v) / max(abs(lam), np.finfo(np.float32).tiny)
        for lam, v in zip(lams, V_Pxn.T)
    ]
    missing = k - len(lams)
    values = np.concatenate([lams, np.full(missing, np.nan)])
    residuals = np.concatenate([residuals, np.full(missing, np.inf)])
    vectors_kxP = np.concatenate([V_Pxn.T, np.full((missing, P), np.nan)])
    order = np.argsort(-np.nan_to_num(np.abs(values), nan=-1.0), kind="stable")  # NaN last
    converged = (
        residuals <= RESIDUAL_TOLERANCE
    )  # ARPACK's own test passed for every pair it returned
    return Eigenpairs(
        values=values[order].astype(np.float32),
        iterations=np.full(k, products, np.int32),
        residuals=residuals[order].astype(np.float32),
        converged=converged[order],
        vectors=vectors_kxP[order].astype(np.float32),
    )
