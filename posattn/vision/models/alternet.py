"""AlterNet (PK22 Section 4, Figure 8): a pre-activation ResNet whose stage-final blocks are attention
blocks, with vanilla or positional (JSL22 Definition 3.2) attention.

PK22 builds a stage of n blocks as [Conv] * (n - 2k) + [Conv, MSA] * k: MSAs close the stages, convs
open them (Alter-ResNet-50 on CIFAR-100: blocks (3, 4, 6, 4), MSAs (0, 1, 1, 2)). Here the stages have
the ResNet-18 shape, two blocks each, and a stage with k = 1 ends in an MSA block: [Conv, MSA].

- Conv block: pre-activation BasicBlock, x + conv3x3(relu(BN(conv3x3(relu(BN(x)))))), with a 1x1
  projection of relu(BN(x)) as the shortcut when the shape changes (He et al. 2016, identity mappings).
- MSA block: z + Attn(LN(z)), no MLP (PK22's AlterNet blocks), computed in non-overlapping windows of
  `window` x `window` positions of the feature map (PK22: local attention, window 4 on CIFAR; a map
  smaller than the window is one window). Every window is a sequence of window^2 tokens; each block
  has a learned embedding P of those window^2 positions. Positional attention makes its map from P
  alone (one map shared by every window and image); vanilla attention adds P to its input tokens, as
  the project's ViT adds P to its patch embeddings (PK22 uses a relative-position bias instead:
  docs/how_vits_work.md, Decisions).
- Heads: one per 32 channels (PK22's heads (3, 6, 12, 24) give about 85 channels a head at ResNet-50's
  widths; 32 keeps at least one head on the narrow digits models).

Variants (`model.variant`): "<size>" or "<size>/<msas>" with size in `SIZES` ("XS": widths 16-32-64-128,
"18": ResNet-18's 64-128-256-512; "XXS": 16-32, two stages, the PK22 smoke run's size) and msas one digit
0 or 1 per stage, 1 = the stage ends in an MSA block (default "0111", the pattern of PK22 on the last
three stages; the last digits of it for fewer stages). "XS/0000" is the plain pre-activation ResNet of
the same widths: PK22's ResNet-vs-AlterNet comparison with nothing else changed.

Sown as the `posattn.vision.models` contract says: "stem" (stem conv output), "block_{i:02d}/conv" for
conv blocks and "block_{i:02d}/attention" for MSA blocks (the residual stream after the block), and
"block_{i:02d}/weights": the block's attention as one (B | 1, heads, N, N) map over all N = h * w
positions of the feature map in raster order, block-diagonal over the windows.
"""

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError, check_choice
from posattn.vision.models.attention import ATTENTIONS, parse_options
from posattn.vision.models.checks import check_classifier_fields, check_images
from posattn.vision.models.resnet import batch_norm, block_conv
from posattn.vision.models.sown import INTERMEDIATES, STEM, attention_weights, block_feature

_CONV_INIT = nn.initializers.variance_scaling(2.0, "fan_out", "normal")
SIZES = {"XXS": (16, 32), "XS": (16, 32, 64, 128), "18": (64, 128, 256, 512)}
DEFAULT_MSAS = "0111"
DEFAULT_VARIANT = f"XS/{DEFAULT_MSAS}"  # what the `alternet` config token selects
BLOCKS_PER_STAGE = 2
CHANNELS_PER_HEAD = 32
WINDOW = 4  # PK22 on CIFAR


def parse_variant(variant: str) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """ "XS/0111" -> (stage widths, which stages end in an MSA block); ConfigError if malformed."""
    size, sep, msas = str(variant).partition("/")
    msas = msas if sep else DEFAULT_MSAS[-len(SIZES.get(size, DEFAULT_MSAS)) :]
    if size not in SIZES or len(msas) != len(SIZES.get(size, ())) or set(msas) - {"0", "1"}:
        raise ConfigError(
            f"unknown AlterNet variant {variant!r}: use '<size>' or '<size>/<msas>' with size in "
            f"{sorted(SIZES)} and msas one digit (0 or 1) per stage, e.g. 'XS/{DEFAULT_MSAS}' "
            "(MSA blocks end the last three stages) or 'XS/0000' (the plain pre-activation ResNet)"
        )
    return SIZES[size], tuple(m == "1" for m in msas)


def _window_order(h: int, w: int, win: int) -> np.ndarray:
    """For every position of an h x w map in raster order, its index in window order (window after
    window, raster order inside each)."""
    r, c = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    window = (r // win) * (w // win) + c // win
    return (window * win * win + (r % win) * win + c % win).ravel()


def to_windows(x_BxHxWxC: jax.Array, win: int) -> jax.Array:
    """(B, H, W, C) -> (B * nW, win * win, C): non-overlapping windows, raster order inside each."""
    B, H, W, C = x_BxHxWxC.shape
    x = x_BxHxWxC.reshape(B, H // win, win, W // win, win, C).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(B * (H // win) * (W // win), win * win, C)


def from_windows(x_XxNxC: jax.Array, B: int, H: int, W: int, win: int) -> jax.Array:
    """The inverse of `to_windows`."""
    C = x_XxNxC.shape[-1]
    x = x_XxNxC.reshape(B, H // win, W // win, win, win, C).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(B, H, W, C)


def full_map(att: jax.Array, B: int, H: int, W: int, win: int) -> jax.Array:
    """Window attention as one (B | 1, heads, H*W, H*W) map over all positions in raster order.

    `att` is (B * nW, heads, N, N) (one map per window) or (heads, N, N) (the same map in every window).
    """
    nW = (H // win) * (W // win)
    att_BxWxHxNxN = att[None, None] if att.ndim == 3 else att.reshape(B, nW, *att.shape[1:])
    att_BxWxHxNxN = jnp.broadcast_to(att_BxWxHxNxN, (att_BxWxHxNxN.shape[0], nW, *att.shape[-3:]))
    n = att.shape[-1]
    # block-diagonal over the windows, in window order, then rows and columns put in raster order
    full = jnp.einsum("bwhij,wv->bhwivj", att_BxWxHxNxN, jnp.eye(nW, dtype=att.dtype))
    full = full.reshape(full.shape[0], full.shape[1], nW * n, nW * n)
    order = _window_order(H, W, win)
    return full[:, :, order][:, :, :, order]


class PreActBlock(nn.Module):
    """Pre-activation BasicBlock (He et al. 2016, identity mappings)."""

    features: int
    strides: int = 1
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x_BxHxWxC: jax.Array, train: bool) -> jax.Array:
        conv = functools.partial(block_conv, self.features, dtype=self.dtype)
        a = nn.relu(batch_norm(train, self.dtype, "bn1")(x_BxHxWxC))
        shortcut = x_BxHxWxC
        if self.strides != 1 or x_BxHxWxC.shape[-1] != self.features:
            shortcut = conv(1, self.strides, "shortcut_conv")(a)
        y = conv(3, self.strides, "conv1")(a)
        y = nn.relu(batch_norm(train, self.dtype, "bn2")(y))
        return shortcut + conv(3, 1, "conv2")(y)


class WindowAttentionBlock(nn.Module):
    """z + Attn(LN(z)) in windows of the feature map, no MLP; returns (z', (B | 1, heads, H*W, H*W))."""

    num_heads: int
    attention: str = "positional"
    attention_options: tuple = ()  # (name, value) pairs of the kind's own fields (`parse_options`)
    window: int = WINDOW
    pos_init_std: float = 0.02
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x_BxHxWxC: jax.Array) -> tuple[jax.Array, jax.Array]:
        B, H, W, C = x_BxHxWxC.shape
        win = min(self.window, H, W)
        if H % win or W % win:
            raise ValueError(f"window {win} does not divide the {H} x {W} feature map")
        module = ATTENTIONS[self.attention]
        attend = module(
            self.num_heads, dtype=self.dtype, name="attn", **dict(self.attention_options)
        )
        P_NxC = self.param(
            "pos_embedding", nn.initializers.normal(stddev=self.pos_init_std), (win * win, C)
        )
        y_XxNxC = to_windows(nn.LayerNorm(dtype=self.dtype, name="norm")(x_BxHxWxC), win)
        if module.takes_position:
            y_XxNxC, att = attend(y_XxNxC, P_NxC)
        else:
            y_XxNxC, att = attend(y_XxNxC + P_NxC.astype(y_XxNxC.dtype), None)
        return (
            x_BxHxWxC + from_windows(y_XxNxC, B, H, W, win),
            None if att is None else full_map(att, B, H, W, win),
        )


class AlterNet(nn.Module):
    """AlterNet classifier (see the module docstring); build it with `build` or `create_model`."""

    num_classes: int
    stage_features: tuple[int, ...] = SIZES["XS"]
    stage_msa: tuple[bool, ...] = (False, True, True, True)
    attention: str = "positional"
    attention_options: tuple = ()  # (name, value) pairs of its own fields (`attention.parse_options`)
    window: int = WINDOW
    pos_init_std: float = 0.02
    dropout: float = 0.0
    dtype: Any = jnp.float32
    channels: int | None = None  # of the images it takes (None: any); `create_model` sets it

    def __post_init__(self):
        check_classifier_fields(self.num_classes, self.dropout)
        check_choice(self.attention, ATTENTIONS, "attention")
        if len(self.stage_msa) != len(self.stage_features):
            raise ConfigError(
                f"stage_msa has {len(self.stage_msa)} entries for "
                f"{len(self.stage_features)} stages: give one per stage"
            )
        if self.window < 1 or not self.pos_init_std > 0:
            raise ConfigError(
                f"window ({self.window}) and pos_init_std ({self.pos_init_std}) must be positive"
            )
        super().__post_init__()

    @nn.compact
    def __call__(self, images_BxHxWxC: jax.Array, train: bool = False) -> jax.Array:
        check_images(images_BxHxWxC, self.channels)
        x = nn.Conv(
            self.stage_features[0],
            (3, 3),
            padding=1,
            use_bias=False,
            dtype=self.dtype,
            kernel_init=_CONV_INIT,
            name="stem_conv",
        )(images_BxHxWxC)
        self.sow(INTERMEDIATES, STEM, x)
        index = 0
        for stage, (features, msa) in enumerate(zip(self.stage_features, self.stage_msa)):
            for block in range(BLOCKS_PER_STAGE):
                name = f"stage{stage + 1}_block{block + 1}"
                if msa and block == BLOCKS_PER_STAGE - 1:
                    heads = max(1, features // CHANNELS_PER_HEAD)
                    x, att = WindowAttentionBlock(
                        heads,
                        self.attention,
                        self.attention_options,
                        self.window,
                        self.pos_init_std,
                        self.dtype,
                        name=name,
                    )(x)
                    self.sow(INTERMEDIATES, block_feature(index, "attention"), x)
                    if att is not None:  # a fused attention implementation returns no weights
                        self.sow(INTERMEDIATES, attention_weights(index), att)
                else:
                    strides = 2 if stage > 0 and block == 0 else 1
                    x = PreActBlock(features, strides, self.dtype, name=name)(x, train)
                    self.sow(INTERMEDIATES, block_feature(index, "conv"), x)
                index += 1
        x = nn.relu(batch_norm(train, self.dtype, "final_bn")(x))
        feat_BxC = x.astype(jnp.float32).mean(axis=(1, 2))
        feat_BxC = nn.Dropout(self.dropout, deterministic=not train)(feat_BxC)
        return nn.Dense(self.num_classes, dtype=jnp.float32, name="head")(feat_BxC)


def build(fields, *, num_classes: int, image_size: int, channels: int, dtype) -> AlterNet:
    """The `MODELS` constructor: variant "<size>[/<msas>]" (see `parse_variant`), attention,
    pos_init_std and dropout from the config's model fields; the ViT's other fields do not apply."""
    del image_size
    widths, msas = parse_variant(fields["variant"])
    return AlterNet(
        num_classes=num_classes,
        stage_features=widths,
        stage_msa=msas,
        attention=fields["attention"],
        attention_options=parse_options(fields["attention"], fields["attention_options"]),
        pos_init_std=float(fields["pos_init_std"]),
        dropout=float(fields["dropout"]),
        dtype=dtype,
        channels=channels,
    )
