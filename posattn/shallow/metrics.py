"""What LWLC23 measures of a model: test hinge loss, test error, success, and the attention mass on
label-relevant tokens (Proposition 2: for a label-relevant query it converges to 1 - eta^C)."""

import jax
import jax.numpy as jnp

from posattn.metrics import classification_error
from posattn.shallow.config import ModelConfig, SGDConfig
from posattn.shallow.data import RELEVANT, Tokens
from posattn.shallow.model import attention_weights, forward


def attention_mass(att_BxLxL: jax.Array, kind_BxL: jax.Array, keep_BxL: jax.Array) -> jax.Array:
    """Mean over samples and kept label-relevant queries l of sum_{kept relevant keys s} att[l, s]."""
    relevant_BxL = (kind_BxL == RELEVANT) & keep_BxL
    mass_BxL = (att_BxLxL * relevant_BxL[:, None, :]).sum(-1)
    return (mass_BxL * relevant_BxL).sum() / jnp.maximum(relevant_BxL.sum(), 1)


def evaluate(
    params: dict, test: Tokens, cfg: ModelConfig, keep_BxL: jax.Array | None = None
) -> dict:
    """Test hinge loss, test error and (ViT only, else NaN) attention mass, on `test` with its kept tokens."""
    if keep_BxL is None:
        keep_BxL = jnp.ones(test.kind_BxL.shape, bool)
    score_B = forward(params, test.x_BxLxd, cfg, keep_BxL)
    if cfg.attention == "softmax":
        mass = attention_mass(
            attention_weights(params, test.x_BxLxd, keep_BxL, cfg), test.kind_BxL, keep_BxL
        )
    else:
        mass = jnp.float32(jnp.nan)
    return {
        "test_hinge": jax.nn.relu(1.0 - test.y_B * score_B).mean(),
        "test_error": classification_error(score_B, test.y_B),
        "attention_mass": mass,
    }


def succeeded(entry: dict, sgd: SGDConfig) -> jax.Array:
    """Theorem 1's target: zero test error (success="error") or test hinge loss <= eps ("hinge")."""
    if sgd.success == "error":
        return entry["test_error"] == 0
    return entry["test_hinge"] <= sgd.eps
