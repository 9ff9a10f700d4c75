"""Image classifiers of the JSL22 image regime: ViT (vanilla or positional attention), CIFAR ResNet-18
and CIFAR VGG-16-BN, built from the `config.model` fields by `create_model`.

Every model is a flax.linen Module called as
    module.apply(variables, images_BxHxWxC, train=bool, rngs={"dropout": key}, mutable=[...])
on normalised float images and returns float32 logits (B, num_classes). ViTs have only "params"; the CNNs
also have "batch_stats", so a train call passes mutable=["batch_stats"] and gets (logits, updates) back.
Fields are checked when a model is constructed, however it is built.

Registries: `MODELS` (config name -> constructor `build(fields, *, num_classes, image_size, channels,
dtype)`) and `attention.ATTENTIONS` (kind -> attention module). Adding a model is its module and one line
of `MODELS`; adding an attention kind is its class and one line of `ATTENTIONS`.

What the models compute on the way, by name (flax `sow`; free unless asked for):
- `features(model, variables, images)` -> {name: (B, h, w, C) feature map}, in forward order:
  "stem": ViT: the patch embeddings entering the first block (P added where the attention kind adds
      it; CLS dropped); ResNet: the stem's output; VGG: the first conv layer's output.
  "block_{i:02d}/attention", "block_{i:02d}/mlp": transformer block i, the residual stream right after
      its attention branch and after its MLP branch are added (tokens on the h x w patch grid).
  "block_{i:02d}/conv": conv block i's output (ResNet: BasicBlock i of 8; VGG: conv layer i + 2).
  A name ending in "/attention" is an attention branch (PK22 shades those in its figures), so
  "block_00/attention" - "stem" is the first block's attention branch output.
- `attention_maps(model, variables, images)` -> {"block_{i:02d}": (B, heads, N, N)} softmax weights of
  each transformer block, N tokens (with CLS pooling, token 0 is the CLS token). Positional attention's
  weights do not depend on the image: they are broadcast over the batch. Empty for the CNNs.
"""

import collections
import difflib
import numbers

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError, check_choice
from posattn.vision import config as vision_config
from posattn.vision.models import alternet, resnet, vgg, vit
from posattn.vision.models.attention import ATTENTIONS
from posattn.vision.models.sown import (
    INTERMEDIATES,
    STEM,
    attention_block,
    block_feature,
    is_feature,
)
from posattn.vision.models.variants import (
    NAMED_VARIANTS,
    SHAPE_FIELDS,
    VIT_SHAPES,
    ViTShape,
    override_shape,
    parse_variant,
)

__all__ = [
    "ATTENTIONS",
    "MODELS",
    "MODEL_FIELDS",
    "NAMED_VARIANTS",
    "VIT_SHAPES",
    "ViTShape",
    "attention_maps",
    "block_feature",
    "create_model",
    "features",
    "logits_and_features",
    "override_shape",
    "param_count",
    "parse_variant",
]

# config name -> constructor of the model from the config's model fields.
MODELS = {
    "vit": vit.build,
    "resnet18": resnet.build,
    "vgg16": vgg.build,
    "alternet": alternet.build,
}
# The fields of `config.model` with the value a missing field takes: the schema's, its one source.
MODEL_FIELDS = vision_config.base_config().model.to_dict()
# The CNNs whose model.width is the channels of their first stage (the later stages scale with it; 0:
# the published 64), e.g. for CPU-sized runs.
WIDTH_MODELS = ("resnet18", "vgg16")
_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)


def _compute_dtype(dtype):
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
    """The classifier that `model_cfg` (the `config.model` ConfigDict, a dict, or only a model name such
    as "resnet18") names, validated, for images of `image_size` x `image_size` x `channels`.

    Fields (`MODEL_FIELDS`): name (a key of `MODELS`); for the ViT also variant ("Ti/16", ...),
    patch_size, width, depth, num_heads and mlp_dim (each 0 = the variant's), attention (a key of
    `ATTENTIONS`) and attention_options (its own knobs, "name=value,...": `attention.parse_options`; also
    AlterNet's), pos_shared, pos_add, pos_init_std (std of the initial P), pool (gap | cls), the memory
    levers remat and scan_layers (`vit` module docstring; the other models refuse them); for ResNet-18
    and VGG-16 width (channels of the first stage, the others scaled with it; 0 = the published 64);
    dropout for all. Missing fields take the schema's defaults (`vision.config.base_config`); an
    unknown field is a ConfigError naming the nearest valid one. The model refuses (ConfigError)
    images of other channels (and for the ViT, another size).
    """
    if isinstance(model_cfg, str):
        model_cfg = {"name": model_cfg}
    if not hasattr(model_cfg, "items"):
        raise ConfigError(
            f"model_cfg={model_cfg!r}: give a model name or a dict of model fields, e.g. "
            "{'name': 'vit', 'variant': 'Ti/4'}"
        )
    given = dict(model_cfg.items())
    for key in given:
        if key not in MODEL_FIELDS:
            near = difflib.get_close_matches(key, list(MODEL_FIELDS), n=1, cutoff=0.0)
            raise ConfigError(
                f"unknown model field {key!r}: did you mean {near[0]!r}? "
                f"(valid: {', '.join(MODEL_FIELDS)})"
            )
    fields = {**MODEL_FIELDS, **given}
    build = MODELS[check_choice(fields["name"], MODELS, "model name")]
    shaped = [
        name
        for name in SHAPE_FIELDS
        if fields[name]
        and fields["name"] != "vit"
        and not (name == "width" and fields["name"] in WIDTH_MODELS)
    ]
    if (
        shaped
    ):  # a ResNet, VGG or AlterNet would ignore them: say so rather than train another model
        raise ConfigError(
            f"model.{shaped[0]} sets a ViT's shape; model {fields['name']!r} takes its shape "
            f"from model.variant: leave model.{shaped[0]} at 0"
        )
    if fields["name"] != "vit" and (fields["remat"] != "none" or fields["scan_layers"]):
        # built for the ViT's blocks only (the CNNs' stages differ in shape: no scan over them)
        lever = "remat" if fields["remat"] != "none" else "scan_layers"
        raise ConfigError(
            f"model.{lever}={fields[lever]!r} is a ViT's memory lever; model {fields['name']!r} "
            f"has none: leave model.remat='none' and model.scan_layers=False"
        )
    for what, value in (("image_size", image_size), ("channels", channels)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ConfigError(f"{what} must be a positive integer, got {value!r}")
    return build(
        fields,
        num_classes=num_classes,
        image_size=image_size,
        channels=channels,
        dtype=_compute_dtype(dtype),
    )


def _apply_sown(model: nn.Module, variables, images) -> tuple[jax.Array, dict]:
    """(logits, {name: value} that `model` sows) of an evaluation pass over `images` (its own names only)."""
    logits, state = model.apply(variables, images, train=False, mutable=[INTERMEDIATES])
    return logits, {
        name: values[-1]
        for name, values in state.get(INTERMEDIATES, {}).items()
        if not isinstance(values, dict)
    }  # a dict: what a submodule sowed in its own scope


def logits_and_features(
    model: nn.Module, variables, images_BxHxWxC
) -> tuple[jax.Array, collections.OrderedDict[str, jax.Array]]:
    """(logits_BxK, `features`) of one evaluation pass (train=False); jittable."""
    logits, sown = _apply_sown(model, variables, images_BxHxWxC)
    # "stem" first, then by block index (two digits) and branch: attention < conv < mlp alphabetically,
    # and a block has either a conv or an attention and an MLP branch. An OrderedDict, since `jax.jit`
    # returns a plain dict's keys sorted ("stem" last) but keeps an OrderedDict's order.
    return logits, collections.OrderedDict(
        sorted(
            ((k, v) for k, v in sown.items() if is_feature(k)),
            key=lambda kv: (kv[0] != STEM, kv[0]),
        )
    )


def features(
    model: nn.Module, variables, images_BxHxWxC
) -> collections.OrderedDict[str, jax.Array]:
    """Per-block feature maps (B, h, w, C) by name, in forward order (see the package docstring).

    Jittable (`jax.jit(functools.partial(features, model))`); an evaluation pass (train=False).
    """
    return logits_and_features(model, variables, images_BxHxWxC)[1]


def attention_maps(model: nn.Module, variables, images_BxHxWxC) -> dict[str, jax.Array]:
    """{"block_{i:02d}": (B, heads, N, N)} attention weights of every transformer block (jittable).

    Positional attention computes one (heads, N, N) map for all images; it is broadcast over the batch.
    """
    B = images_BxHxWxC.shape[0]
    _, sown = _apply_sown(model, variables, images_BxHxWxC)
    maps = {attention_block(k): v for k, v in sown.items() if attention_block(k)}
    return {name: jnp.broadcast_to(att, (B, *att.shape[-3:])) for name, att in sorted(maps.items())}


def param_count(variables) -> int:
    """Number of trainable parameters: the leaves of variables["params"] (or of a bare params tree).

    Works on concrete arrays and on the ShapeDtypeStructs of `jax.eval_shape`; batch-norm running
    statistics are state, not parameters, and are not counted (as in the published counts).
    """
    params = variables.get("params", variables) if hasattr(variables, "get") else variables
    return int(sum(np.prod(leaf.shape, dtype=np.int64) for leaf in jax.tree.leaves(params)))
