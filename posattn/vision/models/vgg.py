"""CIFAR VGG-16 with batch norm (Simonyan & Zisserman 2015; the CIFAR form of JSL22 Figure 5's baseline).

13 conv3x3 (with bias) + BN + ReLU layers in five stages of 64, 128, 256, 512, 512 channels, a 2x2
max-pool after each stage, global average pooling and one 512 -> num_classes linear layer: 14,728,266
parameters for 10 classes. On 32x32 images the last pool leaves 1x1, where the average pool is the usual
flatten. On smaller images (the 8x8 digits) a pool is skipped once the feature map is 1 pixel, so the
spatial size never drops below 1 and the parameter count does not depend on the image size.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from posattn.vision.models.checks import check_classifier_fields, check_images
from posattn.vision.models.resnet import batch_norm, scale_width
from posattn.vision.models.sown import INTERMEDIATES, STEM, block_feature

# Channels per conv layer; "M" is a 2x2 max-pool.
VGG16_LAYERS = (
    64,
    64,
    "M",
    128,
    128,
    "M",
    256,
    256,
    256,
    "M",
    512,
    512,
    512,
    "M",
    512,
    512,
    512,
    "M",
)

_CONV_INIT = nn.initializers.variance_scaling(2.0, "fan_out", "normal")


class VGG16(nn.Module):
    """CIFAR VGG-16-BN; logits are float32 whatever the compute dtype.

    Sows "stem", the first conv layer (after BN and ReLU), and "block_{i:02d}/conv" for each later conv
    layer (i = 0..11, after BN and ReLU, before a following max-pool), as (B, h, w, C) maps.
    """

    num_classes: int
    dropout: float = 0.0
    dtype: Any = jnp.float32
    layers: tuple[int | str, ...] = VGG16_LAYERS
    channels: int | None = None  # of the images it takes (None: any); `create_model` sets it

    def __post_init__(self):
        check_classifier_fields(self.num_classes, self.dropout)
        super().__post_init__()

    @nn.compact
    def __call__(self, images_BxHxWxC: jax.Array, train: bool = False) -> jax.Array:
        check_images(images_BxHxWxC, self.channels)
        x = images_BxHxWxC
        conv_index = 0
        for layer in self.layers:
            if layer == "M":
                # Static shapes: the skip is decided at trace time.
                if min(x.shape[1:3]) >= 2:
                    x = nn.max_pool(x, (2, 2), strides=(2, 2))
                continue
            conv_index += 1
            x = nn.Conv(
                layer,
                (3, 3),
                padding=1,
                dtype=self.dtype,
                kernel_init=_CONV_INIT,
                name=f"conv{conv_index}",
            )(x)
            x = nn.relu(batch_norm(train, self.dtype, f"bn{conv_index}")(x))
            self.sow(
                INTERMEDIATES, STEM if conv_index == 1 else block_feature(conv_index - 2, "conv"), x
            )
        feat_BxC = x.astype(jnp.float32).mean(axis=(1, 2))
        feat_BxC = nn.Dropout(self.dropout, deterministic=not train)(feat_BxC)
        return nn.Dense(self.num_classes, dtype=jnp.float32, name="head")(feat_BxC)


def build(fields, *, num_classes: int, image_size: int, channels: int, dtype) -> VGG16:
    """The `MODELS` constructor: a VGG-16-BN from the config's model fields (it runs on any image size);
    `width` sets the channels of the first stage (0: 64), the others scale with it."""
    del image_size
    return VGG16(
        num_classes=num_classes,
        dropout=float(fields["dropout"]),
        dtype=dtype,
        channels=channels,
        layers=scale_width(fields["width"], VGG16_LAYERS),
    )
