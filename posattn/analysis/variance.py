"""Feature-map variance, PK22 Figure 6.

Var(z) = the unbiased variance of a layer output over its spatial positions, averaged over batch and
channels (PK22's code: `x.var(dim=(-1, -2)).mean()` on B x C x H x W maps; ViT tokens on their patch
grid, CLS dropped). PK22 finds that attention lowers it (attention aggregates, a spatial smoothing) and
convolutions and MLPs raise it. A 1 x 1 map has no spatial variance: NaN.
"""

import collections

import jax
import jax.numpy as jnp

from posattn.analysis.fourier import check_features, check_map


def feature_variance(z_BxHxWxC: jax.Array) -> jax.Array:
    """Mean over batch and channels of the unbiased spatial variance of each (sample, channel) map;
    ConfigError for a feature not (B, h, w, C) (`fourier.check_map`)."""
    check_map(z_BxHxWxC)
    B, H, W, C = z_BxHxWxC.shape
    z_BxNxC = z_BxHxWxC.astype(jnp.float32).reshape(B, H * W, C)
    if H * W < 2:
        return jnp.float32(jnp.nan)
    return jnp.var(z_BxNxC, axis=1, ddof=1).mean()


def layer_variances(features: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """`feature_variance` of every layer of a `features` dict (name -> (B, h, w, C)), in its order."""
    # an OrderedDict: jax.jit returns a plain dict with its keys sorted, an OrderedDict in order
    checked = check_features(features)
    return collections.OrderedDict((name, feature_variance(z)) for name, z in checked.items())


def image_variances(features: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """{name: variance_B}: `feature_variance` of every image of every layer on its own; their mean over
    images is `layer_variances`."""
    one = jax.vmap(lambda z_HxWxC: feature_variance(z_HxWxC[None]))
    return collections.OrderedDict((name, one(z)) for name, z in check_features(features).items())
