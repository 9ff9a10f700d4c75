"""A model under measurement: the protocol by which any image classifier runs through the tools of
`posattn.analysis` (PK22's Fourier profile, feature variance, frequency noise, Hessian spectrum and loss
landscape; JSL22's Fig. 1a positional-embedding maps).

A `Subject` is a function and its parameters:

    apply(params, images_BxHxWxC) -> (logits_BxK, {name: feature})

one evaluation pass (no dropout; batch norm with its running statistics, bound into `apply`), pure,
jittable and differentiable in `params`. A feature is a (B, h, w, C) map or (B, N, D) tokens of the patch
grid, prefix tokens (CLS) left out, N = h * w; the dict's order is the forward order the figures draw.
`params` is the pytree the Hessian differentiates and the landscape moves (flax: variables["params"]);
its leaves' names decide how the landscape normalises and which tensors it keeps still
(`posattn.analysis.landscape.output_axes`: flax's "kernel" layouts; "bias", "scale" and
"pos_embedding" stay still). For the positional-embedding maps a Subject also says where P lives
(`pos_embedding`, a "/"-path into `params`, rows prefix tokens first, then the patches row-major) and
how many prefix rows it has.

posattn's own models are one instance (`of_model`); a timm checkpoint imported by
`posattn.vision.timm_import` is another; docs/how_vits_work.md, "Your own model", shows a user's.
`as_module` lets the study's driver (`posattn.papers.pk22.suite.measure`) take any Subject.
"""

import collections
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax

from posattn.analysis import posemb
from posattn.errors import ConfigError
from posattn.vision import models
from posattn.vision.models.sown import INTERMEDIATES
from posattn.vision.models.vit import ViT

ApplyFn = Callable[[Any, jax.Array], tuple[jax.Array, dict[str, jax.Array]]]


@dataclasses.dataclass(frozen=True)
class Subject:
    """A model under measurement (module docstring): `apply`, `params`, and for token features and P
    the patch grid `grid_hw` (None: square), P's "/"-path in params (None: the model has none) and
    its `prefix_tokens` rows before the patches."""

    apply: ApplyFn
    params: Any
    grid_hw: tuple[int, int] | None = None
    pos_embedding: str | None = None
    prefix_tokens: int = 0

    def __post_init__(self):
        if not callable(self.apply):
            raise ConfigError(
                f"Subject.apply={self.apply!r} must be a function (params, images) -> "
                "(logits, {name: feature})"
            )
        if self.grid_hw is not None and (len(self.grid_hw) != 2 or min(self.grid_hw) < 1):
            raise ConfigError(
                f"Subject.grid_hw={self.grid_hw!r} must be (h, w) of the patch grid, both >= 1"
            )
        if int(self.prefix_tokens) < 0:
            raise ConfigError(f"Subject.prefix_tokens={self.prefix_tokens} must be >= 0")


def _grid(n: int, grid_hw, what: str) -> tuple[int, int]:
    """(h, w) of n patches: `grid_hw`, or the square grid."""
    h, w = grid_hw if grid_hw is not None else (math.isqrt(n), math.isqrt(n))
    if h * w != n:
        expected = "a square number" if grid_hw is None else f"{h} x {w}"
        raise ConfigError(
            f"{what} has {n} patch tokens, not {expected}: set Subject.grid_hw to the patch "
            "grid (h, w), and leave prefix tokens (CLS) out"
        )
    return h, w


def _as_map(name: str, z, grid_hw=None) -> jax.Array:
    """A feature as the tools take it: (B, h, w, C) maps as they are, (B, N, D) tokens on the h x w grid."""
    if z.ndim == 4:
        return z
    if z.ndim == 3:
        B, N, D = z.shape
        return z.reshape(B, *_grid(N, grid_hw, f"feature {name!r}"), D)
    raise ConfigError(
        f"feature {name!r} has shape {tuple(z.shape)}: give (B, h, w, C) maps or (B, N, D) "
        "tokens of the patch grid"
    )


def logits_and_features(subject: Subject, params, images_BxHxWxC):
    """(logits_BxK, {name: (B, h, w, C)} in the subject's order) of `params` on `images`; jittable."""
    logits, feats = subject.apply(params, images_BxHxWxC)
    # an OrderedDict: jax.jit returns a plain dict with its keys sorted, an OrderedDict in order
    return logits, collections.OrderedDict(
        (k, _as_map(k, z, subject.grid_hw)) for k, z in feats.items()
    )


def features(subject: Subject, images_BxHxWxC) -> collections.OrderedDict[str, jax.Array]:
    """The subject's feature maps (B, h, w, C) by name, in its order (what `fourier.layer_profiles` and
    `variance.layer_variances` take); jittable: `jax.jit(functools.partial(features, subject))`."""
    return logits_and_features(subject, subject.params, images_BxHxWxC)[1]


def of_model(model: nn.Module, variables) -> Subject:
    """posattn's image model (`posattn.vision.models`) with its variables as a Subject: the features it
    sows (`models.features`), evaluation mode with its batch statistics; a ViT's P ("pos_embedding",
    its CLS row first when pool == "cls") on its image_size / patch_size grid."""
    state = {k: v for k, v in variables.items() if k != "params"}

    def apply(params, images_BxHxWxC):
        return models.logits_and_features(model, {**state, "params": params}, images_BxHxWxC)

    if not isinstance(model, ViT):  # the CNNs; AlterNet's P are per window, inside its blocks
        return Subject(apply, variables["params"])
    side = model.image_size // model.patch_size
    return Subject(
        apply,
        variables["params"],
        grid_hw=(side, side),
        pos_embedding="pos_embedding",
        prefix_tokens=int(model.pool == "cls"),
    )


def replace_at(params, path: str, fn):
    """`params` with the array at the "/"-path `path` (as `Subject.pos_embedding` names it) replaced by
    `fn(array)`; the other leaves shared, nothing changed in place."""
    key, _, rest = path.partition("/")
    if not hasattr(params, "keys") or key not in params:
        raise ConfigError(f"{path!r}: no {key!r} in the params")
    return {**params, key: replace_at(params[key], rest, fn) if rest else fn(params[key])}


def patch_embedding(subject: Subject, block: int = 0):
    """P of the patches as an (h, w, D) grid (what `posemb.similarity_maps` takes): the array at
    `subject.pos_embedding`, (T, D), (1, T, D) (timm, big_vision) or (depth, T, D) with one P per block
    (`block` taken), without its prefix rows."""
    if subject.pos_embedding is None:
        raise ConfigError(
            "the subject has no positional embedding: set Subject.pos_embedding to its "
            "'/'-path in the params, e.g. 'pos_embedding'"
        )
    P = subject.params
    for key in subject.pos_embedding.split("/"):
        if not hasattr(P, "keys") or key not in P:
            raise ConfigError(
                f"Subject.pos_embedding={subject.pos_embedding!r}: no {key!r} in the params "
                f"(keys: {', '.join(map(str, P.keys())) if hasattr(P, 'keys') else 'none'})"
            )
        P = P[key]
    P = P[0] if P.ndim == 3 and P.shape[0] == 1 else P
    if P.ndim not in (2, 3):
        raise ConfigError(
            f"the positional embedding has shape {tuple(P.shape)}: need (T, D), (1, T, D) or "
            "(depth, T, D)"
        )
    patches = P[..., subject.prefix_tokens :, :]
    grid = _grid(patches.shape[-2], subject.grid_hw, "the positional embedding")
    return posemb.patch_embedding({"pos_embedding": patches}, grid, block=block)


class _Measured(nn.Module):
    """A Subject's `apply` as a posattn image model: apply({"params": p}, images, train=..,
    mutable=[INTERMEDIATES]) returns its logits and sows its features by name (`as_module`)."""

    subject: Subject

    def __call__(self, images_BxHxWxC, train: bool = False):
        del train  # a Subject's apply is its evaluation pass
        logits, feats = logits_and_features(self.subject, self.variables["params"], images_BxHxWxC)
        for name, z in feats.items():
            self.sow(INTERMEDIATES, name, z)
        return logits


def as_module(subject: Subject) -> tuple[nn.Module, dict]:
    """(module, variables) that run `subject` where posattn's models run: `module.apply(variables,
    images, train=False, mutable=[INTERMEDIATES])` gives (logits, {INTERMEDIATES: {name: (map,)}}), and
    variables = {"params": subject.params}, so the parameters are arguments of compiled programs."""
    return _Measured(dataclasses.replace(subject, params=None)), {"params": subject.params}
