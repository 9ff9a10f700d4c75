"""Robustness to frequency-based random noise, PK22 Figure 5.

Noise concentrated at one frequency f: delta = eps * sign(xi) with xi ~ N(0, I) per pixel and channel,
of which only the frequencies in a band around f of its 2-D spectrum are kept; x_noisy = x +
real(IFFT2(masked spectrum)). The measurement is the accuracy on noisy inputs minus the accuracy on
clean inputs, for f = 0.1 pi .. 0.9 pi. PK22 finds a ViT robust to high-frequency noise (ImageNet: -4.8
points at 0.9 pi) and a ResNet vulnerable (-15.3).

The band (`band="pk22"`, default) is PK22's code (xxxnell/how-do-vits-work, ops/adversarial.py,
`FreqAttack._fourier_mask` and `_center_mask`): with n(g) = max(int(g h / (2 pi)), 0) (int truncates
towards zero), the centred square of signed frequency indices -n <= k < n on both axes (a w1 x w1 block
of ones, w1 = 2n, padded to h x h and centred on the DC entry that `_shift` puts at h / 2), for g = f + s
minus that for g = f - s, s = 0.2 rad; n >= h / 2 keeps the whole axis. So a band keeps k = -n but not
+n, and at f = 0.1 pi (f - s < 0) it keeps DC. Multiplying the amplitude by the mask and keeping the
phase, as PK22's code does, is multiplying the spectrum by it. PK22's mask is square with h's counts
(its images are square; an odd h breaks its padding); here rows use h and columns w. `band="annulus"`
is this module's band before issue 35: f - s <= |omega|_inf < f + s on the frequencies 2 pi k / n.

eps (the noise is added to the model's normalised inputs, in their units): 0.7, PK22's author's
recipe for this noise (how-do-vits-work issue #44, its `Random(eps=0.7)`); ops/adversarial.py's `Random`
defaults to 0.007 (`EPS_REPOSITORY`); this module used 1.0 before issue 35. PK22's paper text is not in
this project's sources, so its value is not checked here. `empty_bands` says which bands hold no
frequency of an image size (8 x 8: 0.1, 0.4, 0.6 and 0.9 pi); their results are NaN, not measured.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from posattn.analysis.objective import check_labels
from posattn.errors import ConfigError

HALF_WIDTH = 0.2  # s, radians (PK22, ops/adversarial.py FreqAttack's default s)
BANDS = ("pk22", "annulus")
EPS = 0.7  # PK22 issue #44 (module docstring)
EPS_REPOSITORY = 0.007  # PK22 ops/adversarial.py, Random's default eps
FREQUENCIES = tuple(np.round(np.arange(1, 10) * 0.1 * np.pi, 6))  # 0.1 pi .. 0.9 pi


def omega_inf(h: int, w: int) -> jax.Array:
    """|omega|_inf of every entry of a centred (fftshift'ed) h x w spectrum, in radians per pixel."""
    wy = jnp.fft.fftshift(jnp.fft.fftfreq(h)) * 2 * jnp.pi
    wx = jnp.fft.fftshift(jnp.fft.fftfreq(w)) * 2 * jnp.pi
    return jnp.maximum(jnp.abs(wy)[:, None], jnp.abs(wx)[None, :])


def _centre_square(n_rows, n_cols, h: int, w: int) -> jax.Array:
    """PK22's `_center_mask` on the centred spectrum: -n <= k < n on each axis (all of it for 2n >= size)."""
    ky = jnp.fft.fftshift(jnp.fft.fftfreq(h) * h)[:, None]
    kx = jnp.fft.fftshift(jnp.fft.fftfreq(w) * w)[None, :]
    rows = ((ky >= -n_rows) & (ky < n_rows)) | (2 * n_rows >= h)
    cols = ((kx >= -n_cols) & (kx < n_cols)) | (2 * n_cols >= w)
    return rows & cols


def band_mask(h: int, w: int, f, half_width: float = HALF_WIDTH, band: str = "pk22") -> jax.Array:
    """Boolean (h, w) mask of the centred spectrum around f (module docstring). `f` may be traced."""
    if band == "annulus":
        om = omega_inf(h, w)
        return (om >= f - half_width) & (om < f + half_width)
    if band != "pk22":
        raise ConfigError(f"band={band!r}: choose one of {BANDS}")
    count = lambda g, size: jnp.maximum(jnp.trunc(g * size / (2 * jnp.pi)), 0)  # noqa: E731
    outer = _centre_square(count(f + half_width, h), count(f + half_width, w), h, w)
    inner = _centre_square(count(f - half_width, h), count(f - half_width, w), h, w)
    return outer & ~inner


def empty_bands(
    h: int, w: int, frequencies=FREQUENCIES, half_width: float = HALF_WIDTH, band: str = "pk22"
) -> list[float]:
    """The frequencies whose band holds no frequency of an h x w image (their noise is zero)."""
    return [f for f in frequencies if not bool(band_mask(h, w, f, half_width, band).any())]


def _empty_F(h: int, w: int, fs_F, half_width: float, band: str) -> jax.Array:
    """(F,) bool: `empty_bands` as an array, for frequencies that may be traced."""
    return jax.vmap(lambda f: ~band_mask(h, w, f, half_width, band).any())(
        jnp.asarray(fs_F, jnp.float32)
    )


def _check_images(shape_BxHxWxC) -> None:
    """ConfigError unless an image batch's shape is (B, H, W, C) with the channels last."""
    shape = tuple(shape_BxHxWxC)
    if len(shape) != 4:
        raise ConfigError(
            f"images of shape {shape}: give (B, H, W, C) (a grayscale batch as (B, H, W, 1))"
        )
    if shape[1] in (1, 3) and shape[3] > 4:
        raise ConfigError(
            f"images of shape {shape} look channels-first (B, C, H, W): give (B, H, W, C), "
            "e.g. images.transpose(0, 2, 3, 1)"
        )


def _gaussian(key, shape_BxHxWxC) -> jax.Array:
    """N(0, I) of the shape from one key, or with a batch of B keys (a (B,) key array) image i's from key i."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.ndim == 1:
        if key.shape[0] != shape_BxHxWxC[0]:
            raise ConfigError(
                f"{key.shape[0]} noise keys for a batch of {shape_BxHxWxC[0]} images: give one "
                "key, or one per image"
            )
        return jax.vmap(lambda k: jax.random.normal(k, shape_BxHxWxC[1:], jnp.float32))(key)
    return jax.random.normal(key, shape_BxHxWxC, jnp.float32)


def band_limited_noise(
    key, shape_BxHxWxC, f, eps: float, half_width: float = HALF_WIDTH, band: str = "pk22"
) -> jax.Array:
    """eps * sign(xi), xi ~ N(0, I), with its spectrum restricted to the band around f (real part).

    `key`: one key for the batch, or B keys (`jax.random.key` arrays of shape (B,)), one per image: a
    split evaluated in batches then draws every image's noise from its own key, whatever the batching.
    """
    _check_images(shape_BxHxWxC)
    _, H, W, _ = shape_BxHxWxC
    delta = eps * jnp.sign(_gaussian(key, shape_BxHxWxC))
    F = jnp.fft.fftshift(jnp.fft.fft2(delta, axes=(1, 2)), axes=(1, 2))
    F = F * band_mask(H, W, f, half_width, band)[None, :, :, None]
    return jnp.real(jnp.fft.ifft2(jnp.fft.ifftshift(F, axes=(1, 2)), axes=(1, 2)))


def accuracy(logits_BxK: jax.Array, labels_B: jax.Array) -> jax.Array:
    """The share of rows whose largest logit is the label's. ConfigError unless logits are (B, K) and
    labels B class indices in [0, K) (`objective.check_labels`)."""
    if jnp.ndim(logits_BxK) != 2:
        raise ConfigError(f"logits of shape {jnp.shape(logits_BxK)}: give (B, K)")
    check_labels(labels_B, *jnp.shape(logits_BxK))
    return jnp.mean(jnp.argmax(logits_BxK, -1) == labels_B)


def under_noise(
    measure_fn: Callable[[jax.Array], Any],
    images_BxHxWxC: jax.Array,
    key: jax.Array,
    *,
    frequencies=FREQUENCIES,
    eps: float = EPS,
    half_width: float = HALF_WIDTH,
    band: str = "pk22",
):
    """measure_fn(clean images), then measure_fn(images + noise at f) for every f: outputs stacked on a
    leading axis of 1 + F (index 0: clean), NaN at every f whose band holds no frequency of the images
    (`empty_bands`: no noise, so nothing measured there; the outputs are cast to float for the NaN).

    The clean pass is the band at f = -inf, which holds no frequency: its noise is exactly zero, so it
    runs through the same `jax.lax.map` body as the noisy ones and the model appears once in the
    compiled program. The same noise draw (`key`: one key, or one per image, `band_limited_noise`) serves
    every f, so the bands differ only in their frequencies. ConfigError for images not (B, H, W, C).
    """
    _check_images(images_BxHxWxC.shape)
    _, H, W, _ = images_BxHxWxC.shape
    fs = jnp.concatenate(
        [jnp.array([-jnp.inf], jnp.float32), jnp.asarray(frequencies, jnp.float32)]
    )

    def at(f):
        noise = band_limited_noise(key, images_BxHxWxC.shape, f, eps, half_width, band)
        return measure_fn(images_BxHxWxC + noise)

    # an empty band's noise is zero: its pass equals the clean one and would read as "no change"
    empty = jnp.concatenate([jnp.zeros((1,), bool), _empty_F(H, W, fs[1:], half_width, band)])

    def blank(out):
        out = out.astype(jnp.promote_types(out.dtype, jnp.float32))
        return jnp.where(empty.reshape(-1, *[1] * (out.ndim - 1)), jnp.nan, out)

    return jax.tree.map(blank, jax.lax.map(at, fs))


def accuracy_drops(
    logits_fn: Callable[[jax.Array], jax.Array],
    images_BxHxWxC: jax.Array,
    labels_B: jax.Array,
    key: jax.Array,
    *,
    frequencies=FREQUENCIES,
    eps: float = EPS,
    half_width: float = HALF_WIDTH,
    band: str = "pk22",
) -> tuple[jax.Array, jax.Array]:
    """(clean accuracy, drops_F): accuracy(noisy at f) - accuracy(clean) for every f, in [-1, 1]; NaN
    (not measured) at every f whose band holds no frequency of the images (`empty_bands`).

    `logits_fn` maps model inputs to logits (e.g. `lambda x: model.apply(variables, x)`); see
    `under_noise` for the noise draws and `accuracy` for what is checked.
    """
    acc = under_noise(
        lambda x: accuracy(logits_fn(x), labels_B),
        images_BxHxWxC,
        key,
        frequencies=frequencies,
        eps=eps,
        half_width=half_width,
        band=band,
    )
    return acc[0], acc[1:] - acc[0]
