"""Fourier analysis of feature maps, PK22 Figure 4.

For a layer output z (B, h, w, C; ViT tokens on their patch grid), the 2-D FFT over the spatial axes of
every sample and channel, its log amplitude log(|FFT2(z)| + 1e-6) centred (zero frequency in the
middle), averaged over batch and channels: A (h, w). Along the half diagonal from the centre,
d_k = A[h/2 + k, w/2 + k] for k = 0 .. h/2 - 1, and the profile is Delta_k = d_k - d_0, the log
amplitude relative to the DC component (PK22's code labels the last point 1.0 pi). The high-frequency
value of a layer is Delta at that last point: negative everywhere (natural feature maps are
low-frequency), lowered by a low-pass layer (PK22: attention) and raised by a high-pass one (convs).

A map smaller than 4 x 4 has no frequency between DC and its last point, so its profile is NaN beyond
DC and its high-frequency value is NaN (docs/how_vits_work.md, Decisions).
"""
import collections

import jax
import jax.numpy as jnp

EPS = 1e-6  # PK22's code: log(|F| + 1e-6)


def log_amplitude(z_BxHxWxC: jax.Array) -> jax.Array:
    """A_HxW: centred log amplitude of the 2-D spectrum, averaged over batch and channels."""
    z = z_BxHxWxC.astype(jnp.float32)
    F_BxHxWxC = jnp.fft.fftshift(jnp.fft.fft2(z, axes=(1, 2)), axes=(1, 2))
    return jnp.log(jnp.abs(F_BxHxWxC) + EPS).mean(axis=(0, 3))


def relative_profile(z_BxHxWxC: jax.Array) -> jax.Array:
    """Delta_k, k = 0 .. h/2 - 1: log amplitude along the half diagonal relative to DC (Delta_0 = 0).

    Maps that are not square use the shorter side; maps under 4 x 4 give NaN beyond k = 0.
    """
    A_HxW = log_amplitude(z_BxHxWxC)
    h, w = A_HxW.shape
    n = min(h, w) // 2
    if n < 2:
        return jnp.array([0.0, jnp.nan], jnp.float32)
    k = jnp.arange(n)
    d_n = A_HxW[h // 2 + k, w // 2 + k]
    return d_n - d_n[0]


def high_frequency(z_BxHxWxC: jax.Array) -> jax.Array:
    """Delta at the last point of the half diagonal (labelled 1.0 pi by PK22); NaN for maps under 4 x 4."""
    return relative_profile(z_BxHxWxC)[-1]


def frequencies(n: int) -> jax.Array:
    """The abscissa of a profile of n points as PK22 draws it: k / (n - 1) in units of pi (0 .. 1.0)."""
    return jnp.arange(n) / max(n - 1, 1)


def layer_profiles(features: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """`relative_profile` of every layer of a `features` dict (name -> (B, h, w, C)), in its order."""
    # an OrderedDict: jax.jit returns a plain dict with its keys sorted, an OrderedDict in order
    return collections.OrderedDict((name, relative_profile(z)) for name, z in features.items())
