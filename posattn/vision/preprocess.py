"""What a run does to a batch of natural images before its model, as a function a loaded run carries
(`posattn.vision.runs.load_run`, `posattn.vision.setup.Setup.preprocess`): `Preprocess`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data import arrays, augment, datasets
from posattn.vision.data.permutation import BlockPermutation


@dataclasses.dataclass(frozen=True)
class Preprocess:
    """A run's inputs from natural images of its dataset's shape: pixel blocks permuted as the run's were
    (JSL22 Figure 5; the identity for an unpermuted run), then normalised by the run's channel
    statistics, (x / 255 - mean) / std on the 0..255 levels; numpy or jax arrays, float32 out.

    Images on the scale the run's were given on (`info.pixels`): a "uint8" run takes pixels 0..255
    (uint8, or integers or floats in [0, 255]), a "float" run (`arrays.from_arrays` of floats) floats in
    [0, 1], rounded to its 256 levels as training's were. A batch (B, H, W, C), or (B, H, W) for a
    one-channel run. ConfigError (one line) for another shape, NaN or inf, pixels off the run's scale,
    and floats in [0, 1] given to a "uint8" run (or pixels 0..255 to a "float" run): read on the other
    scale they would be near-black or saturated inputs (checked where the values are concrete, not in
    a traced call).

    `info` is the run's `DatasetInfo` (classes, image shape, statistics, pixel scale).
    """

    info: datasets.DatasetInfo
    permutation: BlockPermutation

    def __call__(self, images_BxHxWxC):
        if self.info.mean is None:
            raise ConfigError(
                f"the run records no channel statistics (its run.json predates them) and its "
                f"dataset {self.info.name} is not available to compute them"
            )
        images_BxHxWxC = self._batch(images_BxHxWxC)
        return augment.preprocess_eval(self.permutation(self._levels(images_BxHxWxC)), self.info)

    def _batch(self, images):
        """`images` as a (B, H, W, C) batch of the run's shape, a one-channel (B, H, W) given its axis."""
        want, shape = tuple(self.info.image_shape), tuple(images.shape)
        if len(shape) == 3 and want[2] == 1 and shape[1:] == want[:2]:
            return images[..., None]  # (documented: a one-channel run's grayscale batch)
        if shape[1:] == want:
            return images
        if shape == want:
            hint = "one image: add the batch axis, images[None]"
        elif len(shape) == 4 and shape[1:3] == want[:2]:
            hint = f"{shape[3]} channels where the run has {want[2]}: convert them"
        elif len(shape) == 4:
            hint = "resize them with datasets.resize_and_center_crop"
        else:
            hint = f"give a (B, {', '.join(map(str, want))}) batch" + (
                f" or (B, {want[0]}, {want[1]})" if want[2] == 1 else ""
            )
        raise ConfigError(
            f"images of shape {shape}: the run takes batches (B, H, W, C) of {want}; {hint}"
        )

    def _levels(self, images):
        """The images on the 0..255 scale the statistics normalise: a "float" run's rounded to its levels
        as `arrays.from_arrays` did; a "uint8" run's as given. The scale checked where concrete."""
        scale = self.info.pixels
        if isinstance(images, jax.core.Tracer):  # traced: no values to check
            return jnp.round(images * 255.0) if scale == "float" else images
        x = np.asarray(images)
        if scale == "float":
            if not np.issubdtype(x.dtype, np.floating):
                raise ConfigError(
                    f"images of dtype {x.dtype}: the run was trained on float pixels in [0, 1] "
                    "(arrays.from_arrays): give them as such, e.g. images / 255"
                )
            return arrays.pixel_levels(x, "images")[0]
        if x.dtype == np.uint8:
            return images
        if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
            raise ConfigError(f"images of dtype {x.dtype}: the run takes pixels 0..255 (uint8)")
        if not np.isfinite(x).all():
            raise ConfigError("images hold NaN or infinite values: give pixels 0..255 (uint8)")
        low, high = (float(x.min()), float(x.max())) if x.size else (0.0, 0.0)
        if low < 0 or high > 255 or (np.issubdtype(x.dtype, np.floating) and 0 < high <= 1):
            raise ConfigError(
                f"images in [{low}, {high}]: the run was trained on pixels 0..255 (uint8); "
                "give them on that scale (e.g. np.round(images * 255).astype(np.uint8) for "
                "floats in [0, 1])"
            )
        return images
