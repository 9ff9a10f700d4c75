"""ImageNet's training crop at decode time: the Inception-style random-resized crop of the full image.

`random_resized_crop` is big_vision's `decode_jpeg_and_inception_crop` (pp/ops_image.py: area 5% to
100%, aspect ratio 0.75 to 1.33, here 3/4 to 4/3 as torchvision's and timm's, a difference of 0.003
at the top; no minimum object covered, the whole image where no box is found),
which samples its box with TensorFlow's `sample_distorted_bounding_box`; `sample_box` follows that op's
kernel (tensorflow/core/kernels/image/sample_distorted_bounding_box_op.cc) step by step, with numpy's
generator for TF's Philox:

  for up to `max_attempts` (100) attempts:
    aspect ratio r = w / h uniform in [aspect[0], aspect[1]]  (linear, not log-uniform);
    h_min = round(sqrt(area[0] H W / r)), h_max = round(sqrt(area[1] H W / r)), lowered until
    round(h_max r) <= W and to at most H;
    h uniform among the integers [min(h_min, h_max), h_max], w = round(h r) (round half to even);
    one row up if h w falls below area[0] H W, then one down if above area[1] H W; if the box still
    breaks the area or the image, the attempt fails;
    top uniform in [0, H - h), left in [0, W - w) (0 where the box spans the side: TF never takes
    the last offset);
  after `max_attempts` failures, the whole image.

TF computes in float32 where this computes in float64: a draw at a rounding boundary may differ by one
pixel. Checked once against TF 2.21's stateless op (2026-11-29, 16,000 draws each on 224 x 224 and
180 x 300 images, 4,000 on 375 x 500 and 500 x 333): area, aspect ratio and offsets agree in
distribution (two-sample KS statistics at most 0.014 at 16,000), and TF never takes the last offset. The box is then resized to size x size with PIL's bilinear filter, antialiased where it shrinks
(big_vision's default is tf.image.resize bilinear without antialias; with antialias=True, as its
docstring advises for new configs, the two agree in kind). Evaluation keeps resize-then-centre-crop
(`split.resize_and_center_crop`).

`read_cropped(split, indices_N, entropy_NxK, size)` crops examples of a split through its `original`
(full-resolution) images, example n with `np.random.default_rng(entropy[n])`: its crop depends only on
its own entropy row, whichever batch, worker or process reads it.
"""

from __future__ import annotations

import math

import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data.split import Split

# big_vision's decode_jpeg_and_inception_crop defaults (area_min=5, area_max=100 percent; ratio_min=0.75,
# ratio_max=1.33, here 4/3) and TF's sample_distorted_bounding_box default max_attempts
AREA = (0.05, 1.0)
ASPECT = (3 / 4, 4 / 3)
MAX_ATTEMPTS = 100


def _check_ranges(area, aspect) -> None:
    if not (0 < area[0] <= area[1] <= 1):
        raise ConfigError(
            f"area={tuple(area)} must satisfy 0 < low <= high <= 1 (of the image's area)"
        )
    if not (0 < aspect[0] <= aspect[1]):
        raise ConfigError(f"aspect={tuple(aspect)} must satisfy 0 < low <= high (width / height)")


def _box_for(H: int, W: int, r: float, area, rng) -> tuple[int, int, int, int] | None:
    """One attempt of TF's GenerateRandomCrop at aspect ratio r: (top, left, h, w), or None."""
    min_area, max_area = area[0] * W * H, area[1] * W * H
    h = round(math.sqrt(min_area / r))
    h_max = round(math.sqrt(max_area / r))
    if round(h_max * r) > W:  # the largest h_max with round(h_max r) <= W
        h_max = int((W + 0.5 - 1e-7) / r)
        if round(h_max * r) > W:
            h_max -= 1
    h_max = min(h_max, H)
    h = min(h, h_max)
    if h < h_max:
        h += int(rng.integers(h_max - h + 1))
    w = round(h * r)
    if w * h < min_area:  # rounding: one row bigger, then one smaller
        h += 1
        w = round(h * r)
    if w * h > max_area:
        h -= 1
        w = round(h * r)
    if w * h < min_area or w * h > max_area or w > W or h > H or w <= 0 or h <= 0:
        return None
    top = int(rng.integers(H - h)) if h < H else 0
    left = int(rng.integers(W - w)) if w < W else 0
    return top, left, h, w


def sample_box(
    H: int,
    W: int,
    rng: np.random.Generator,
    *,
    area=AREA,
    aspect=ASPECT,
    max_attempts: int = MAX_ATTEMPTS,
) -> tuple[int, int, int, int]:
    """The crop box (top, left, h, w) of an H x W image, as TF's sample_distorted_bounding_box draws it
    (the module's docstring): relative area in `area`, aspect ratio w / h in `aspect`, the whole image
    after `max_attempts` failed attempts."""
    _check_ranges(area, aspect)
    for _ in range(max_attempts):
        r = aspect[0] + (aspect[1] - aspect[0]) * float(rng.random())
        box = _box_for(H, W, r, area, rng)
        if box is not None:
            return box
    return 0, 0, H, W


def _resize_square(image_HxWxC: np.ndarray, size: int) -> np.ndarray:
    """`image` resized to size x size (PIL bilinear, antialiased where it shrinks), uint8 (H, W, C)."""
    from PIL import Image

    h, w, c = image_HxWxC.shape
    if (h, w) == (size, size):
        return np.ascontiguousarray(image_HxWxC)
    pil = Image.fromarray(np.ascontiguousarray(image_HxWxC[..., 0] if c == 1 else image_HxWxC))
    return np.asarray(pil.resize((size, size), Image.BILINEAR)).reshape(size, size, c)


def random_resized_crop(
    image_HxWxC: np.ndarray,
    rng: np.random.Generator,
    size: int,
    *,
    area=AREA,
    aspect=ASPECT,
    max_attempts: int = MAX_ATTEMPTS,
) -> np.ndarray:
    """The Inception crop of a uint8 (H, W, C) image: a box of `sample_box`, resized to size x size
    (uint8 (size, size, C))."""
    image_HxWxC = np.asarray(image_HxWxC)
    if image_HxWxC.dtype != np.uint8 or image_HxWxC.ndim != 3:
        raise ConfigError(
            f"an image of dtype {image_HxWxC.dtype} and shape {image_HxWxC.shape}: crop uint8 (H, W, C)"
        )
    if not (isinstance(size, (int, np.integer)) and size > 0):
        raise ConfigError(f"size={size!r} must be a positive side length")
    H, W, _ = image_HxWxC.shape
    top, left, h, w = sample_box(H, W, rng, area=area, aspect=aspect, max_attempts=max_attempts)
    return _resize_square(image_HxWxC[top : top + h, left : left + w], size)


def read_cropped(
    split: Split,
    indices_N,
    entropy_NxK,
    size: int,
    *,
    area=AREA,
    aspect=ASPECT,
) -> tuple[np.ndarray, np.ndarray]:
    """Examples `indices_N` of `split`, each its full-resolution image (`split.original`) cropped by
    `random_resized_crop` with `np.random.default_rng(entropy_NxK[n].tolist())`: (images_NxSxSxC uint8,
    labels_N int32). ConfigError where the split cannot give full-resolution images."""
    if split.original is None:
        raise ConfigError(
            "this split cannot give its images at full resolution (Split.original is None): the "
            "Inception crop needs a records dataset, a tfds dataset read by index, or an in-memory one"
        )
    indices_N = np.asarray(indices_N, dtype=np.int64).reshape(-1)
    entropy_NxK = np.asarray(entropy_NxK)
    if entropy_NxK.ndim != 2 or len(entropy_NxK) != len(indices_N):
        raise ConfigError(
            f"entropy of shape {entropy_NxK.shape}: give one row of integers per index ({len(indices_N)})"
        )
    if not np.issubdtype(entropy_NxK.dtype, np.integer) or (entropy_NxK < 0).any():
        raise ConfigError(
            f"entropy of dtype {entropy_NxK.dtype}: give non-negative integers (a seed sequence's)"
        )
    images = np.empty((len(indices_N), size, size, split.image_shape[-1]), np.uint8)
    labels = np.empty(len(indices_N), np.int32)
    for n, index in enumerate(indices_N):
        image, labels[n] = split.original(int(index))
        rng = np.random.default_rng(entropy_NxK[n].tolist())
        images[n] = random_resized_crop(image, rng, size, area=area, aspect=aspect)
    return images, labels
