"""Vision Transformer (Dosovitskiy et al. 2021) with vanilla or positional attention (JSL22 Section 3).

Pre-LayerNorm encoder: z <- z + Attn(LN(z)), z <- z + MLP(LN(z)), a final LayerNorm, then global average
pooling over the tokens ("gap", the default) or the CLS token ("cls"), and a linear head. The MLP's GELU
is flax's tanh approximation ("tanh", the default) or the exact erf form ("erf": PyTorch's and timm's
`nn.GELU()`, which a ViT imported from timm needs, `posattn.vision.timm_import`).

Positional embedding P (T x D, T = number of tokens):
- vanilla: P is always added to the patch embeddings (the usual ViT);
- positional: P makes the attention matrices (see attention.py). `pos_shared` = one P for all blocks
  (parameter "pos_embedding" of shape (T, D)); otherwise one per block (shape (depth, T, D)).
  `pos_add` also adds P (with one P per block: the first block's) to the patch embeddings; by default it
  is not added, as in Definition 3.2 of JSL22. With "cls" pooling the CLS token has its own learned row
  of P (row 0), like every patch.
P starts as N(0, pos_init_std^2), by default 0.02, the start of the original ViT, DeiT and timm: what P
holds is then learnt from a small start rather than being a random code of norm ~sqrt(D) from the
first step (docs/decisions.md, Models; the digits config keeps 1, by a measurement there).
`keep_BxN` (bool over the patch tokens, optional) removes the tokens where it is False: they leave every
attention softmax as keys and the pooling, so the logits do not depend on them (LWLC23's token
sparsification, Eq. (1)); the CLS token is always kept. None (the default) keeps all.
Parameters stay float32; `dtype` is the compute dtype (bfloat16 for mixed precision); logits are float32.

Memory levers (docs/benchmarks.md, "Memory levers"): `remat` "block" recomputes each block's activations
in the backward pass from its input (`nn.remat`), a `REMAT_POLICIES` name keeps what that
`jax.checkpoint_policies` policy saves and recomputes the rest; the numbers are the same to float32
rounding. `scan_layers` runs the blocks as one `nn.scan` (one compiled block instead of `depth`): their
parameters lie under "blocks" with a leading depth axis (`stack_blocks` / `unstack_blocks` convert
from / to the loop's "block_{i}"), a per-block P (pos_shared=False) is scanned over with them, and the
sown features and attention weights are the loop's (stacked by the scan only when they are asked for).
Its initial parameters are a different draw from the same distributions as the loop's; from the same
parameters it computes the loop's numbers to float32 rounding (dropout masks differ).
"""

import numbers
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError, check_choice
from posattn.vision.models.attention import ATTENTIONS, parse_options
from posattn.vision.models.checks import check_classifier_fields, check_images
from posattn.vision.models.sown import INTERMEDIATES, attention_weights, block_feature
from posattn.vision.models.variants import SHAPE_FIELDS, override_shape, parse_variant

_KERNEL_INIT = nn.initializers.xavier_uniform()
POOLS = ("gap", "cls")
GELUS = ("tanh", "erf")  # jax.nn.gelu(approximate=True) | (approximate=False)
# model.remat: "none", "block" (save each block's input only), or one of jax.checkpoint_policies' plain
# policies (its other names build a policy from arguments, which a config string cannot give).
REMAT_POLICIES = (
    "nothing_saveable",
    "everything_saveable",
    "dots_saveable",
    "checkpoint_dots",
    "dots_with_no_batch_dims_saveable",
    "checkpoint_dots_with_no_batch_dims",
)
REMATS = ("none", "block", *REMAT_POLICIES)
SCANNED = "blocks"  # the name of the scanned blocks' stacked parameters (scan_layers)


class MLP(nn.Module):
    """Two-layer GELU MLP of a transformer block."""

    mlp_dim: int
    dropout: float = 0.0
    dtype: Any = jnp.float32
    gelu: str = "tanh"  # GELUS

    @nn.compact
    def __call__(self, x_BxNxD: jax.Array, train: bool) -> jax.Array:
        width = x_BxNxD.shape[-1]
        h_BxNxF = nn.Dense(self.mlp_dim, dtype=self.dtype, kernel_init=_KERNEL_INIT, name="fc1")(
            x_BxNxD
        )
        h_BxNxF = nn.gelu(h_BxNxF, approximate=self.gelu == "tanh")
        h_BxNxF = nn.Dropout(self.dropout, deterministic=not train)(h_BxNxF)
        y_BxNxD = nn.Dense(width, dtype=self.dtype, kernel_init=_KERNEL_INIT, name="fc2")(h_BxNxF)
        return nn.Dropout(self.dropout, deterministic=not train)(y_BxNxD)


class EncoderBlock(nn.Module):
    """One pre-LN transformer block: z <- z + Attn(LN(z)), then z <- z + MLP(LN(z)).

    Returns (stream after the attention branch, stream after the MLP branch, attention weights);
    `p_NxD` is the block's P, used by the attention kinds that take position; `keep_BxN` the tokens
    that stay keys of the attention (None: all).
    """

    num_heads: int
    mlp_dim: int
    attention: str = "positional"
    attention_options: tuple = ()  # (name, value) pairs of the kind's own fields (`parse_options`)
    dropout: float = 0.0
    dtype: Any = jnp.float32
    gelu: str = "tanh"  # GELUS

    @nn.compact
    def __call__(
        self,
        x_BxNxD: jax.Array,
        p_NxD: jax.Array | None,
        train: bool,
        keep_BxN: jax.Array | None = None,
    ):
        y_BxNxD = nn.LayerNorm(dtype=self.dtype, name="norm1")(x_BxNxD)
        y_BxNxD, att = ATTENTIONS[self.attention](
            self.num_heads, dtype=self.dtype, name="attn", **dict(self.attention_options)
        )(y_BxNxD, p_NxD, keep_BxN)
        x_BxNxD = x_BxNxD + nn.Dropout(self.dropout, deterministic=not train)(y_BxNxD)
        y_BxNxD = nn.LayerNorm(dtype=self.dtype, name="norm2")(x_BxNxD)
        out_BxNxD = x_BxNxD + MLP(
            self.mlp_dim, self.dropout, dtype=self.dtype, gelu=self.gelu, name="mlp"
        )(y_BxNxD, train)
        return x_BxNxD, out_BxNxD, att


class ViT(nn.Module):
    """ViT classifier; `create_model` builds it from a config. Fields are checked at construction.

    Sows (see `posattn.vision.models`): "stem", the patch embeddings as they enter the first block (P
    added where the kind adds it), then per block i "block_{i:02d}/attention" and
    "block_{i:02d}/mlp", the residual stream after each branch, as (B, h, w, D) maps of the patch grid
    (CLS token dropped); and the attention weights of block i as "block_{i:02d}".
    """

    num_classes: int
    image_size: int
    patch_size: int
    width: int
    depth: int
    num_heads: int
    mlp_dim: int
    attention: str = "positional"  # a name of ATTENTIONS
    attention_options: tuple = ()  # (name, value) pairs of its own fields (`attention.parse_options`)
    pos_shared: bool = True
    pos_add: bool = False
    pool: str = "gap"  # gap | cls
    dropout: float = 0.0
    dtype: Any = jnp.float32
    pos_init_std: float = 0.02
    channels: int | None = None  # of the images it takes (None: any); `create_model` sets it
    gelu: str = "tanh"  # GELUS: the MLP's GELU (module docstring)
    remat: str = "none"  # REMATS (module docstring)
    scan_layers: bool = False  # the blocks as one nn.scan (module docstring)

    def __post_init__(self):
        check_classifier_fields(self.num_classes, self.dropout)
        check_choice(self.attention, ATTENTIONS, "attention")
        check_choice(self.pool, POOLS, "pool")
        check_choice(self.gelu, GELUS, "gelu")
        check_choice(self.remat, REMATS, "model.remat")
        if not isinstance(self.scan_layers, (bool, np.bool_)):
            raise ConfigError(f"model.scan_layers={self.scan_layers!r}: give True or False")
        if self.patch_size < 1 or self.image_size % self.patch_size:
            raise ConfigError(
                f"patch size {self.patch_size} does not divide the image size {self.image_size}: pick a "
                f"patch size among the divisors "
                f"{[p for p in range(1, self.image_size + 1) if self.image_size % p == 0]}"
            )
        if self.num_heads < 1 or self.width % self.num_heads:
            raise ConfigError(
                f"width {self.width} does not divide into num_heads={self.num_heads} heads: "
                "use a number of heads that divides the width"
            )
        if self.depth < 1 or self.mlp_dim < 1:
            raise ConfigError(f"depth ({self.depth}) and mlp_dim ({self.mlp_dim}) must be positive")
        if not self.pos_init_std > 0:
            raise ConfigError(f"model.pos_init_std must be positive, got {self.pos_init_std}")
        super().__post_init__()

    def _sow_grid(self, name: str, x_BxTxD: jax.Array, grid_hw: tuple[int, int]) -> None:
        """Sow the token stream as a (B, h, w, D) map of the patch grid, without the CLS token."""
        patches_BxNxD = x_BxTxD[:, 1:] if self.pool == "cls" else x_BxTxD
        B, _, D = patches_BxNxD.shape
        self.sow(INTERMEDIATES, name, patches_BxNxD.reshape(B, *grid_hw, D))

    def _sow_block(self, i: int, mid_BxTxD, out_BxTxD, att, grid_hw) -> None:
        """Sow block i's residual stream after each branch and its attention weights."""
        self._sow_grid(block_feature(i, "attention"), mid_BxTxD, grid_hw)
        self._sow_grid(block_feature(i, "mlp"), out_BxTxD, grid_hw)
        if att is not None:  # a fused attention implementation returns no weights
            self.sow(INTERMEDIATES, attention_weights(i), att)

    def _block(self, name: str) -> EncoderBlock:
        """An EncoderBlock named `name`, rematerialised as `remat` says (`train`, its argument 3
        counting self, is a Python bool the block branches on: static)."""
        cls = EncoderBlock
        if self.remat != "none":
            policy = None if self.remat == "block" else getattr(jax.checkpoint_policies, self.remat)
            # inside a scan the loop already keeps XLA from merging the recomputation into the
            # forward pass, so the CSE barrier only costs (the flax docs' advice)
            cls = nn.remat(
                EncoderBlock, static_argnums=(3,), policy=policy, prevent_cse=not self.scan_layers
            )
        return cls(
            self.num_heads,
            self.mlp_dim,
            attention=self.attention,
            attention_options=self.attention_options,
            dropout=self.dropout,
            dtype=self.dtype,
            gelu=self.gelu,
            name=name,
        )

    def _scanned_blocks(self, x_BxTxD, p_xs, p_axis, train: bool, keep_BxT, grid_hw):
        """The `depth` blocks as one nn.scan over their stacked parameters (`SCANNED`); sows what the
        loop sows."""
        sow = self.is_mutable_collection(INTERMEDIATES)

        def body(block, x_BxTxD, p_NxD, keep_BxT):
            mid_BxTxD, out_BxTxD, att = block(x_BxTxD, p_NxD, train, keep_BxT)
            # the per-block values leave the scan (stacked, depth x a block's stream) only when they
            # are sown: a train step keeps none of them
            return out_BxTxD, ((mid_BxTxD, out_BxTxD, att) if sow else None)

        scan = nn.scan(
            body,
            variable_axes={"params": 0},
            split_rngs={"params": True, "dropout": True},
            in_axes=(p_axis, nn.broadcast),
            length=self.depth,
        )
        x_BxTxD, per_block = scan(self._block(SCANNED), x_BxTxD, p_xs, keep_BxT)
        if sow:
            mid_LxBxTxD, out_LxBxTxD, att = per_block
            for i in range(self.depth):
                att_i = None if att is None else att[i]
                self._sow_block(i, mid_LxBxTxD[i], out_LxBxTxD[i], att_i, grid_hw)
        return x_BxTxD

    @nn.compact
    def __call__(
        self, images_BxHxWxC: jax.Array, train: bool = False, keep_BxN: jax.Array | None = None
    ) -> jax.Array:
        check_images(images_BxHxWxC, self.channels, (self.image_size, self.image_size))
        p = self.patch_size
        x_BxhxwxD = nn.Conv(
            self.width, (p, p), strides=(p, p), padding="VALID", dtype=self.dtype, name="embedding"
        )(images_BxHxWxC)
        B, h, w, D = x_BxhxwxD.shape
        x_BxTxD = x_BxhxwxD.reshape(B, h * w, D)
        if self.pool == "cls":
            cls_1x1xD = self.param("cls", nn.initializers.zeros, (1, 1, D))
            cls_Bx1xD = jnp.broadcast_to(cls_1x1xD.astype(x_BxTxD.dtype), (B, 1, D))
            x_BxTxD = jnp.concatenate([cls_Bx1xD, x_BxTxD], axis=1)
        T = x_BxTxD.shape[1]
        keep_BxT = None
        if keep_BxN is not None:
            if keep_BxN.shape != (B, h * w):
                raise ValueError(
                    f"keep_BxN has shape {keep_BxN.shape}, the patch tokens {(B, h * w)}"
                )
            keep_BxT = keep_BxN.astype(bool)
            # a sample that keeps no token has nothing to average: its logits would be 0/0 = NaN (its
            # values are read where the mask is concrete; under jit only its shape is checked)
            # (in numpy: a concrete mask inside a jit trace would give traced reductions)
            if (
                self.pool != "cls"
                and not isinstance(keep_BxT, jax.core.Tracer)
                and not np.asarray(keep_BxT).any(1).all()
            ):
                empty = np.flatnonzero(~np.asarray(keep_BxT).any(1))[:4].tolist()
                raise ConfigError(
                    f"keep_BxN keeps no token of sample(s) {empty}: keep at least one token of "
                    "each (or use pool='cls')"
                )
            if self.pool == "cls":
                keep_BxT = jnp.concatenate([jnp.ones((B, 1), bool), keep_BxT], axis=1)
        pos_init = nn.initializers.normal(stddev=self.pos_init_std)

        takes_position = ATTENTIONS[self.attention].takes_position
        if not takes_position:  # the usual ViT: P added to the patch embeddings
            pos_TxD = self.param("pos_embedding", pos_init, (T, D))
            x_BxTxD = x_BxTxD + pos_TxD.astype(self.dtype)
            p_per_block = [None] * self.depth
        elif self.pos_shared:
            P_TxD = self.param("pos_embedding", pos_init, (T, D))
            p_per_block = [P_TxD] * self.depth
        else:
            P_LxTxD = self.param("pos_embedding", pos_init, (self.depth, T, D))
            p_per_block = [P_LxTxD[i] for i in range(self.depth)]
        if takes_position and self.pos_add:
            x_BxTxD = x_BxTxD + p_per_block[0].astype(self.dtype)

        x_BxTxD = nn.Dropout(self.dropout, deterministic=not train)(x_BxTxD)
        self._sow_grid("stem", x_BxTxD, (h, w))
        if self.scan_layers:
            # a per-block P is scanned over with the blocks' parameters; a shared one (or none) is
            # the same input to every block
            if takes_position and not self.pos_shared:
                p_xs, p_axis = P_LxTxD, 0
            else:
                p_xs, p_axis = p_per_block[0], nn.broadcast
            x_BxTxD = self._scanned_blocks(x_BxTxD, p_xs, p_axis, train, keep_BxT, (h, w))
        else:
            for i in range(self.depth):
                mid_BxTxD, x_BxTxD, att = self._block(f"block_{i}")(
                    x_BxTxD, p_per_block[i], train, keep_BxT
                )
                self._sow_block(i, mid_BxTxD, x_BxTxD, att, (h, w))
        x_BxTxD = nn.LayerNorm(dtype=self.dtype, name="encoder_norm")(x_BxTxD)

        # Pool and classify in float32: the head is tiny and the logits feed a float32 loss.
        x_BxTxD = x_BxTxD.astype(jnp.float32)
        if self.pool == "cls":
            feat_BxD = x_BxTxD[:, 0]
        elif keep_BxT is None:
            feat_BxD = x_BxTxD.mean(axis=1)
        else:  # the average over the kept tokens only
            kept_BxTx1 = keep_BxT[..., None].astype(jnp.float32)
            feat_BxD = (x_BxTxD * kept_BxTx1).sum(axis=1) / kept_BxTx1.sum(axis=1)
        # Zero-initialised head (ViT paper): every class starts at the same logit.
        return nn.Dense(
            self.num_classes, dtype=jnp.float32, kernel_init=nn.initializers.zeros, name="head"
        )(feat_BxD)


def build(fields, *, num_classes: int, image_size: int, channels: int, dtype) -> ViT:
    """The `MODELS` constructor: a ViT from the config's model fields; variant "<family>/<patch>"
    gives the shape, and a non-zero patch_size, width, depth, num_heads or mlp_dim overrides that
    part of it (e.g. variant "S/16" with depth 6: a 6-block ViT-S)."""
    shape, variant_patch = parse_variant(fields["variant"])
    shape = override_shape(shape, **{name: fields[name] for name in SHAPE_FIELDS})
    patch_size = fields["patch_size"]
    # (int() would make a patch of 2.5 one of 2, and bool() the string "False" True)
    if (
        isinstance(patch_size, bool)
        or not isinstance(patch_size, numbers.Integral)
        or patch_size < 0
    ):
        raise ConfigError(
            f"model.patch_size must be an integer >= 0 (0 = the variant's), got {patch_size!r}"
        )
    for flag in ("pos_shared", "pos_add", "scan_layers"):
        if not isinstance(fields[flag], (bool, np.bool_)):
            raise ConfigError(f"model.{flag}={fields[flag]!r}: give True or False")
    return ViT(
        num_classes=num_classes,
        image_size=image_size,
        patch_size=patch_size or variant_patch,
        width=shape.width,
        depth=shape.depth,
        num_heads=shape.num_heads,
        mlp_dim=shape.mlp_dim,
        attention=fields["attention"],
        attention_options=parse_options(fields["attention"], fields["attention_options"]),
        pos_shared=bool(fields["pos_shared"]),
        pos_add=bool(fields["pos_add"]),
        pool=fields["pool"],
        dropout=float(fields["dropout"]),
        dtype=dtype,
        pos_init_std=float(fields["pos_init_std"]),
        channels=channels,
        remat=fields["remat"],
        scan_layers=bool(fields["scan_layers"]),
    )


def stack_blocks(params: dict, depth: int) -> dict:
    """A loop ViT's parameters ("block_0" ... "block_{depth-1}") in a scan_layers ViT's layout: the
    blocks' leaves stacked on a leading depth axis under `SCANNED`; the others as they are."""
    blocks = [params[f"block_{i}"] for i in range(depth)]
    rest = {k: v for k, v in params.items() if k not in {f"block_{i}" for i in range(depth)}}
    return {**rest, SCANNED: jax.tree.map(lambda *leaves: jnp.stack(leaves), *blocks)}


def unstack_blocks(params: dict) -> dict:
    """A scan_layers ViT's parameters in the loop's layout ("block_{i}", one per slice of the depth
    axis): the inverse of `stack_blocks`."""
    stacked = params[SCANNED]
    depth = jax.tree.leaves(stacked)[0].shape[0]
    rest = {k: v for k, v in params.items() if k != SCANNED}
    return {**rest, **{f"block_{i}": jax.tree.map(lambda a: a[i], stacked) for i in range(depth)}}
