"""On-device augmentation in JAX: random crop with zero padding, horizontal flip, RandAugment, mixup and
CutMix.

Everything here is jittable and runs inside the train step on the sharded batch: `augment` vmaps one
per-example pipeline over the batch with one key per example (crop -> flip -> RandAugment ->
normalisation), so the augmentation of example i depends only on (key, i) and not on how the batch is
laid out over devices. Pixels stay on the [0, 255] scale until the final normalisation
(x / 255 - mean) / std with the dataset's channel statistics.

RandAugment follows Cubuk et al. 2020 ("RandAugment: Practical automated data augmentation with a
reduced search space"): `randaugment_layers` ops, each drawn uniformly per example from `OPS`, all at the
global magnitude M in 0..10 (level M / 10 scales each op's strength from none to its maximum, the sign of
the signed ops drawn at random). Mixup follows Zhang et al. 2018: one lambda ~ Beta(alpha, alpha) per
batch, each example mixed with its mirror in the batch. CutMix follows Yun et al. 2019 as DeiT trains
with it (timm's `Mixup`): one box per batch pasted from the mirror example, the labels mixed by the area
pasted; with both on, each batch takes one of the two with probability 1/2.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.scipy.ndimage import map_coordinates

from posattn.errors import ConfigError, check_field_types

# Strength of each op at level 1 (magnitude 10), the ranges of the RandAugment paper / timm.
_MAX_ENHANCE = 0.9  # brightness, contrast, sharpness: blend factor 1 +- 0.9
_MAX_TRANSLATE = 0.45  # fraction of the image side
_MAX_SHEAR = 0.3
_MAX_ROTATE_DEG = 30.0
_MAX_POSTERIZE_BITS = 4  # bits dropped: keep 8 .. 4 bits
_FILL = 128.0  # value of pixels that geometric ops bring in from outside the image


def _normalise(x_xHxWxC_255, info):
    mean = jnp.asarray(info.mean, jnp.float32)
    std = jnp.asarray(info.std, jnp.float32)
    return (x_xHxWxC_255.astype(jnp.float32) / 255.0 - mean) / std


def preprocess_eval(images_BxHxWxC, info):
    """uint8 images -> float32 normalised by the dataset's channel mean and std (no randomness)."""
    return _normalise(images_BxHxWxC, info)


# ------------------------------------------------------------------------------ crop and flip


def random_crop(key, image_HxWxC, padding: int):
    """A random H x W window of the image zero-padded by `padding` pixels on every side."""
    if padding == 0:
        return image_HxWxC
    h, w, c = image_HxWxC.shape
    padded = jnp.pad(image_HxWxC, ((padding, padding), (padding, padding), (0, 0)))
    dy, dx = jax.random.randint(key, (2,), 0, 2 * padding + 1)
    return jax.lax.dynamic_slice(padded, (dy, dx, 0), (h, w, c))


def random_flip(key, image_HxWxC):
    """The image mirrored left-right with probability 1/2."""
    return jnp.where(jax.random.bernoulli(key), image_HxWxC[:, ::-1], image_HxWxC)


# ------------------------------------------------------------------------------ RandAugment ops
# Each op maps (key, image_HxWxC float on [0, 255], level in [0, 1]) to an image on [0, 255].


def _signed(key, value):
    return jnp.where(jax.random.bernoulli(key), value, -value)


def _blend(degenerate, image, factor):
    """degenerate + factor * (image - degenerate), clipped: factor 1 is the identity (PIL ImageEnhance)."""
    return jnp.clip(degenerate + factor * (image - degenerate), 0.0, 255.0)


def _grayscale(image_HxWxC):
    if image_HxWxC.shape[-1] == 1:
        return image_HxWxC
    return (image_HxWxC @ jnp.array([0.299, 0.587, 0.114], image_HxWxC.dtype))[..., None]


def identity(key, image, level):
    del key, level
    return image


def brightness(key, image, level):
    return _blend(jnp.zeros_like(image), image, 1.0 + _signed(key, _MAX_ENHANCE * level))


def contrast(key, image, level):
    return _blend(jnp.mean(_grayscale(image)), image, 1.0 + _signed(key, _MAX_ENHANCE * level))


def sharpness(key, image, level):
    """Blend with the image smoothed by PIL's 3x3 kernel [[1,1,1],[1,5,1],[1,1,1]]/13 (borders kept)."""
    h, w, _ = image.shape
    # the 3x3 stencil as nine shifted slices: far cheaper than a vmapped convolution on CPU
    window_sum = sum(image[dy : h - 2 + dy, dx : w - 2 + dx] for dy in range(3) for dx in range(3))
    smooth = image.at[1:-1, 1:-1].set((window_sum + 4.0 * image[1:-1, 1:-1]) / 13.0)
    return _blend(smooth, image, 1.0 + _signed(key, _MAX_ENHANCE * level))


def posterize(key, image, level):
    """Keep the 8 - round(4 * level) most significant bits of each pixel."""
    del key
    step = 2.0 ** jnp.round(_MAX_POSTERIZE_BITS * level)
    return jnp.floor(image / step) * step


def solarize(key, image, level):
    """Invert the pixels at or above 256 * (1 - level)."""
    del key
    return jnp.where(image >= 256.0 * (1.0 - level), 255.0 - image, image)


def _affine(image_HxWxC, matrix_2x2, offset_2):
    """Output pixel (y, x) samples the input at matrix @ ((y, x) - centre) + centre + offset (bilinear)."""
    h, w, _ = image_HxWxC.shape
    centre = jnp.array([(h - 1) / 2.0, (w - 1) / 2.0])
    yx_2xHxW = jnp.stack(jnp.meshgrid(jnp.arange(h), jnp.arange(w), indexing="ij")).astype(
        jnp.float32
    )
    src_2xHxW = (
        jnp.einsum("ij,jhw->ihw", matrix_2x2, yx_2xHxW - centre[:, None, None])
        + (centre + offset_2)[:, None, None]
    )
    sample = lambda ch: map_coordinates(ch, list(src_2xHxW), order=1, mode="constant", cval=_FILL)
    return jax.vmap(sample, in_axes=-1, out_axes=-1)(image_HxWxC)


# The geometric ops are affine maps (matrix, offset) of the sampling grid. RandAugment picks the map
# first and resamples once, so a batch (where vmap turns the per-example choice into a select over all
# branches) pays for one bilinear gather per layer instead of one per geometric op.


def _translate_x_map(key, level, h, w):
    return jnp.eye(2), jnp.stack([0.0, _signed(key, _MAX_TRANSLATE * level * w)])


def _translate_y_map(key, level, h, w):
    return jnp.eye(2), jnp.stack([_signed(key, _MAX_TRANSLATE * level * h), 0.0])


def _shear_x_map(key, level, h, w):
    s = _signed(key, _MAX_SHEAR * level)
    return jnp.stack([jnp.stack([1.0, 0.0]), jnp.stack([s, 1.0])]), jnp.zeros(2)


def _shear_y_map(key, level, h, w):
    s = _signed(key, _MAX_SHEAR * level)
    return jnp.stack([jnp.stack([1.0, s]), jnp.stack([0.0, 1.0])]), jnp.zeros(2)


def _rotate_map(key, level, h, w):
    theta = jnp.deg2rad(_signed(key, _MAX_ROTATE_DEG * level))
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    return jnp.stack([jnp.stack([cos, -sin]), jnp.stack([sin, cos])]), jnp.zeros(2)


_AFFINE_MAPS = (_translate_x_map, _translate_y_map, _shear_x_map, _shear_y_map, _rotate_map)


def _geometric_op(affine_map):
    def op(key, image, level):
        return _affine(image, *affine_map(key, level, *image.shape[:2]))

    op.__name__ = affine_map.__name__[1 : -len("_map")]
    return op


translate_x, translate_y, shear_x, shear_y, rotate = (_geometric_op(m) for m in _AFFINE_MAPS)
_COLOUR_OPS = (identity, brightness, contrast, sharpness, posterize, solarize)
OPS = _COLOUR_OPS + (translate_x, translate_y, shear_x, shear_y, rotate)


def rand_augment(key, image_HxWxC, layers: int, magnitude: float):
    """`layers` ops drawn uniformly from OPS and applied in turn, each at level magnitude / 10.

    magnitude lies in [0, 10] (`Settings` checks it)."""
    level = magnitude / 10.0
    h, w, _ = image_HxWxC.shape
    maps = [functools.partial(m, level=level, h=h, w=w) for m in _AFFINE_MAPS]

    def geometric(key, image):  # op indices len(_COLOUR_OPS) .. len(OPS) - 1, one resampling
        which_key, op_key = jax.random.split(key)
        which = jax.random.randint(which_key, (), 0, len(maps))
        return _affine(image, *jax.lax.switch(which, maps, op_key))

    branches = [functools.partial(op, level=level) for op in _COLOUR_OPS] + [geometric]
    # weights make every op of OPS equally likely: a colour op is one branch, the geometric branch five
    logits = jnp.log(jnp.array([1.0] * len(_COLOUR_OPS) + [float(len(maps))]))
    for layer_key in jax.random.split(key, layers):
        choice_key, op_key = jax.random.split(layer_key)
        branch = jax.random.categorical(choice_key, logits)
        image_HxWxC = jax.lax.switch(branch, branches, op_key, image_HxWxC)
    return image_HxWxC


# ------------------------------------------------------------------------------ the pipeline


@dataclasses.dataclass(frozen=True)
class Settings:
    """The training augmentation of a run, checked once, at construction.

    crop_padding (0 = no crop), flip, randaugment_layers (0 = off), randaugment_magnitude (in [0, 10]
    when RandAugment is on), mixup_alpha and cutmix_alpha (0 = off); all non-negative, each of its
    field's type (no fractional count, no NaN, flip True or False: a config's "auto" values are
    `setup.resolve_augment`'s).
    """

    # Settings() augments nothing: these are not the schema's defaults (vision.config.base_config),
    # whose crop_padding -1 and flip None are "auto" values that only `setup.resolve_augment` can make
    # numbers (they depend on the dataset and the image side); a run's settings come from its config.
    crop_padding: int = 0
    flip: bool = False
    randaugment_layers: int = 0
    randaugment_magnitude: float = 0
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0

    def __post_init__(self):
        check_field_types(self)
        if min(self.crop_padding, self.randaugment_layers, self.mixup_alpha, self.cutmix_alpha) < 0:
            raise ConfigError(
                f"augment.crop_padding ({self.crop_padding}), augment.randaugment_layers "
                f"({self.randaugment_layers}), augment.mixup_alpha ({self.mixup_alpha}) and "
                f"augment.cutmix_alpha ({self.cutmix_alpha}) must be non-negative"
            )
        if self.randaugment_layers and not 0 <= self.randaugment_magnitude <= 10:
            raise ConfigError(
                f"augment.randaugment_magnitude must lie in [0, 10], got "
                f"{self.randaugment_magnitude}"
            )

    @classmethod
    def from_config(cls, aug_cfg) -> "Settings":
        """The settings of a config's `augment` fields, its "auto" values resolved (every field)."""
        return cls(**{f.name: aug_cfg[f.name] for f in dataclasses.fields(cls)})


def augment(key, images_uint8_BxHxWxC, settings: Settings, info):
    """Training augmentation of a uint8 batch -> float32 normalised images, one key per example."""

    def one(key_i, image_HxWxC):
        crop_key, flip_key, ra_key = jax.random.split(key_i, 3)
        x = random_crop(crop_key, image_HxWxC.astype(jnp.float32), settings.crop_padding)
        if settings.flip:
            x = random_flip(flip_key, x)
        if settings.randaugment_layers:
            x = rand_augment(ra_key, x, settings.randaugment_layers, settings.randaugment_magnitude)
        return x

    keys = jax.random.split(key, images_uint8_BxHxWxC.shape[0])
    return _normalise(jax.vmap(one)(keys, images_uint8_BxHxWxC), info)


def mixup(key, images_BxHxWxC, labels_onehot_BxK, alpha: float):
    """Mixup (Zhang et al. 2018): lam ~ Beta(alpha, alpha), x <- lam x + (1 - lam) x[::-1], same for y.

    One lambda for the batch; example i is mixed with example B-1-i. alpha <= 0 returns the inputs.
    """
    if alpha <= 0:
        return images_BxHxWxC, labels_onehot_BxK
    lam = jax.random.beta(key, alpha, alpha)
    mix = lambda a: (lam * a + (1.0 - lam) * a[::-1]).astype(a.dtype)
    return mix(images_BxHxWxC), mix(labels_onehot_BxK)


def cutmix(key, images_BxHxWxC, labels_onehot_BxK, alpha: float):
    """CutMix (Yun et al. 2019, Algorithm A1): lam ~ Beta(alpha, alpha); a box of sides sqrt(1 - lam) of
    the image's, its centre uniform over the image and its edges clipped at the border, is pasted from
    example B-1-i into example i; the labels are mixed by the area actually pasted (timm's correction for
    a clipped box): y <- (1 - a) y + a y[::-1]. One box per batch. alpha <= 0 returns the inputs."""
    if alpha <= 0:
        return images_BxHxWxC, labels_onehot_BxK
    lam_key, y_key, x_key = jax.random.split(key, 3)
    h, w = images_BxHxWxC.shape[1:3]
    cut = jnp.sqrt(1.0 - jax.random.beta(lam_key, alpha, alpha))
    half_h, half_w = (cut * h).astype(jnp.int32) // 2, (cut * w).astype(jnp.int32) // 2
    cy, cx = jax.random.randint(y_key, (), 0, h), jax.random.randint(x_key, (), 0, w)
    rows, cols = jnp.arange(h)[:, None], jnp.arange(w)[None, :]
    box_HxW = (
        (rows >= cy - half_h) & (rows < cy + half_h) & (cols >= cx - half_w) & (cols < cx + half_w)
    )
    area = box_HxW.mean()
    images = jnp.where(box_HxW[None, :, :, None], images_BxHxWxC[::-1], images_BxHxWxC)
    labels = ((1.0 - area) * labels_onehot_BxK + area * labels_onehot_BxK[::-1]).astype(
        labels_onehot_BxK.dtype
    )
    return images, labels


def mix_batch(key, images_BxHxWxC, labels_onehot_BxK, settings: Settings):
    """The batch-level mixing of `settings`: mixup, CutMix, or with both on one of the two per batch with
    probability 1/2 (timm's `switch_prob` 0.5, as DeiT trains); the inputs where both are off. With CutMix
    off it is `mixup` with this key (runs from before CutMix draw the same batches)."""
    if settings.cutmix_alpha <= 0:
        return mixup(key, images_BxHxWxC, labels_onehot_BxK, settings.mixup_alpha)
    if settings.mixup_alpha <= 0:
        return cutmix(key, images_BxHxWxC, labels_onehot_BxK, settings.cutmix_alpha)
    switch_key, key = jax.random.split(key)
    return jax.lax.cond(
        jax.random.bernoulli(switch_key),
        lambda: cutmix(key, images_BxHxWxC, labels_onehot_BxK, settings.cutmix_alpha),
        lambda: mixup(key, images_BxHxWxC, labels_onehot_BxK, settings.mixup_alpha),
    )
