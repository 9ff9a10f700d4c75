"""CIFAR ResNet-18 (He et al. 2016, in the CIFAR form used by JSL22 Figure 5's baseline).

A 3x3 stem with no max-pool, four stages of two BasicBlocks with 64-128-256-512 channels (stride 2 at
the start of stages 2-4), batch norm, global average pooling and one linear layer: 11,173,962 parameters
for 10 classes. Convolutions have explicit padding 1, so an odd or 1-pixel feature map still halves to
ceil(size / 2) and never below 1: the network runs on any image size (the 8x8 digits end at 1x1).
`model.width` w scales every stage's channels by w / 64 (e.g. 16: 16-32-64-128, about 1/16 of the
parameters and FLOPs), for CPU-sized runs. `stem="imagenet"` replaces the 3x3 stem by the ImageNet
ResNet's (He et al. 2016, and timm's `ResNet`): a 7x7 stride-2 convolution (padding 3), batch norm, ReLU
and a 3x3 stride-2 max-pool (padding 1), which a ResNet imported from timm needs
(`posattn.vision.timm_import`).
"""

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from posattn.errors import ConfigError, check_choice
from posattn.vision.models.checks import check_classifier_fields, check_images
from posattn.vision.models.sown import INTERMEDIATES, STEM, block_feature

# He initialisation (fan-out), the usual choice for ReLU networks with batch norm.
_CONV_INIT = nn.initializers.variance_scaling(2.0, "fan_out", "normal")
STEMS = ("cifar", "imagenet")


def block_conv(features: int, k: int, strides: int, name: str, *, dtype: Any) -> nn.Conv:
    """The k x k convolution of a residual block: no bias, "same" padding, He (fan-out) initialisation."""
    return nn.Conv(
        features,
        (k, k),
        strides=(strides, strides),
        padding=k // 2,
        use_bias=False,
        dtype=dtype,
        kernel_init=_CONV_INIT,
        name=name,
    )


def batch_norm(train: bool, dtype: Any, name: str) -> nn.BatchNorm:
    """Batch norm with PyTorch's defaults (running-average momentum 0.1, eps 1e-5).

    Under a data-parallel `jax.jit` the batch is one global array, so the statistics are those of the
    global batch without any cross-device axis name.
    """
    return nn.BatchNorm(
        use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=dtype, name=name
    )


class BasicBlock(nn.Module):
    """relu(BN(conv3x3(relu(BN(conv3x3(x))))) + shortcut(x)); the shortcut is 1x1 conv + BN on a change."""

    features: int
    strides: int = 1
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x_BxHxWxC: jax.Array, train: bool) -> jax.Array:
        conv = functools.partial(block_conv, self.features, dtype=self.dtype)
        y = conv(3, self.strides, "conv1")(x_BxHxWxC)
        y = nn.relu(batch_norm(train, self.dtype, "bn1")(y))
        y = conv(3, 1, "conv2")(y)
        y = batch_norm(train, self.dtype, "bn2")(y)
        shortcut = x_BxHxWxC
        if self.strides != 1 or x_BxHxWxC.shape[-1] != self.features:
            shortcut = conv(1, self.strides, "shortcut_conv")(x_BxHxWxC)
            shortcut = batch_norm(train, self.dtype, "shortcut_bn")(shortcut)
        return nn.relu(y + shortcut)


class ResNet18(nn.Module):
    """CIFAR ResNet-18; logits are float32 whatever the compute dtype.

    Sows "stem" (after the stem's BN and ReLU, and max-pool for the ImageNet stem) and
    "block_{i:02d}/conv", the output of the i-th BasicBlock in forward order (i = 0..7), as (B, h, w, C)
    maps.
    """

    num_classes: int
    dropout: float = 0.0
    dtype: Any = jnp.float32
    stage_features: tuple[int, ...] = (64, 128, 256, 512)
    blocks_per_stage: int = 2
    channels: int | None = None  # of the images it takes (None: any); `create_model` sets it
    stem: str = "cifar"  # STEMS (module docstring)

    def __post_init__(self):
        check_classifier_fields(self.num_classes, self.dropout)
        check_choice(self.stem, STEMS, "ResNet stem")
        super().__post_init__()

    @nn.compact
    def __call__(self, images_BxHxWxC: jax.Array, train: bool = False) -> jax.Array:
        check_images(images_BxHxWxC, self.channels)
        k, s = (3, 1) if self.stem == "cifar" else (7, 2)
        x = nn.Conv(
            self.stage_features[0],
            (k, k),
            strides=(s, s),
            padding=k // 2,
            use_bias=False,
            dtype=self.dtype,
            kernel_init=_CONV_INIT,
            name="stem_conv",
        )(images_BxHxWxC)
        x = nn.relu(batch_norm(train, self.dtype, "stem_bn")(x))
        if self.stem == "imagenet":
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        self.sow(INTERMEDIATES, STEM, x)
        index = 0
        for stage, features in enumerate(self.stage_features):
            for block in range(self.blocks_per_stage):
                strides = 2 if stage > 0 and block == 0 else 1
                x = BasicBlock(
                    features, strides, self.dtype, name=f"stage{stage + 1}_block{block + 1}"
                )(x, train)
                self.sow(INTERMEDIATES, block_feature(index, "conv"), x)
                index += 1
        feat_BxC = x.astype(jnp.float32).mean(axis=(1, 2))
        feat_BxC = nn.Dropout(self.dropout, deterministic=not train)(feat_BxC)
        return nn.Dense(self.num_classes, dtype=jnp.float32, name="head")(feat_BxC)


def scale_width(width, layers: tuple) -> tuple:
    """A CNN's channels per stage or layer (`layers`, "M" entries kept) for `model.width` w: the published
    ones, whose first is 64, scaled by w / 64 (0: the published); ConfigError for a negative w."""
    if int(width) < 0:
        raise ConfigError(
            f"model.width={width} must be 0 (the published 64) or a positive number of "
            "channels of the first stage (the later stages scale with it)"
        )
    return tuple(c if c == "M" or not width else c * int(width) // 64 for c in layers)


def build(fields, *, num_classes: int, image_size: int, channels: int, dtype) -> ResNet18:
    """The `MODELS` constructor: a ResNet-18 from the config's model fields (it runs on any image size);
    `width` sets the channels of the first stage (0: 64)."""
    del image_size
    return ResNet18(
        num_classes=num_classes,
        dropout=float(fields["dropout"]),
        dtype=dtype,
        channels=channels,
        stage_features=scale_width(fields["width"], ResNet18.stage_features),
    )
