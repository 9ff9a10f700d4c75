"""Checks of the fields every classifier has, run when a model is constructed (however it is built)."""

import numbers

from posattn.errors import ConfigError


def check_classifier_fields(num_classes: int, dropout: float) -> None:
    """ConfigError unless num_classes is an integer >= 1 and 0 <= dropout < 1."""
    if (
        isinstance(num_classes, bool)
        or not isinstance(num_classes, numbers.Integral)
        or num_classes < 1
    ):
        raise ConfigError(f"num_classes must be a positive integer, got {num_classes!r}")
    if not 0.0 <= float(dropout) < 1.0:
        raise ConfigError(f"model.dropout must be in [0, 1), got {dropout}")


def check_images(
    images_BxHxWxC, channels: int | None, image_hw: tuple[int, int] | None = None
) -> None:
    """ConfigError (one line) unless `images_BxHxWxC` is a (batch, height, width, channels) batch with the
    `channels` (and the `image_hw`) the model was built for; None checks nothing. Called at trace time,
    before the first layer, whose parameters would otherwise fail with flax's shape error."""
    shape = tuple(images_BxHxWxC.shape)
    if len(shape) != 4:
        raise ConfigError(
            f"images of shape {shape}: the model takes a (batch, height, width, channels) batch"
        )
    if channels is not None and shape[3] != channels:
        raise ConfigError(
            f"images of shape {shape} have {shape[3]} channels, the model was built for "
            f"{channels}: convert the images, or build the model with channels={shape[3]}"
        )
    if image_hw is not None and shape[1:3] != tuple(image_hw):
        raise ConfigError(
            f"images of shape {shape} are {shape[1]} x {shape[2]}, the model was built for "
            f"{image_hw[0]} x {image_hw[1]}: resize the images, or build the model with "
            f"image_size={shape[1]}"
        )
