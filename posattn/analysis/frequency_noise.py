"""Robustness to frequency-based random noise, PK22 Figure 5.

Noise concentrated at one frequency f: delta = eps * sign(xi) with xi ~ N(0, I) per pixel and channel,
of which only the frequencies in the square annulus f - s <= |omega|_inf < f + s (s = 0.2 rad) of its
centred 2-D spectrum are kept; x_noisy = x + real(IFFT2(masked spectrum)). The measurement is the
accuracy on noisy inputs minus the accuracy on clean inputs, for f = 0.1 pi .. 0.9 pi. PK22 finds a ViT
robust to high-frequency noise (ImageNet: -4.8 points at 0.9 pi) and a ResNet vulnerable (-15.3).

The noise is added to the model's (normalised) inputs, and eps is in those units (docs/how_vits_work.md,
Decisions). The band needs pixel frequencies inside it: an image side of n pixels has frequencies
2 pi j / n, so at 8 x 8 the band around 0.1 pi holds none; 16 x 16 is the smallest side at which every
band f = 0.1 pi .. 0.9 pi is non-empty (`empty_bands` says which are).
"""
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

HALF_WIDTH = 0.2  # s, radians (PK22)
FREQUENCIES = tuple(np.round(np.arange(1, 10) * 0.1 * np.pi, 6))  # 0.1 pi .. 0.9 pi


def omega_inf(h: int, w: int) -> jax.Array:
    """|omega|_inf of every entry of a centred (fftshift'ed) h x w spectrum, in radians per pixel."""
    wy = jnp.fft.fftshift(jnp.fft.fftfreq(h)) * 2 * jnp.pi
    wx = jnp.fft.fftshift(jnp.fft.fftfreq(w)) * 2 * jnp.pi
    return jnp.maximum(jnp.abs(wy)[:, None], jnp.abs(wx)[None, :])


def band_mask(h: int, w: int, f, half_width: float = HALF_WIDTH) -> jax.Array:
    """Boolean (h, w) mask of the centred spectrum: f - s <= |omega|_inf < f + s. `f` may be traced."""
    om = omega_inf(h, w)
    return (om >= f - half_width) & (om < f + half_width)


def empty_bands(h: int, w: int, frequencies=FREQUENCIES, half_width: float = HALF_WIDTH) -> list[float]:
    """The frequencies whose band holds no frequency of an h x w image (their noise is zero)."""
    return [f for f in frequencies if not bool(band_mask(h, w, f, half_width).any())]


def band_limited_noise(key, shape_BxHxWxC, f, eps: float, half_width: float = HALF_WIDTH) -> jax.Array:
    """eps * sign(xi), xi ~ N(0, I), with its spectrum restricted to the band around f (real part)."""
    _, H, W, _ = shape_BxHxWxC
    delta = eps * jnp.sign(jax.random.normal(key, shape_BxHxWxC, jnp.float32))
    F = jnp.fft.fftshift(jnp.fft.fft2(delta, axes=(1, 2)), axes=(1, 2))
    F = F * band_mask(H, W, f, half_width)[None, :, :, None]
    return jnp.real(jnp.fft.ifft2(jnp.fft.ifftshift(F, axes=(1, 2)), axes=(1, 2)))


def accuracy(logits_BxK: jax.Array, labels_B: jax.Array) -> jax.Array:
    return jnp.mean(jnp.argmax(logits_BxK, -1) == labels_B)


def under_noise(
    measure_fn: Callable[[jax.Array], Any],
    images_BxHxWxC: jax.Array,
    key: jax.Array,
    *,
    frequencies=FREQUENCIES,
    eps: float = 1.0,
    half_width: float = HALF_WIDTH,
):
    """measure_fn(clean images), then measure_fn(images + noise at f) for every f: outputs stacked on a
    leading axis of 1 + F (index 0: clean).

    The clean pass is the band at f = -inf, which holds no frequency: its noise is exactly zero, so it
    runs through the same `jax.lax.map` body as the noisy ones and the model appears once in the
    compiled program. The same noise draw (`key`) serves every f, so the bands differ only in their
    frequencies.
    """
    fs = jnp.concatenate([jnp.array([-jnp.inf], jnp.float32), jnp.asarray(frequencies, jnp.float32)])

    def at(f):
        return measure_fn(images_BxHxWxC + band_limited_noise(key, images_BxHxWxC.shape, f, eps, half_width))

    return jax.lax.map(at, fs)


def accuracy_drops(
    logits_fn: Callable[[jax.Array], jax.Array],
    images_BxHxWxC: jax.Array,
    labels_B: jax.Array,
    key: jax.Array,
    *,
    frequencies=FREQUENCIES,
    eps: float = 1.0,
    half_width: float = HALF_WIDTH,
) -> tuple[jax.Array, jax.Array]:
    """(clean accuracy, drops_F): accuracy(noisy at f) - accuracy(clean) for every f, in [-1, 1].

    `logits_fn` maps model inputs to logits (e.g. `lambda x: model.apply(variables, x)`); see
    `under_noise` for the noise draws.
    """
    acc = under_noise(lambda x: accuracy(logits_fn(x), labels_B), images_BxHxWxC, key,
                      frequencies=frequencies, eps=eps, half_width=half_width)
    return acc[0], acc[1:] - acc[0]
