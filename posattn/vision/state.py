"""The train state of the image regime: a plain dict {"step", "params", "batch_stats", "opt_state"}."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


def init_state(
    model: nn.Module, image_shape: tuple[int, int, int], seed: int, tx: optax.GradientTransformation
) -> dict:
    """The initial train state (to be run under `jax.jit` with replicated `out_shardings`).

    The init key is fold_in(key(seed), 0); step t's key is fold_in(key(seed), t + 1) (`train`).
    """
    init_key = jax.random.fold_in(jax.random.key(seed), 0)
    dummy = jnp.zeros((1, *image_shape), jnp.float32)
    variables = model.init({"params": init_key, "dropout": init_key}, dummy, train=False)
    params = variables["params"]
    return {
        "step": jnp.zeros((), jnp.int32),
        "params": params,
        "batch_stats": variables.get("batch_stats", {}),
        "opt_state": tx.init(params),
    }


def model_variables(state: dict) -> dict:
    """The variables `model.apply` takes: params, and batch_stats for the models that have them."""
    if state["batch_stats"]:
        return {"params": state["params"], "batch_stats": state["batch_stats"]}
    return {"params": state["params"]}
