"""Pixel-block permutation of JSL22 Figure 5: every train and test image has its g x g pixel blocks
shuffled by one fixed random permutation (the same for every image and every seed).

`BlockPermutation` is the permutation a config asks for, built once per run; `permute_blocks` applies a
permutation and `unpermute_blocks` undoes it, on numpy and jax arrays alike.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from posattn.errors import ConfigError


def block_permutation(image_hw: tuple[int, int], g: int, seed: int) -> np.ndarray:
    """The fixed permutation of the (H/g)*(W/g) pixel blocks of side g, drawn from `seed`.

    Blocks are numbered row-major; g must divide H and W (g = H = W gives the one-block identity).
    """
    h, w = image_hw
    if g <= 0 or h % g or w % g:
        raise ConfigError(
            f"permute_block={g} must be a positive divisor of the image sides {h} and {w} "
            "(or 0 for no permutation)"
        )
    return np.random.default_rng(seed).permutation((h // g) * (w // g))


def _blocks(x, g: int):
    """(..., H, W, C) -> (..., nH*nW, g, g, C), blocks row-major."""
    *lead, h, w, c = x.shape
    x = x.reshape(*lead, h // g, g, w // g, g, c).swapaxes(-4, -3)
    return x.reshape(*lead, (h // g) * (w // g), g, g, c)


def _unblocks(x, h: int, w: int):
    """Inverse of `_blocks`."""
    *lead, _, g, _, c = x.shape
    x = x.reshape(*lead, h // g, w // g, g, g, c).swapaxes(-4, -3)
    return x.reshape(*lead, h, w, c)


def permute_blocks(images_xHxWxC, g: int, perm):
    """Block k of the output is block perm[k] of the input (blocks of g x g pixels, row-major).

    Works on numpy and jax arrays with any leading axes. The same `perm` acts on any grid with the same
    number of blocks: on a map over the patches of side p (e.g. positional-embedding similarities,
    shape (H/p, W/p, D)), pass g/p.
    """
    h, w = images_xHxWxC.shape[-3:-1]
    return _unblocks(_blocks(images_xHxWxC, g)[..., perm, :, :, :], h, w)


def unpermute_blocks(images_xHxWxC, g: int, perm):
    """Inverse of `permute_blocks`: unpermute_blocks(permute_blocks(x, g, perm), g, perm) == x."""
    return permute_blocks(images_xHxWxC, g, np.argsort(perm))


@dataclasses.dataclass(frozen=True, eq=False)
class BlockPermutation:
    """The block permutation of a run, as a function on (numpy or jax) image batches.

    g = 0 is the identity (no permutation); `perm` is None then.
    """

    g: int
    perm: np.ndarray | None

    @classmethod
    def of(cls, image_hw: tuple[int, int], g: int, seed: int) -> "BlockPermutation":
        """The permutation of blocks of side g (0: none); ConfigError if g does not divide the image or
        the seed is negative."""
        if g and seed < 0:
            raise ConfigError(f"permute_seed={seed} must be >= 0")
        return cls(g, block_permutation(image_hw, g, seed) if g else None)

    def __call__(self, images_xHxWxC):
        return images_xHxWxC if not self.g else permute_blocks(images_xHxWxC, self.g, self.perm)
