"""Fourier analysis of feature maps, PK22 Figure 4.

For a layer output z (B, h, w, C; ViT tokens on their patch grid), the 2-D FFT over the spatial axes of
every sample and channel, its log amplitude log(|FFT2(z)| + 1e-6) centred (zero frequency in the
middle), averaged over batch and channels: A (h, w). Along the half diagonal from the centre,
d_k = A[h//2 + k, w//2 + k] for k = 0 .. h - h//2 - 1, and the profile is Delta_k = d_k - d_0, the log
amplitude relative to the DC component (PK22's code labels the last point 1.0 pi). The high-frequency
value of a layer is Delta at that last point: negative everywhere (natural feature maps are
low-frequency), lowered by a low-pass layer (PK22: attention) and raised by a high-pass one (convs).

The indexing is PK22's (xxxnell/how-do-vits-work, fourier_analysis.ipynb: `torch.roll` by int(h/2),
then `latent.diag()[int(h/2):]`, then `latent - latent[0]`): h - h//2 points, so an odd side keeps its
highest frequency (7 x 7: k = 0 .. 3) and every size has a profile (2 x 2: the DC point alone, Delta =
[0]). A map that is not square uses, on each axis, the shorter run from the centre (PK22's notebook
takes square maps).
"""

import collections

import jax
import jax.numpy as jnp

from posattn.errors import ConfigError

EPS = 1e-6  # PK22's code: log(|F| + 1e-6)


def check_map(z_BxHxWxC, name: str = "feature") -> None:
    """ConfigError unless a feature is a 4-D (B, h, w, C) map: (B, N, D) tokens would be transformed
    over the token and channel axes (`posattn.analysis.subject` puts tokens on their grid)."""
    if jnp.ndim(z_BxHxWxC) != 4:
        raise ConfigError(
            f"{name} of shape {tuple(jnp.shape(z_BxHxWxC))}: give a (B, h, w, C) map (tokens "
            "(B, N, D) as (B, h, w, D) on their patch grid: posattn.analysis.subject.features)"
        )


def check_features(features: dict) -> dict:
    """`features` ({name: map}) after `check_map` of each, the name in the message."""
    for name, z in features.items():
        check_map(z, f"feature {name!r}")
    return features


def log_amplitude(z_BxHxWxC: jax.Array) -> jax.Array:
    """A_HxW: centred log amplitude of the 2-D spectrum, averaged over batch and channels; ConfigError for
    a feature not (B, h, w, C) (`check_map`)."""
    check_map(z_BxHxWxC)
    z = z_BxHxWxC.astype(jnp.float32)
    F_BxHxWxC = jnp.fft.fftshift(jnp.fft.fft2(z, axes=(1, 2)), axes=(1, 2))
    return jnp.log(jnp.abs(F_BxHxWxC) + EPS).mean(axis=(0, 3))


def relative_profile(z_BxHxWxC: jax.Array) -> jax.Array:
    """Delta_k, k = 0 .. h - h//2 - 1: log amplitude along the half diagonal relative to DC (Delta_0 = 0)."""
    A_HxW = log_amplitude(z_BxHxWxC)
    h, w = A_HxW.shape
    k = jnp.arange(min(h - h // 2, w - w // 2))
    d_n = A_HxW[h // 2 + k, w // 2 + k]
    return d_n - d_n[0]


def high_frequency(z_BxHxWxC: jax.Array) -> jax.Array:
    """Delta at the last point of the half diagonal (labelled 1.0 pi by PK22); 0 for a map of one point."""
    return relative_profile(z_BxHxWxC)[-1]


def frequencies(n: int) -> jax.Array:
    """The abscissa of a profile of n points as PK22 draws it: k / (n - 1) in units of pi (0 .. 1.0)."""
    return jnp.arange(n) / max(n - 1, 1)


def image_profiles(features: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """{name: profile_Bxn}: `relative_profile` of every image of every layer on its own. Their mean over
    images is `layer_profiles` (the log amplitude's mean over the batch and the profile are linear), and
    they are the units a bootstrap over images resamples (`posattn.analysis.bootstrap`)."""
    one = jax.vmap(lambda z_HxWxC: relative_profile(z_HxWxC[None]))
    return collections.OrderedDict((name, one(z)) for name, z in check_features(features).items())


def layer_profiles(features: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """`relative_profile` of every layer of a `features` dict (name -> (B, h, w, C)), in its order."""
    # an OrderedDict: jax.jit returns a plain dict with its keys sorted, an OrderedDict in order
    checked = check_features(features)
    return collections.OrderedDict((name, relative_profile(z)) for name, z in checked.items())
