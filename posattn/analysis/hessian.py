"""Hessian max-eigenvalue spectra, PK22 Figure 2 (and Figure 3, right).

For each mini-batch of 16 augmented training images, the k = 5 eigenvalues of *largest magnitude* of
the Hessian of the training objective (NLL plus L2 on mixed-up images, `posattn.analysis.objective`)
with respect to all parameters, found from Hessian-vector products by one of two `METHODS`: "power",
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
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

from posattn.analysis import bootstrap
from posattn.errors import ConfigError, check_choice

LossFn = Callable[[Any, Any], jax.Array]  # (params, batch) -> scalar

TOP_K = 5  # PK22 Figure 2
TOLERANCE = 1e-3  # PK22: relative change of the eigenvalue estimate between iterations
MAX_ITERATIONS = 100
# A converged eigenpair also has ||H v - lambda v|| / |lambda| at most this: for a unit v some eigenvalue
# of H lies within ||H v - lambda v|| of lambda, so within 10% of it. PK22's stopping rule alone can
# stall: with eigenvalues near +a and -a, v swings between them and lambda stays put (QUICK's positional
# ViT, measured: a run stopped by the rule at -2.0 with residual 2.9, beside eigenvalues near +-5)
RESIDUAL_TOLERANCE = 0.1
METHODS = ("power", "lanczos")


def hvp(loss_fn: LossFn, params, batch, v):
    """H v, with H the Hessian of `loss_fn(., batch)` at `params`; `v` has the structure of `params`."""
    grad_fn = lambda p: jax.grad(loss_fn)(p, batch)  # noqa: E731
    return jax.jvp(grad_fn, (params,), (v,))[1]


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


def _check_stopping(max_iterations: int, tolerance: float) -> None:
    """ConfigError unless max_iterations >= 2 and tolerance > 0: a run meets the tolerance after two
    iterations at the earliest, so a cap below 2 would leave every eigenvalue unconverged."""
    if isinstance(max_iterations, bool) or int(max_iterations) != max_iterations or max_iterations < 2 or \
            not tolerance > 0:
        raise ConfigError(f"max_iterations={max_iterations!r}, tolerance={tolerance!r}: give "
                          "max_iterations >= 2 and tolerance > 0")


def power_init(v0_P: jax.Array, k: int = TOP_K) -> dict:
    """The state of `power_step` before its first step: k eigenpairs to find from the start vector v0_P
    (P,). "i" counts the eigenpairs found; "v", "lam", "old_lam", "it" are those of the run under way;
    "residuals" and "converged" those of the runs ended (`Eigenpairs`). ConfigError unless 1 <= k <= P."""
    P = jnp.shape(v0_P)[0] if jnp.ndim(v0_P) == 1 else 0
    if isinstance(k, bool) or int(k) != k or not 1 <= k <= P:
        # k beyond P would deflate everything away and return eigenvalues of 0
        raise ConfigError(f"k={k!r} eigenvalues from a start vector of shape {jnp.shape(v0_P)}: give a "
                          "vector (P,) and 1 <= k <= P")
    v0_P = v0_P.astype(jnp.float32)
    U_kxP = jnp.zeros((k, v0_P.shape[0]), jnp.float32)
    return {"v0": v0_P, "U": U_kxP, "lams": jnp.zeros((k,), jnp.float32), "iters": jnp.zeros((k,), jnp.int32),
            "residuals": jnp.zeros((k,), jnp.float32), "converged": jnp.zeros((k,), bool),
            "i": jnp.int32(0), "v": _start(v0_P, U_kxP, 0), "lam": jnp.float32(0.0),
            "old_lam": jnp.float32(0.0), "it": jnp.int32(0)}


def eigenpairs(state: dict, *, with_vectors: bool = False) -> Eigenpairs:
    """The `Eigenpairs` of a finished `power_step` state (state["i"] == k), sorted by descending
    magnitude; jittable, and on the host for numpy states."""
    xp = np if isinstance(state["lams"], np.ndarray) else jnp
    order = xp.argsort(-xp.abs(state["lams"]), stable=True)
    return Eigenpairs(values=state["lams"][order], iterations=state["iters"][order],
                      residuals=state["residuals"][order], converged=state["converged"][order],
                      vectors=state["U"][order] if with_vectors else None)


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

    def end_run(_):  # store the eigenpair, start run i + 1 (only here: the start costs two k x P products)
        i = state["i"]
        U_kxP = state["U"].at[i].set(v_P)
        # the residual of (lam, v): v, not v_P, is the vector whose Rayleigh quotient lam is
        tiny = jnp.finfo(jnp.float32).tiny
        residual = jnp.linalg.norm(Hv_P - lam * state["v"]) / jnp.maximum(jnp.abs(lam), tiny)
        # a run deflated by a vector of an unconverged run (no eigenvector) finds an eigenvalue of another
        # operator, however small its residual there: unknown, not converged
        earlier_converged = jnp.all(state["converged"] | (jnp.arange(state["converged"].shape[0]) >= i))
        converged = met & (residual <= RESIDUAL_TOLERANCE) & earlier_converged
        return {**state, "U": U_kxP, "lams": state["lams"].at[i].set(lam), "iters": state["iters"].at[i].set(it),
                "residuals": state["residuals"].at[i].set(residual),
                "converged": state["converged"].at[i].set(converged),
                "i": i + 1, "v": _start(state["v0"], U_kxP, i + 1), "lam": jnp.zeros_like(lam),
                "old_lam": jnp.zeros_like(lam), "it": jnp.zeros_like(it)}

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
    _check_stopping(max_iterations, tolerance)
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
    _check_stopping(max_iterations, tolerance)
    v0_P = np.asarray(v0_P, np.float64)
    P = v0_P.shape[0] if v0_P.ndim == 1 else 0
    if isinstance(k, bool) or int(k) != k or not 1 <= k < P:
        raise ConfigError(f"k={k!r} eigenvalues from a start vector of shape {v0_P.shape}: give a vector "
                          "(P,) and 1 <= k < P for method 'lanczos' (ARPACK), or method 'power' for k = P")
    products = 0

    def apply(x):
        nonlocal products
        products += 1
        return np.asarray(matvec(jnp.asarray(x.reshape(-1), jnp.float32)), np.float64).reshape(x.shape)

    budget = k * max_iterations
    # ARPACK's products (counted): 1 + ncv for its first basis of ncv Lanczos vectors, then at most
    # ncv - k per restart. ncv: scipy's default, fewer where the budget holds less than two bases
    ncv = min(P, max(2 * k + 1, 20), max(k + 1, (budget - 1 + k) // 2))
    restarts = max(1, (budget - 1 - ncv) // (ncv - k))
    operator = LinearOperator((P, P), matvec=apply, dtype=np.float64)
    try:
        lams, V_Pxn = eigsh(operator, k=k, which="LM", v0=v0_P, ncv=ncv, maxiter=restarts, tol=tolerance)
    except ArpackNoConvergence as stopped:  # it returns the pairs that did converge, none for the others
        lams, V_Pxn = stopped.eigenvalues.real, stopped.eigenvectors.real
    residuals = [np.linalg.norm(apply(v) - lam * v) / max(abs(lam), np.finfo(np.float32).tiny)
                 for lam, v in zip(lams, V_Pxn.T)]
    missing = k - len(lams)
    values = np.concatenate([lams, np.full(missing, np.nan)])
    residuals = np.concatenate([residuals, np.full(missing, np.inf)])
    vectors_kxP = np.concatenate([V_Pxn.T, np.full((missing, P), np.nan)])
    order = np.argsort(-np.nan_to_num(np.abs(values), nan=-1.0), kind="stable")  # NaN last
    converged = residuals <= RESIDUAL_TOLERANCE  # ARPACK's own test passed for every pair it returned
    return Eigenpairs(values=values[order].astype(np.float32), iterations=np.full(k, products, np.int32),
                      residuals=residuals[order].astype(np.float32), converged=converged[order],
                      vectors=vectors_kxP[order].astype(np.float32))


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
        raise ConfigError("method='lanczos' runs ARPACK on the host: call it outside jax.jit, or give "
                          "method='power' (PK22's power iteration, jittable)")
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
        pairs = lanczos(lambda v_P: hvp_P(params, batch, v_P), start_vector(key, params), k=k,
                        max_iterations=max_iterations, tolerance=tolerance)
    else:
        pairs = power_iteration(hvp_matvec(loss_fn, params, batch), start_vector(key, params), k=k,
                                max_iterations=max_iterations, tolerance=tolerance)
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
        return spectrum_on_host(lambda b, v_P: hvp_P(params, b, v_P), params, batches, key, k=k,
                                method="lanczos", max_iterations=max_iterations, tolerance=tolerance)
    M = jax.tree.leaves(batches)[0].shape[0]
    keys = jax.random.split(key, M)
    one = lambda xs: top_eigenvalues(  # noqa: E731
        loss_fn, params, xs[0], xs[1], k=k, max_iterations=max_iterations, tolerance=tolerance
    )
    return jax.lax.map(one, (batches, keys))


def spectrum_step(loss_fn: LossFn, *, max_iterations: int | None = None, tolerance: float | None = None,
                  method: str = "power"):
    """The program that `spectrum_on_host` calls once per Hessian-vector product (jit it; for "power",
    donating the state), for the Hessian of `loss_fn(., batch)` at `params`: for method "power",
    (params, batch, state) -> state, one `power_step` (cap and tolerance: `max_iterations`, `tolerance`,
    default PK22's); for "lanczos", (params, batch, v_P) -> H v_P (`hvp_matvec`; its cap and tolerance
    are `spectrum_on_host`'s, and ConfigError where given here)."""
    if check_choice(method, METHODS, "method") == "lanczos":
        if (max_iterations, tolerance) != (None, None):
            raise ConfigError(f"max_iterations={max_iterations!r}, tolerance={tolerance!r} with method="
                              "'lanczos': give them to spectrum_on_host (this step is the bare "
                              "Hessian-vector product)")
        return lambda params, batch, v_P: hvp_matvec(loss_fn, params, batch)(v_P)
    max_iterations = MAX_ITERATIONS if max_iterations is None else max_iterations
    tolerance = TOLERANCE if tolerance is None else tolerance
    _check_stopping(max_iterations, tolerance)

    def step(params, batch, state):
        return power_step(hvp_matvec(loss_fn, params, batch), state, max_iterations=max_iterations,
                          tolerance=tolerance)

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


def spectrum_on_host(step, params, batches, key: jax.Array, *, k: int = TOP_K, method: str = "power",
                     max_iterations: int | None = None, tolerance: float | None = None) -> Eigenpairs:
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
    if check_choice(method, METHODS, "method") == "power" and (max_iterations, tolerance) != (None, None):
        raise ConfigError(f"max_iterations={max_iterations!r}, tolerance={tolerance!r} with method='power': "
                          "give them to spectrum_step, whose step applies them")
    found = []
    for m in range(M):
        batch = jax.tree.map(lambda a: a[m], batches)
        if method == "lanczos":
            pairs = lanczos(lambda v_P: step(batch, v_P), start_vector(keys[m], params), k=k,
                            max_iterations=MAX_ITERATIONS if max_iterations is None else max_iterations,
                            tolerance=TOLERANCE if tolerance is None else tolerance)
            found.append(dataclasses.replace(pairs, vectors=None))
            continue
        state = power_init(start_vector(keys[m], params), k)
        while int(state["i"]) < k:
            state = step(batch, state)
        found.append(eigenpairs({name: np.asarray(state[name]) for name in ("lams", "iters", "residuals",
                                                                            "converged")}))
    return jax.tree.map(lambda *a: np.stack(a), *found)


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
    Hessian), and the extremes. `eigenvalues_Mxk`: the `Eigenpairs` of `spectrum` (then "not_converged"
    counts the eigenvalues that did not converge, `Eigenpairs.converged`: NEP and APE of such values are
    not PK22's), or their values alone ("not_converged": None, unknown). ConfigError for fewer than 2
    mini-batches (no interval), a non-finite eigenvalue, or a Lanczos eigenvalue without a value (NaN:
    not converged within the cap)."""
    not_converged = None
    if isinstance(eigenvalues_Mxk, Eigenpairs):
        not_converged = int(np.sum(~np.asarray(eigenvalues_Mxk.converged, bool)))
        if np.isnan(np.asarray(eigenvalues_Mxk.values, np.float64)).any():  # Lanczos found no value there
            raise ConfigError(f"{not_converged} eigenvalues did not converge within the cap and have no "
                              "value (NaN, method 'lanczos'): raise max_iterations (the suite's "
                              "hessian_iterations)")
        eigenvalues_Mxk = eigenvalues_Mxk.values
    lams_Mxk = np.asarray(eigenvalues_Mxk, np.float64)
    if lams_Mxk.ndim != 2 or lams_Mxk.shape[0] < 2:
        raise ConfigError(f"eigenvalues of shape {lams_Mxk.shape}: give (M, k), M >= 2 mini-batches (one per "
                          "row), so that the intervals have units to resample")
    if not np.isfinite(lams_Mxk).all():
        raise ConfigError("the eigenvalues hold NaN or inf: the loss or its Hessian is not finite at these "
                          "parameters; check the loss on this batch")
    out = {"max": float(lams_Mxk.max()), "min": float(lams_Mxk.min()), "count": int(lams_Mxk.size),
           "batches": int(lams_Mxk.shape[0]), "not_converged": not_converged}
    for name, statistic in (("nep", nep), ("ape", ape)):
        est = bootstrap.estimate(lams_Mxk, statistic, resamples=resamples, seed=seed)
        out[name], out[f"{name}_interval"] = est["value"], [est["lo"], est["hi"]]
    return out
