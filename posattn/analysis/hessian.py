"""Hessian max-eigenvalue spectra, PK22 Figure 2 (and Figure 3, right).

For each mini-batch of 16 augmented training images, the k = 5 eigenvalues of *largest magnitude* of
the Hessian of the training objective (NLL plus L2 on mixed-up images, `posattn.analysis.objective`)
with respect to all parameters, found by power iteration with deflation on Hessian-vector products
(PK22 Section 2: tolerance 1e-3, at most 100 iterations per eigenvalue). Largest magnitude, not
algebraically largest: power iteration converges to the eigenvalue of largest |lambda|, which is how
negative eigenvalues reach the spectrum at all. The values of many mini-batches are pooled into one
density; its summaries are NEP (share of negative values) and APE (mean of the positive ones), each with
a bootstrap interval over the mini-batches (`summaries`).

The Hessian is never formed: `hvp` is forward-over-reverse differentiation (`jax.jvp` of `jax.grad`),
one HVP costing about two gradient evaluations. Every function is pure and runs under `jax.jit`; the
number of mini-batches and their shapes fix one compiled program, reused for every batch.
"""
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from posattn.analysis import bootstrap

LossFn = Callable[[Any, Any], jax.Array]  # (params, batch) -> scalar

TOP_K = 5  # PK22 Figure 2
TOLERANCE = 1e-3  # PK22: relative change of the eigenvalue estimate between iterations
MAX_ITERATIONS = 100


def hvp(loss_fn: LossFn, params, batch, v):
    """H v, with H the Hessian of `loss_fn(., batch)` at `params`; `v` has the structure of `params`."""
    grad_fn = lambda p: jax.grad(loss_fn)(p, batch)  # noqa: E731
    return jax.jvp(grad_fn, (params,), (v,))[1]


def power_iteration(
    matvec: Callable[[jax.Array], jax.Array],
    v0_P: jax.Array,
    *,
    k: int = TOP_K,
    max_iterations: int = MAX_ITERATIONS,
    tolerance: float = TOLERANCE,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The k eigenvalues of largest magnitude of a symmetric operator, by power iteration with deflation.

    `matvec` maps a vector of shape (P,) to the operator applied to it. Eigenvector i is sought in the
    orthogonal complement of eigenvectors 0..i-1 (the start vector and every iterate are projected out
    of them, Gram-Schmidt, as PyHessian does), so the i-th run converges to the i-th largest |lambda|.
    A run stops when |lambda_t - lambda_{t-1}| <= tolerance * |lambda_{t-1}| or after `max_iterations`.

    Returns (eigenvalues_k in the order found, eigenvectors_kxP, iterations_k used by each run).
    """
    v0_P = v0_P.astype(jnp.float32)
    P = v0_P.shape[0]
    tiny = jnp.finfo(jnp.float32).tiny

    def project_out(v_P, U_kxP):
        # the rows of U not yet found are zero, so projecting on them does nothing
        return v_P - U_kxP.T @ (U_kxP @ v_P)

    def normalise(v_P):
        return v_P / jnp.maximum(jnp.linalg.norm(v_P), tiny)

    def one_eigenpair(U_kxP, v_P):
        v_P = normalise(project_out(v_P, U_kxP))

        def body(carry):
            v_P, lam, _, it = carry
            Hv_P = project_out(matvec(v_P), U_kxP)
            new_lam = jnp.vdot(v_P, Hv_P)  # Rayleigh quotient of the unit vector v
            return normalise(Hv_P), new_lam, lam, it + 1

        def not_converged(carry):
            _, lam, old_lam, it = carry
            moved = jnp.abs(lam - old_lam) > tolerance * jnp.abs(old_lam)
            return (it < max_iterations) & ((it < 2) | moved)

        init = (v_P, jnp.float32(0.0), jnp.float32(0.0), jnp.int32(0))
        v_P, lam, _, it = jax.lax.while_loop(not_converged, body, init)
        return lam, v_P, it

    def next_pair(i, carry):
        # a loop, not k unrolled copies: the HVP appears once in the compiled program
        U_kxP, lams_k, iters_k = carry
        lam, u_P, it = one_eigenpair(U_kxP, jnp.roll(v0_P, i))
        return U_kxP.at[i].set(u_P), lams_k.at[i].set(lam), iters_k.at[i].set(it)

    init = (jnp.zeros((k, P), jnp.float32), jnp.zeros((k,), jnp.float32), jnp.zeros((k,), jnp.int32))
    U_kxP, lams_k, iters_k = jax.lax.fori_loop(0, k, next_pair, init)
    return lams_k, U_kxP, iters_k


def top_eigenvalues(
    loss_fn: LossFn,
    params,
    batch,
    key: jax.Array,
    *,
    k: int = TOP_K,
    max_iterations: int = MAX_ITERATIONS,
    tolerance: float = TOLERANCE,
) -> tuple[jax.Array, jax.Array]:
    """(eigenvalues_k, iterations_k): the k largest-magnitude Hessian eigenvalues of one mini-batch.

    The start vector is Gaussian (drawn from `key`); the parameters are flattened into one vector of P
    entries so the deflation works on plain vectors.
    """
    flat_P, unravel = ravel_pytree(params)
    flat_P = flat_P.astype(jnp.float32)

    def matvec(v_P):
        Hv = hvp(loss_fn, params, batch, unravel(v_P.astype(flat_P.dtype)))
        return ravel_pytree(Hv)[0].astype(jnp.float32)

    v0_P = jax.random.normal(key, flat_P.shape, jnp.float32)
    lams, _, iters = power_iteration(matvec, v0_P, k=k, max_iterations=max_iterations, tolerance=tolerance)
    return lams, iters


def spectrum(
    loss_fn: LossFn,
    params,
    batches,
    key: jax.Array,
    *,
    k: int = TOP_K,
    max_iterations: int = MAX_ITERATIONS,
    tolerance: float = TOLERANCE,
) -> tuple[jax.Array, jax.Array]:
    """Top-k eigenvalues of each of M mini-batches: (eigenvalues_Mxk, iterations_Mxk).

    `batches` is a pytree whose leaves carry a leading axis of M mini-batches; they are mapped one after
    another (`jax.lax.map`), since each power iteration already uses the whole machine.
    """
    M = jax.tree.leaves(batches)[0].shape[0]
    keys = jax.random.split(key, M)
    one = lambda xs: top_eigenvalues(  # noqa: E731
        loss_fn, params, xs[0], xs[1], k=k, max_iterations=max_iterations, tolerance=tolerance
    )
    return jax.lax.map(one, (batches, keys))


def nep(eigenvalues_Mxk) -> float:
    """NEP: the share of negative values in the pooled spectrum of the M mini-batches."""
    return float(np.mean(np.asarray(eigenvalues_Mxk) < 0))


def ape(eigenvalues_Mxk) -> float:
    """APE: the mean of the positive values of the pooled spectrum (NaN where none is)."""
    lams = np.asarray(eigenvalues_Mxk, np.float64)
    positive = lams[lams > 0]
    return float(positive.mean()) if positive.size else float("nan")


def summaries(eigenvalues_Mxk, *, resamples: int = bootstrap.RESAMPLES, seed: int = bootstrap.SEED) -> dict:
    """PK22's summaries of a pooled spectrum: NEP and APE, each with its 95% percentile interval
    ("nep_interval", "ape_interval": [lo, hi]) over resamples of the M mini-batches
    (`bootstrap.interval`; a mini-batch's k eigenvalues stay together, since they come from one
    Hessian), and the extremes."""
    lams_Mxk = np.asarray(eigenvalues_Mxk, np.float64)
    lams_Mxk = lams_Mxk.reshape(lams_Mxk.shape[0], -1)
    out = {"max": float(lams_Mxk.max()), "min": float(lams_Mxk.min()), "count": int(lams_Mxk.size),
           "batches": int(lams_Mxk.shape[0])}
    for name, statistic in (("nep", nep), ("ape", ape)):
        est = bootstrap.estimate(lams_Mxk, statistic, resamples=resamples, seed=seed)
        out[name], out[f"{name}_interval"] = est["value"], [est["lo"], est["hi"]]
    return out
