"""Image classifiers of the JSL22 image regime (SPEC 2): ViT (vanilla or positional attention), CIFAR
ResNet-18 and CIFAR VGG-16-BN, built from the `config.model` fields by `create_model`.

Every model is a flax.linen Module called as
    module.apply(variables, images_BxHxWxC, train=bool, rngs={"dropout": key}, mutable=[...])
on normalised float images and returns float32 logits (B, num_classes). ViTs have only "params"; the CNNs
also have "batch_stats", so a train call passes mutable=["batch_stats"] and gets (logits, updates) back.
"""
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import flax.linen as nn

from posattn.errors import ConfigError
from posattn.vision.models.resnet import ResNet18
from posattn.vision.models.variants import NAMED_VARIANTS, VIT_SHAPES, ViTShape, parse_variant
from posattn.vision.models.vgg import VGG16
from posattn.vision.models.vit import ViT

__all__ = [
    "MODEL_NAMES", "NAMED_VARIANTS", "VIT_SHAPES", "ViTShape", "create_model", "param_count",
    "parse_variant",
]

MODEL_NAMES = ("vit", "resnet18", "vgg16")
ATTENTIONS = ("vanilla", "positional")
POOLS = ("gap", "cls")
_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)


def _choice(value, allowed, what: str):
    if value not in allowed:
        raise ConfigError(f"unknown {what} {value!r}: use one of {', '.join(map(repr, allowed))}")
    return value


def _compute_dtype(dtype) -> Any:
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in [jnp.dtype(d) for d in _DTYPES]:
        raise ConfigError(f"unknown compute dtype {dtype!r}: use float32, bfloat16 or float16")
    return dt


def create_model(
    model_cfg, *, num_classes: int, image_size: int, channels: int, dtype=jnp.float32
) -> nn.Module:
    """The classifier that `model_cfg` (the `config.model` ConfigDict) names, validated.

    Fields: name (vit | resnet18 | vgg16); for the ViT also variant ("Ti/16", ...), patch_size (0 = the
    variant's), attention (vanilla | positional), pos_shared, pos_add, pos_init_std (std of the initial
    P), pool (gap | cls); dropout for all.
    Missing fields take the defaults of the shared config. Raises ConfigError for anything invalid.
    """
    get = model_cfg.get
    name = _choice(get("name", "vit"), MODEL_NAMES, "model name")
    dtype = _compute_dtype(dtype)
    for what, value in (("num_classes", num_classes), ("image_size", image_size), ("channels", channels)):
        if int(value) < 1:
            raise ConfigError(f"{what} must be a positive integer, got {value!r}")
    dropout = float(get("dropout", 0.0))
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"model.dropout must be in [0, 1), got {dropout}")

    if name == "resnet18":
        return ResNet18(num_classes=num_classes, dropout=dropout, dtype=dtype)
    if name == "vgg16":
        return VGG16(num_classes=num_classes, dropout=dropout, dtype=dtype)

    pos_init_std = float(get("pos_init_std", 1.0))
    if not pos_init_std > 0:
        raise ConfigError(f"model.pos_init_std must be positive, got {pos_init_std}")
    shape, variant_patch = parse_variant(get("variant", "Ti/4"))
    patch_size = int(get("patch_size", 0))
    if patch_size < 0:
        raise ConfigError(f"model.patch_size must be >= 0 (0 = the variant's), got {patch_size}")
    patch_size = patch_size or variant_patch
    if image_size % patch_size:
        raise ConfigError(
            f"patch size {patch_size} does not divide the image size {image_size}: pick a patch size "
            f"among the divisors {[p for p in range(1, image_size + 1) if image_size % p == 0]}"
        )
    return ViT(
        num_classes=num_classes,
        image_size=image_size,
        patch_size=patch_size,
        width=shape.width,
        depth=shape.depth,
        num_heads=shape.num_heads,
        mlp_dim=shape.mlp_dim,
        attention=_choice(get("attention", "positional"), ATTENTIONS, "attention"),
        pos_shared=bool(get("pos_shared", True)),
        pos_add=bool(get("pos_add", False)),
        pool=_choice(get("pool", "gap"), POOLS, "pool"),
        dropout=dropout,
        dtype=dtype,
        pos_init_std=pos_init_std,
    )


def param_count(variables) -> int:
    """Number of trainable parameters: the leaves of variables["params"] (or of a bare params tree).

    Works on concrete arrays and on the ShapeDtypeStructs of `jax.eval_shape`; batch-norm running
    statistics are state, not parameters, and are not counted (as in the published counts).
    """
    params = variables.get("params", variables) if hasattr(variables, "get") else variables
    return int(sum(np.prod(leaf.shape, dtype=np.int64) for leaf in jax.tree.leaves(params)))
