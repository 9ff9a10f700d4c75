"""timm's ViT and ResNet checkpoints as posattn's models, so that pretrained weights run through the
tools of `posattn.analysis` (PK22's Fourier and noise figures use ImageNet-pretrained timm models).

`load(path, num_heads=...)` reads a state dict (`load_state_dict`: .safetensors through the
`safetensors` package's numpy API, no PyTorch needed; .pth/.pt/.bin through `torch.load` where PyTorch
is installed) and returns (model, variables) of posattn's `ViT` (`vit`) or `ResNet18` (`resnet`),
whichever the keys name; `posattn.analysis.subject.of_model(model, variables)` makes it a subject.

Layouts (PyTorch -> flax): a conv weight (out, in, kh, kw) -> kernel (kh, kw, in, out); a linear weight
(out, in) -> (in, out); the ViT's fused qkv weight (3 D, D), whose rows are (q|k|v, head, head_dim), ->
(D, 3, heads, head_dim), its output projection (D, heads * head_dim) -> (heads, head_dim, D); the class
token (1, 1, D) as it is; pos_embed (1, T, D) -> (T, D); LayerNorm and BatchNorm weight and bias ->
scale and bias, BatchNorm running mean and variance -> batch_stats mean and var. A tensor timm leaves
out (qkv_bias=False, proj_bias=False) is the zero it stands for; with no_embed_class the class token's
row of P is zero (timm adds P to the patches only).

What maps (and is refused with the reason otherwise):
- ViT: timm's `VisionTransformer` with the class token pooled (global_pool="token", the default; P's
  first row is the class token's) or without class token, global_pool="avg" and fc_norm=False (the final
  LayerNorm on every token, then the mean: posattn's "gap"). posattn's ViT gets the exact GELU
  (gelu="erf") and LayerNorm eps 1e-6, both timm's. Not representable: register tokens, LayerScale
  (init_values), qk_norm, pre_norm, fc_norm, attention pooling, no final norm, no head (num_classes=0).
  A class token pooled by averaging (global_pool="avg" with class_token and fc_norm=False) has the keys
  of the default and is not told apart: it imports as "token" pooling, and the logits differ.
  num_heads is not in a state dict, and a wrong one gives wrong logits silently, so `load` reads it
  where it is known (`timm_heads.heads_of`): a "num_heads" entry of the .safetensors metadata, the config.json
  that the Hugging Face hub ships beside a timm checkpoint (its model_args, else its "architecture"),
  or the timm model name (`model_name=`, the metadata's or config.json's "architecture", e.g.
  "vit_base_patch16_224.augreg_in21k": `timm_heads.VIT_HEADS`, timm's registry, where the head dimension
  is not always 64: vit_huge 16 heads of 80, vit_base_patch16_gap_224 16 of 48). A `num_heads` that
  contradicts a known one is refused; with no source, `num_heads` is required.
- ResNet: timm's `ResNet` of BasicBlocks (resnet18, resnet10t-like shapes with the plain stem) with the
  same number of blocks in every stage and the 7x7 stem (posattn's `ResNet18(stem="imagenet")`).
  Not representable: Bottleneck blocks (resnet50 and up), deep stems, squeeze-excitation, average-pool
  downsampling, different block counts per stage (resnet34), a stem width other than the first stage's.
"""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError
from posattn.vision import timm_heads
from posattn.vision.models import resnet as resnet_lib
from posattn.vision.models import vit as vit_lib

# Keys of PyTorch buffers that carry nothing a forward pass reads.
_IGNORED_SUFFIXES = ("num_batches_tracked",)
# timm ViT keys that name a part posattn's ViT does not have -> what that part is.
_VIT_UNSUPPORTED = {
    "reg_token": "register tokens (reg_tokens > 0)",
    ".ls1.": "LayerScale (init_values)",
    ".ls2.": "LayerScale (init_values)",
    ".q_norm.": "qk_norm",
    ".k_norm.": "qk_norm",
    "norm_pre.": "pre_norm",
    "fc_norm.": "a LayerNorm after the pooling (fc_norm, global_pool='avg')",
    "attn_pool.": "attention pooling",
    "attn.norm.": "scale_attn_norm",
    "mlp.norm.": "scale_mlp_norm",
    "pre_logits.": "a pre-logits layer",
}
_RESNET_UNSUPPORTED = {
    ".conv3.": "Bottleneck blocks (resnet50 and up)",
    "conv1.0.": "a deep stem (stem_type='deep')",
    ".se.": "squeeze-excitation",
    "downsample.2.": "average-pool downsampling (avg_down)",
}


def load_state_dict(path: str) -> dict[str, np.ndarray]:
    """{name: array} of a checkpoint file: .safetensors (no torch needed), or .pth / .pt / .bin read by
    PyTorch (weights only; a {"state_dict": ...} or {"model": ...} wrapper and DDP's "module." prefix
    are taken off). Floating tensors are returned as float32."""
    if not os.path.exists(path):
        raise ConfigError(f"no checkpoint file {path!r}")
    if path.endswith(".safetensors"):
        from safetensors.numpy import load_file

        tensors = load_file(path)  # bfloat16 tensors as ml_dtypes' bfloat16
    elif path.endswith((".pth", ".pt", ".bin")):
        try:
            import torch
        except ImportError:
            raise ConfigError(
                f"{path}: reading a PyTorch state dict needs torch (pip install torch); a "
                ".safetensors file needs none"
            ) from None
        obj = torch.load(path, map_location="cpu", weights_only=True)
        for wrapper in ("state_dict", "model"):
            if isinstance(obj.get(wrapper), dict):
                obj = obj[wrapper]
        tensors = {
            k.removeprefix("module."): (v.float() if v.is_floating_point() else v).numpy()
            for k, v in obj.items()
        }
    else:
        raise ConfigError(
            f"{path}: not a checkpoint this reads: give a .safetensors, .pth, .pt or .bin file"
        )
    integral = lambda v: np.issubdtype(v.dtype, np.integer) or v.dtype == bool  # noqa: E731
    return {k: v if integral(v) else v.astype(np.float32) for k, v in tensors.items()}


def _conv(w_OxIxHxW):
    return np.transpose(w_OxIxHxW, (2, 3, 1, 0))


def _linear(w_OxI):
    return np.transpose(w_OxI)


def _refuse_unsupported(state_dict, unsupported: dict, what: str) -> None:
    for key in state_dict:
        for marker, part in unsupported.items():
            if marker in key:
                raise ConfigError(
                    f"{key!r}: the {what} has {part}, which posattn's {what} does not represent "
                    "(posattn.vision.timm_import lists what maps)"
                )


class _Mapping:
    """Takes tensors out of a state dict by name, so that what is missing and what is left over can be
    reported."""

    def __init__(self, state_dict: dict, what: str):
        self.left = {k: v for k, v in state_dict.items() if not k.endswith(_IGNORED_SUFFIXES)}
        self.what = what

    def take(self, key: str, default=None) -> np.ndarray:
        if key in self.left:
            return self.left.pop(key)
        if default is not None:
            return default
        raise ConfigError(
            f"the {self.what} state dict has no {key!r}: not a timm {self.what} this maps "
            "(posattn.vision.timm_import lists what maps)"
        )

    def done(self) -> None:
        if self.left:
            keys = sorted(self.left)
            raise ConfigError(
                f"the {self.what} state dict has {len(keys)} tensors posattn's model has no place "
                f"for, e.g. {', '.join(keys[:3])}: not a timm {self.what} this maps"
            )


def _check_shapes(model, variables, images_shape) -> None:
    """The imported tree against the model's own (a mapping slip would be a shape slip)."""
    expected = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros(images_shape, jnp.float32))
    got = jax.tree.map(lambda x: x.shape, variables)
    want = jax.tree.map(lambda x: x.shape, dict(expected))
    if got != want:
        raise ConfigError(f"the imported parameters do not fit the model: {got} vs {want}")


def vit(state_dict: dict, *, num_heads: int) -> tuple[vit_lib.ViT, dict]:
    """(posattn ViT, {"params": ...}) of a timm `VisionTransformer` state dict (module docstring)."""
    _refuse_unsupported(state_dict, _VIT_UNSUPPORTED, "ViT")
    m = _Mapping(state_dict, "ViT")
    w_embed = m.take("patch_embed.proj.weight")
    D, C, p, p_w = w_embed.shape
    if p != p_w:
        raise ConfigError(
            f"patch_embed.proj.weight has patches {p} x {p_w}: posattn's ViT takes square patches"
        )
    if int(num_heads) < 1 or D % int(num_heads):
        raise ConfigError(
            f"num_heads={num_heads} must divide the width {D} (timm's ViT-Ti/S/B: 3/6/12)"
        )
    H, K = int(num_heads), D // int(num_heads)
    has_cls = "cls_token" in m.left
    P_TxD = m.take("pos_embed").reshape(-1, D)
    N = P_TxD.shape[0] - has_cls
    if has_cls and math.isqrt(N) ** 2 != N and math.isqrt(N + 1) ** 2 == N + 1:
        # no_embed_class: P has no row for the class token (timm adds P to the patches only)
        P_TxD, N = np.concatenate([np.zeros((1, D), np.float32), P_TxD]), N + 1
    side = math.isqrt(N)
    if side * side != N:
        raise ConfigError(
            f"pos_embed has {P_TxD.shape[0]} rows: not a square patch grid (posattn's ViT "
            "takes square images)"
        )
    zeros = np.zeros((D,), np.float32)
    params = {
        "embedding": {"kernel": _conv(w_embed), "bias": m.take("patch_embed.proj.bias", zeros)},
        "pos_embedding": P_TxD,
    }
    if has_cls:
        params["cls"] = m.take("cls_token").reshape(1, 1, D)
    depth = 0
    while f"blocks.{depth}.norm1.weight" in m.left:
        b = f"blocks.{depth}."
        params[f"block_{depth}"] = {
            "norm1": {"scale": m.take(b + "norm1.weight"), "bias": m.take(b + "norm1.bias")},
            "attn": {
                "qkv": {
                    "kernel": _linear(m.take(b + "attn.qkv.weight")).reshape(D, 3, H, K),
                    "bias": m.take(b + "attn.qkv.bias", np.zeros((3 * D,), np.float32)).reshape(
                        3, H, K
                    ),
                },
                "out": {
                    "kernel": _linear(m.take(b + "attn.proj.weight")).reshape(H, K, D),
                    "bias": m.take(b + "attn.proj.bias", zeros),
                },
            },
            "norm2": {"scale": m.take(b + "norm2.weight"), "bias": m.take(b + "norm2.bias")},
            "mlp": {
                "fc1": {
                    "kernel": _linear(m.take(b + "mlp.fc1.weight")),
                    "bias": m.take(b + "mlp.fc1.bias"),
                },
                "fc2": {
                    "kernel": _linear(m.take(b + "mlp.fc2.weight")),
                    "bias": m.take(b + "mlp.fc2.bias"),
                },
            },
        }
        depth += 1
    if not depth:
        raise ConfigError(
            "the ViT state dict has no blocks.0.norm1.weight: not a timm VisionTransformer"
        )
    params["encoder_norm"] = {"scale": m.take("norm.weight"), "bias": m.take("norm.bias")}
    params["head"] = {"kernel": _linear(m.take("head.weight")), "bias": m.take("head.bias")}
    m.done()
    model = vit_lib.ViT(
        num_classes=params["head"]["bias"].shape[0],
        image_size=side * p,
        patch_size=p,
        width=D,
        depth=depth,
        num_heads=H,
        mlp_dim=params["block_0"]["mlp"]["fc1"]["bias"].shape[0],
        attention="vanilla",
        pool="cls" if has_cls else "gap",
        gelu="erf",
        channels=C,
    )
    variables = {"params": params}
    _check_shapes(model, variables, (1, side * p, side * p, C))
    return model, variables


def _batch_norm(m: _Mapping, prefix: str) -> tuple[dict, dict]:
    """(params, batch_stats) of a BatchNorm2d."""
    return (
        {"scale": m.take(prefix + ".weight"), "bias": m.take(prefix + ".bias")},
        {"mean": m.take(prefix + ".running_mean"), "var": m.take(prefix + ".running_var")},
    )


def resnet(state_dict: dict) -> tuple[resnet_lib.ResNet18, dict]:
    """(posattn ResNet18(stem="imagenet"), {"params", "batch_stats"}) of a timm `ResNet` state dict of
    BasicBlocks (module docstring)."""
    _refuse_unsupported(state_dict, _RESNET_UNSUPPORTED, "ResNet")
    m = _Mapping(state_dict, "ResNet")
    w_stem = m.take("conv1.weight")
    if w_stem.shape[2:] != (7, 7):
        raise ConfigError(
            f"conv1.weight is {w_stem.shape[2]} x {w_stem.shape[3]}: posattn imports the 7x7 stem"
        )
    params, stats = {"stem_conv": {"kernel": _conv(w_stem)}}, {}
    params["stem_bn"], stats["stem_bn"] = _batch_norm(m, "bn1")
    blocks = []  # per stage: timm's layer{s}.{b}.
    while any(k.startswith(f"layer{len(blocks) + 1}.") for k in state_dict):
        blocks.append(
            len({k.split(".")[1] for k in state_dict if k.startswith(f"layer{len(blocks) + 1}.")})
        )
    if not blocks or len(set(blocks)) != 1:
        raise ConfigError(
            f"blocks per stage {blocks}: posattn's ResNet has the same number in every stage"
        )
    for s in range(1, len(blocks) + 1):
        for b in range(blocks[0]):
            name, prefix = f"stage{s}_block{b + 1}", f"layer{s}.{b}."
            p, st = (
                {
                    "conv1": {"kernel": _conv(m.take(prefix + "conv1.weight"))},
                    "conv2": {"kernel": _conv(m.take(prefix + "conv2.weight"))},
                },
                {},
            )
            p["bn1"], st["bn1"] = _batch_norm(m, prefix + "bn1")
            p["bn2"], st["bn2"] = _batch_norm(m, prefix + "bn2")
            if prefix + "downsample.0.weight" in m.left:
                p["shortcut_conv"] = {"kernel": _conv(m.take(prefix + "downsample.0.weight"))}
                p["shortcut_bn"], st["shortcut_bn"] = _batch_norm(m, prefix + "downsample.1")
            params[name], stats[name] = p, st
    params["head"] = {"kernel": _linear(m.take("fc.weight")), "bias": m.take("fc.bias")}
    m.done()
    features = tuple(
        params[f"stage{s + 1}_block1"]["conv1"]["kernel"].shape[-1] for s in range(len(blocks))
    )
    if features[0] != w_stem.shape[0]:
        raise ConfigError(
            f"the stem has {w_stem.shape[0]} channels and the first stage {features[0]}: posattn's "
            "ResNet needs them equal"
        )
    model = resnet_lib.ResNet18(
        num_classes=params["head"]["bias"].shape[0],
        stage_features=features,
        blocks_per_stage=blocks[0],
        channels=w_stem.shape[1],
        stem="imagenet",
    )
    variables = {"params": params, "batch_stats": stats}
    _check_shapes(model, variables, (1, 32, 32, w_stem.shape[1]))
    return model, variables


def load(path: str, *, num_heads: int | None = None, model_name: str | None = None):
    """(model, variables) of a timm ViT or ResNet checkpoint file (`load_state_dict`). A ViT's head count
    (not in a state dict) is read where `timm_heads.heads_of` finds it; `num_heads` (required where it finds
    nothing) must agree with it: ConfigError otherwise, since another count gives other logits."""
    state_dict = load_state_dict(path)
    if "patch_embed.proj.weight" in state_dict:
        known = timm_heads.heads_of(path, model_name)
        if len(set(known.values())) > 1:
            said = ", ".join(f"{k}: {v}" for k, v in known.items())
            raise ConfigError(
                f"{path}: its head counts disagree ({said}): fix the metadata or config.json, "
                "or give model_name"
            )
        if known:
            where, heads = next(iter(known.items()))
            if num_heads is not None and int(num_heads) != heads:
                raise ConfigError(
                    f"num_heads={num_heads} contradicts {where}: {heads} heads; give "
                    f"num_heads={heads} or leave it out"
                )
            num_heads = heads
        if num_heads is None:
            raise ConfigError(
                f"{path} is a ViT: give num_heads or model_name (the head count is not in "
                "a state dict, its metadata or a config.json beside it; timm's ViT-Ti/S/B: "
                "3/6/12)"
            )
        return vit(state_dict, num_heads=num_heads)
    if "layer1.0.conv1.weight" in state_dict:
        return resnet(state_dict)
    raise ConfigError(
        f"{path}: neither a timm ViT (patch_embed.proj.weight) nor a timm ResNet "
        "(layer1.0.conv1.weight)"
    )
