"""Hessian max-eigenvalue spectra, PK22 Figure 2 (and Figure 3, right).

For each mini-batch of 16 augmented training images, the k = 5 eigenvalues of *largest magnitude* of
the Hessian of the training objective (NLL plus L2 on mixed-up images, `posattn.analysis.objective`)
with respect to all parameters, found from Hessian-vector products by one of two `METHODS`
(`posattn.analysis.eigensolvers`): "power",
PK22's power iteration with deflation (PK22 Section 2: tolerance 1e-3, at most 100 iterations per
eigenvalue), or "lanczos", ARPACK's implicitly restarted Lanczos method (`lanczos`), which converges
where power iteration stalls between eigenvalues near +a and -a (docs/decisions.md, Analysis tools).
Largest magnitude, not algebraically largest: power iteration converges to the eigenvalue of largest
|lambda|, which is how negative eigenvalues reach the spectrum at all. The values of many mini-batches
are pooled into one density; its summaries are NEP (share of negative values) and APE (mean of the
positive ones), each with a bootstrap interval over the mini-batches (`summaries`). Every eigenvalue
comes with its iterations, residual and whether it converged (`Eigenpairs`), and the summaries count
those that did not.

The Hessian is never formed: `hvp` is forward-over-reverse differentiation (`jax.jvp` of `jax.grad`),
one HVP costing about two gradient evaluations. With method "power", every function but
`spectrum_on_host` and `host_loop_is_faster` is pure and runs under `jax.jit`: `spectrum` is one
program for all mini-batches; `spectrum_on_host` drives the same `power_step` from Python, one compiled
HVP step for every batch, which XLA runs faster on a CPU for convolutional models. Method "lanczos"
always runs from the host (ARPACK calls a jitted HVP) and is refused under `jax.jit`.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from posattn.analysis import bootstrap
from posattn.analysis.eigensolvers import (
    MAX_ITERATIONS,
    TOLERANCE,
    TOP_K,
    Eigenpairs,
    check_stopping,
    eigenpairs,
    lanczos,
    power_init,
    power_iteration,
    power_step,
)
from posattn.errors import ConfigError, check_choice

LossFn = Callable[[Any, Any], jax.Array]  # (params, batch) -> scalar

METHODS = ("power", "lanczos")


def hvp(loss_fn: LossFn, params, batch, v):
    """H v, with H the Hessian of `loss_fn(., batch)` at `params`; `v` has the structure of `params`."""
    grad_fn = lambda p: jax.grad(loss_fn)(p, batch)  # noqa: E731
    return jax.jvp(grad_fn, (params,), (v,))[1]


def hvp_matvec(loss_fn: LossFn, params, batch) -> Callable[[jax.Array], jax.Array]:
    """v_P -> H v_P on flat vectors of P entries (float32), H the Hessian of `loss_fn(., batch)` at
    `params`: the parameters flattened into one vector, so the deflation works on plain vectors."""
    flat_P, unravel = ravel_pytree(params)

    def matvec(v_P):
        Hv = hvp(loss_fn, params, batch, unravel(v_P.astype(flat_P.dtype)))
        return ravel_pytree(Hv)[0].astype(jnp.float32)

    return matvec


def start_vector(key: jax.Array, params) -> jax.Array:
    """The Gaussian start vector (P,) of one mini-batch's power iteration."""
    return jax.random.normal(key, ravel_pytree(params)[0].shape, jnp.float32)


def _lanczos_from_host(method: str, params) -> bool:
    """Whether `method` (one of `METHODS`, else ConfigError) is "lanczos"; ConfigError for "lanczos"
    under `jax.jit` (traced `params`), since ARPACK runs on the host."""
    check_choice(method, METHODS, "method")
    if method == "lanczos" and any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(params)):
        raise ConfigError(
            "method='lanczos' runs ARPACK on the host: call it outside jax.jit, or give "
            "method='power' (PK22's power iteration, jittable)"
        )
    return method == "lanczos"


def top_eigenvalues(
    loss_fn: LossFn,
    params,
    batch,
    key: jax.Array,
    *,
    k: int = TOP_K,
    max_iterations: int = MAX_ITERATIONS,
    tolerance: float = TOLERANCE,
    method: str = "power",
) -> Eigenpairs:
    """The k largest-magnitude Hessian eigenvalues of one mini-batch (`Eigenpairs` without vectors:
    values_k, iterations_k, residuals_k, converged_k), from the start vector drawn from `key`, by
    `method` ("power": `power_iteration`, jittable; "lanczos": `lanczos`, from the host)."""
    if _lanczos_from_host(method, params):
        hvp_P = jax.jit(spectrum_step(loss_fn, method="lanczos"))
        pairs = lanczos(
            lambda v_P: hvp_P(params, batch, v_P),
            start_vector(key, params),
            k=k,
            max_iterations=max_iterations,
            tolerance=tolerance,
        )
    else:
        pairs = power_iteration(
            hvp_matvec(loss_fn, params, batch),
            start_vector(key, params),
            k=k,
            max_iterations=max_iterations,
            tolerance=tolerance,
        )
    return dataclasses.replace(pairs, vectors=None)


def spectrum(
    loss_fn: LossFn,
    params,
    batches,
    key: jax.Array,
    *,
    k: int = TOP_K,
    max_iterations: int = MAX_ITERATIONS,
    tolerance: float = TOLERANCE,
    method: str = "power",
) -> Eigenpairs:
    """Top-k eigenvalues of each of M mini-batches: `Eigenpairs` of fields (M, k).

    `batches` is a pytree whose leaves carry a leading axis of M mini-batches. Method "power": one
    program, the mini-batches mapped one after another (`jax.lax.map`), since each power iteration
    already uses the whole machine; on a CPU, `spectrum_on_host` gives the same values faster for
    convolutional models. Method "lanczos": `spectrum_on_host` with a jitted HVP (not under `jax.jit`).
    """
    if _lanczos_from_host(method, params):
        hvp_P = jax.jit(spectrum_step(loss_fn, method="lanczos"))
        return spectrum_on_host(
            lambda b, v_P: hvp_P(params, b, v_P),
            params,
            batches,
            key,
            k=k,
            method="lanczos",
            max_iterations=max_iterations,
            tolerance=tolerance,
        )
    M = jax.tree.leaves(batches)[0].shape[0]
    keys = jax.random.split(key, M)
    one = lambda xs: top_eigenvalues(  # noqa: E731
        loss_fn, params, xs[0], xs[1], k=k, max_iterations=max_iterations, tolerance=tolerance
    )
    return jax.lax.map(one, (batches, keys))


def spectrum_step(
    loss_fn: LossFn,
    *,
    max_iterations: int | None = None,
    tolerance: float | None = None,
    method: str = "power",
):
    """The program that `spectrum_on_host` calls once per Hessian-vector product (jit it; for "power",
    donating the state), for the Hessian of `loss_fn(., batch)` at `params`: for method "power",
    (params, batch, state) -> state, one `power_step` (cap and tolerance: `max_iterations`, `tolerance`,
    default PK22's); for "lanczos", (params, batch, v_P) -> H v_P (`hvp_matvec`; its cap and tolerance
    are `spectrum_on_host`'s, and ConfigError where given here)."""
    if check_choice(method, METHODS, "method") == "lanczos":
        if (max_iterations, tolerance) != (None, None):
            raise ConfigError(
                f"max_iterations={max_iterations!r}, tolerance={tolerance!r} with method="
                "'lanczos': give them to spectrum_on_host (this step is the bare "
                "Hessian-vector product)"
            )
        return lambda params, batch, v_P: hvp_matvec(loss_fn, params, batch)(v_P)
    max_iterations = MAX_ITERATIONS if max_iterations is None else max_iterations
    tolerance = TOLERANCE if tolerance is None else tolerance
    check_stopping(max_iterations, tolerance)

    def step(params, batch, state):
        return power_step(
            hvp_matvec(loss_fn, params, batch),
            state,
            max_iterations=max_iterations,
            tolerance=tolerance,
        )

    return step


def _overlapping_convolution(jaxpr) -> bool:
    """Whether a jaxpr (or one nested in it) holds a convolution whose kernel is wider than its stride."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "conv_general_dilated":
            spatial = eqn.params["dimension_numbers"].rhs_spec[2:]
            kernel = [eqn.invars[1].aval.shape[d] for d in spatial]
            if any(k > s for k, s in zip(kernel, eqn.params["window_strides"])):
                return True
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns") and _overlapping_convolution(inner):
                    return True
    return False


def host_loop_is_faster(loss_fn: LossFn, params, batch) -> bool:
    """Whether `spectrum_on_host` beats `spectrum` here: on a CPU, for a loss with overlapping
    convolutions (a kernel wider than its stride: a ResNet's, not a ViT's patch embedding).

    Measured on the digits models, 16 images per mini-batch (docs/how_vits_work.md, Time): ResNet 446 ms
    per HVP inside the program's while loop against 123 ms from the host; AlterNet 321 against 72; but
    the positional ViT 47 against 70 (presumably since XLA hoists the parts of the HVP that do not depend
    on the vector out of the loop). In XLA's dump of a two-convolution HVP inside a loop, the
    weight-gradient convolutions keep their non-canonical layouts. Elsewhere than on a CPU: not
    measured, the one program."""
    if jax.default_backend() != "cpu":
        return False
    return _overlapping_convolution(jax.make_jaxpr(loss_fn)(params, batch).jaxpr)


def spectrum_on_host(
    step,
    params,
    batches,
    key: jax.Array,
    *,
    k: int = TOP_K,
    method: str = "power",
    max_iterations: int | None = None,
    tolerance: float | None = None,
) -> Eigenpairs:
    """`spectrum`'s `Eigenpairs` (numpy fields (M, k)), the same start vectors, with the loops on the host:
    `step(batch, x)`, a jitted `spectrum_step` of the same `method` at `params` (e.g.
    `lambda b, x: jitted(params, b, x)`), is called once per Hessian-vector product.

    "power": x is the `power_init` state, stepped until each mini-batch's k runs have ended (the same
    arithmetic as `spectrum`; the cap and tolerance are the step's, ConfigError where given here). Why:
    a host loop costs one synchronisation per product, and where `host_loop_is_faster` XLA runs the
    product several times slower inside a while loop than as a program of its own. "lanczos": x is a
    vector (P,) and `lanczos` drives it (`max_iterations`, `tolerance`: default PK22's).
    """
    M = jax.tree.leaves(batches)[0].shape[0]
    keys = jax.random.split(key, M)
    if check_choice(method, METHODS, "method") == "power" and (max_iterations, tolerance) != (
        None,
        None,
    ):
        raise ConfigError(
            f"max_iterations={max_iterations!r}, tolerance={tolerance!r} with method='power': "
            "give them to spectrum_step, whose step applies them"
        )
    found = []
    for m in range(M):
        batch = jax.tree.map(lambda a: a[m], batches)
        if method == "lanczos":
            pairs = lanczos(
                lambda v_P: step(batch, v_P),
                start_vector(keys[m], params),
                k=k,
                max_iterations=MAX_ITERATIONS if max_iterations is None else max_iterations,
                tolerance=TOLERANCE if tolerance is None else tolerance,
            )
            found.append(dataclasses.replace(pairs, vectors=None))
            continue
        state = power_init(start_vector(keys[m], params), k)
        while int(state["i"]) < k:
            state = step(batch, state)
        found.append(
            eigenpairs(
                {
                    name: np.asarray(state[name])
                    for name in ("lams", "iters", "residuals", "converged")
                }
            )
        )
    return jax.tree.map(lambda *a: np.stack(a), *found)


def nep(eigenvalues_Mxk) -> float:
    """NEP: the share of negative values in the pooled spectrum of the M mini-batches."""
    return float(np.mean(np.asarray(eigenvalues_Mxk) < 0))


def ape(eigenvalues_Mxk) -> float:
    """APE: the mean of the positive values of the pooled spectrum (NaN where none is)."""
    lams = np.asarray(eigenvalues_Mxk, np.float64)
    positive = lams[lams > 0]
    return float(positive.mean()) if positive.size else float("nan")


def summaries(
    eigenvalues_Mxk, *, resamples: int = bootstrap.RESAMPLES, seed: int = bootstrap.SEED
) -> dict:
    """PK22's summaries of a pooled spectrum: NEP and APE, each with its 95% percentile interval
    ("nep_interval", "ape_interval": [lo, hi]) over resamples of the M mini-batches
    (`bootstrap.interval`; a mini-batch's k eigenvalues stay together, since they come from one
    Hessian), and the extremes. `eigenvalues_Mxk`: the `Eigenpairs` of `spectrum` (then "not_converged"
    counts the eigenvalues that did not converge, `Eigenpairs.converged`: NEP and APE of such values are
    not PK22's), or their values alone ("not_converged": None, unknown). ConfigError for fewer than 2
    mini-batches (no interval), a non-finite eigenvalue, or a Lanczos eigenvalue without a value (NaN:
    not converged within the cap)."""
    not_converged = None
    if isinstance(eigenvalues_Mxk, Eigenpairs):
        not_converged = int(np.sum(~np.asarray(eigenvalues_Mxk.converged, bool)))
        if np.isnan(
            np.asarray(eigenvalues_Mxk.values, np.float64)
        ).any():  # Lanczos found no value there
            raise ConfigError(
                f"{not_converged} eigenvalues did not converge within the cap and have no "
                "value (NaN, method 'lanczos'): raise max_iterations (the suite's "
                "hessian_iterations)"
            )
        eigenvalues_Mxk = eigenvalues_Mxk.values
    lams_Mxk = np.asarray(eigenvalues_Mxk, np.float64)
    if lams_Mxk.ndim != 2 or lams_Mxk.shape[0] < 2:
        raise ConfigError(
            f"eigenvalues of shape {lams_Mxk.shape}: give (M, k), M >= 2 mini-batches (one per "
            "row), so that the intervals have units to resample"
        )
    if not np.isfinite(lams_Mxk).all():
        raise ConfigError(
            "the eigenvalues hold NaN or inf: the loss or its Hessian is not finite at these "
            "parameters; check the loss on this batch"
        )
    out = {
        "max": float(lams_Mxk.max()),
        "min": float(lams_Mxk.min()),
        "count": int(lams_Mxk.size),
        "batches": int(lams_Mxk.shape[0]),
        "not_converged": not_converged,
    }
    for name, statistic in (("nep", nep), ("ape", ape)):
        est = bootstrap.estimate(lams_Mxk, statistic, resamples=resamples, seed=seed)
        out[name], out[f"{name}_interval"] = est["value"], [est["lo"], est["hi"]]
    return out
