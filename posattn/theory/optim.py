"""The optimisers of the theory regime: any optax `GradientTransformation`, by default JSL22's GD.

JSL22 (Section 3) trains (A, v) by gradient descent with a constant step size; here v and A take
separate ones, lr and lr_A (`GDConfig.lr_A` says why A needs a larger one). `gradient_descent` is that
optimiser, written with optax and its step sizes injected into its state
(`optax.inject_hyperparams`), so that a compiled training loop reads them as arguments: runs that
differ only in them share one program, and a batch of runs with a step size each is one vmapped call.
The run drivers (`posattn.theory.gd`) take any other optax optimiser in its place (`optax.adam(1e-3)`,
`optax.sgd(0.01, momentum=0.9)`, ...); `posattn.theory.step.descend` keeps A's diagonal out of every
optimiser's reach. Only an optimiser built with `optax.inject_hyperparams` carries its numbers in its
state; any other's are constants of the compiled program (a new value compiles a new program).

The reduced dynamics (`posattn.theory.population.reduced`) are GD in closed form and take no optimiser.
"""

import functools

import jax.numpy as jnp
import optax

from posattn.errors import ConfigError
from posattn.theory.config import GDConfig


def _preconditioned_sgd(lr, lr_A) -> optax.GradientTransformation:
    """theta <- theta - eta grad with eta = lr for v and lr_A for A (Section 3 of JSL22, lr_A = lr there)."""
    return optax.partition({"A": optax.sgd(lr_A), "v": optax.sgd(lr)}, {"A": "A", "v": "v"})


@functools.cache  # one object per process: compiled programs are keyed on the optimiser they run
def gradient_descent() -> optax.GradientTransformation:
    """The default optimiser: plain GD with step size lr for v and lr_A for A, both in its state
    (`opt_state.hyperparams`), where the run drivers put `gd_hyperparameters(gd)`."""
    return optax.inject_hyperparams(_preconditioned_sgd)(lr=GDConfig.lr, lr_A=GDConfig.lr_A)


def gd_hyperparameters(gd: GDConfig) -> dict:
    """{"lr", "lr_A"} of `gd`, the numbers `gradient_descent` runs with (lr_A None is lr)."""
    return {"lr": gd.lr, "lr_A": gd.lr if gd.lr_A is None else gd.lr_A}


def with_hyperparameters(opt_state, hyperparams: dict | None):
    """`opt_state` with its injected hyperparameters (`optax.inject_hyperparams`) set from
    `hyperparams` (name -> scalar or array; traced or concrete), each cast to the dtype it has there."""
    if not hyperparams:
        return opt_state
    known = getattr(opt_state, "hyperparams", None)
    if not isinstance(known, dict) or not set(hyperparams) <= set(known):
        raise ConfigError(
            f"hyperparameters {sorted(hyperparams)}: the optimiser's state holds "
            f"{sorted(known) if isinstance(known, dict) else 'none'}; set only those, or "
            "build the optimiser with optax.inject_hyperparams so that its state holds them"
        )
    new = {k: jnp.asarray(v, jnp.result_type(known[k])) for k, v in hyperparams.items()}
    return opt_state._replace(hyperparams={**known, **new})
