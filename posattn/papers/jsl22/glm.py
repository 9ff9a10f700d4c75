"""Theorem 3.1 of JSL22: a generalised linear model g(X) = phi(sum_j <w_j, X_j>) errs with prob. >= 1/8.

The baseline (docs/decisions.md, The other claims): a weight w_j in R^d per patch and a flexible link phi, a small tanh MLP on
the scalar z = sum_j <w_j, X_j>, trained jointly with Adam (optax) on the logistic loss of the same
empirical risk (E) as Eq. (T), full batch, many steps inside one `lax.scan`.

`oracle_error` is the reference point: with w_j = w* for every j, z is the signed count of features, and
the best link is the majority label of each value of z; its error estimates the floor of every GLM
whose weights follow w* (the theorem's bound is over all GLMs).

The theorem bounds P[f*(X) g(X) <= 0], disagreement with the labelling function (a tie f* = 0 counts
as an error whatever g says); the labels y disagree with f* on the label-noise samples. Both errors
are measured: against f* (`against="f_star"`, the theorem's) and against y (the test error).
"""

import functools

import jax
import jax.numpy as jnp
import optax

from posattn import compile_options
from posattn.errors import ConfigError
from posattn.metrics import classification_error
from posattn.theory import evaluation
from posattn.theory.config import TheoryConfig
from posattn.theory.data import Task, sample
from posattn.theory.datasets.structured import sample_coefficients, threshold
from posattn.theory.model import logistic_loss


def init_glm(key, D: int, d: int, hidden: int = 32) -> dict:
    """w (D, d) ~ N(0, 1/(D d)), and phi: 1 -> hidden -> hidden -> 1 (tanh), LeCun-normal weights."""
    k_w, k1, k2, k3 = jax.random.split(key, 4)
    dense = lambda k, n_in, n_out: {
        "W": jax.random.normal(k, (n_in, n_out)) / jnp.sqrt(n_in),
        "b": jnp.zeros(n_out),
    }
    return {
        "w": jax.random.normal(k_w, (D, d)) / jnp.sqrt(D * d),
        "phi": [dense(k1, 1, hidden), dense(k2, hidden, hidden), dense(k3, hidden, 1)],
    }


def glm_forward(params, X: jax.Array) -> jax.Array:
    """g(X) = phi(sum_j <w_j, X_j>), shape (n,) for X of shape (n, D, d)."""
    h = jnp.einsum("njk,jk->n", X, params["w"])[:, None]
    *hidden, last = params["phi"]
    for layer in hidden:
        h = jnp.tanh(h @ layer["W"] + layer["b"])
    return (h @ last["W"] + last["b"])[:, 0]


def glm_risk(params, X, y) -> jax.Array:
    return logistic_loss(y * glm_forward(params, X)).mean()


@functools.partial(jax.jit, static_argnames=("steps", "lr", "hidden"))
def fit_glm(key, X, y, *, steps: int = 2000, lr: float = 1e-2, hidden: int = 32):
    """Adam on the logistic risk of (X, y), full batch; returns (params, training risk per step)."""
    params = init_glm(key, X.shape[1], X.shape[2], hidden)
    opt = optax.adam(lr)

    def step(carry, _):
        params, state = carry
        loss, grads = jax.value_and_grad(glm_risk)(params, X, y)
        updates, state = opt.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), loss

    (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), None, length=steps)
    return params, losses


def glm_test_error(key, params, cfg: TheoryConfig, task: Task, n: int = 100_000) -> dict:
    """{"test_error": P[y g(X) <= 0], "f_star_error": P[f*(X) g(X) <= 0]} on n fresh samples."""
    X, y = sample(key, cfg, task, n)
    g = glm_forward(params, X)
    return {
        "test_error": classification_error(g, y),
        "f_star_error": evaluation.label_disagrees(X, jnp.sign(g), cfg, task).mean(),
    }


def oracle_error(
    key, cfg: TheoryConfig, task: Task, n: int = 1_000_000, against: str = "labels"
) -> jax.Array:
    """Error of the GLM with w_j = w* and phi the best link: the majority of the target's signs at each
    value of z (see module doc), against the labels y or against f* (`against="f_star"`).

    With orthogonal noise z = sum_j <w*, X_j> is the integer sum of the w*-coefficients of Assumption 1,
    so only those are drawn (no noise, no (n, D, d) array).
    """
    if (
        cfg.noise != "orthogonal"
    ):  # isotropic noise moves z off the integers: drawing coef is not enough
        raise ConfigError(f"oracle_error needs noise='orthogonal' (got {cfg.noise!r})")
    # One compiled program: run op by op, the draw compiled some forty small ones (1.4 s more at the
    # paper preset).
    if against not in ("labels", "f_star"):
        raise ConfigError(f"oracle_error: against={against!r}, choose 'labels' or 'f_star'")
    return compile_options.jit_run_once(_oracle_error, cfg=cfg, n=n, against=against)(key, task)


def _oracle_error(key, task: Task, *, cfg: TheoryConfig, n: int, against: str) -> jax.Array:
    coef, y, _ = sample_coefficients(key, cfg, task, n)
    z = jnp.round(coef.sum(-1)).astype(jnp.int32) + cfg.D  # in [0, 2D]
    # the target's sign: y, or that of f* (exact here: the coefficients are integers)
    target = (
        y
        if against == "labels"
        else jnp.sign(threshold(coef[:, task.sets].sum(-1), 0.9 * cfg.C).sum(-1))
    )
    count = lambda mask: jnp.zeros(2 * cfg.D + 1).at[z].add(mask)  # noqa: E731
    # at each z the link says the majority sign; the minority and every tie (target 0) are errors
    return (jnp.minimum(count(target > 0), count(target < 0)) + count(target == 0)).sum() / n


def phase_one_reference(key, cfg: TheoryConfig, task: Task, n: int = 200_000) -> float | None:
    """The GLM error that JSL22's phase-I model is measured against (`phases`, statement I.b): the
    majority-link GLM's, exact in n for Assumption 1 with orthogonal noise; None for other data."""
    if cfg.dataset != "structured" or cfg.noise != "orthogonal":
        return None
    return float(oracle_error(key, cfg, task, n))
