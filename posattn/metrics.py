"""Metrics shared by every regime."""

import jax
import jax.numpy as jnp


def classification_error(
    score_B: jax.Array, y_B: jax.Array, weight_B: jax.Array | None = None
) -> jax.Array:
    """Share of samples with sign(score) != y for labels y in {-1, +1}, weighted by `weight_B` if given.

    A score of 0 and a NaN score (a diverged model) both count as errors: `y * score > 0` is False for
    either, so divergence can never pass for accuracy.
    """
    wrong_B = (~(y_B * score_B > 0)).astype(jnp.float32)
    if weight_B is None:
        return wrong_B.mean()
    return (wrong_B * weight_B).sum() / weight_B.sum()
