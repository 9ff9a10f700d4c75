"""Vision Transformer (Dosovitskiy et al. 2021) with vanilla or positional attention (SPEC 2.1).

Pre-LayerNorm encoder: z <- z + Attn(LN(z)), z <- z + MLP(LN(z)), a final LayerNorm, then global average
pooling over the tokens ("gap", the default of SPEC 2.1) or the CLS token ("cls"), and a linear head.

Positional embedding P (T x D, T = number of tokens):
- vanilla: P is always added to the patch embeddings (the usual ViT);
- positional: P makes the attention matrices (see attention.py). `pos_shared` = one P for all blocks
  (parameter "pos_embedding" of shape (T, D)); otherwise one per block (shape (depth, T, D)).
  `pos_add` also adds P (with one P per block: the first block's) to the patch embeddings; by default it
  is not added, as in Definition 3.2 of JSL22. With "cls" pooling the CLS token has its own learned row
  of P (row 0), like every patch.
P starts as N(0, pos_init_std^2), by default 1: entries on the scale of a LayerNorm'd token (and of the
sin-cos embeddings of big_vision), so position is as visible as content from the first step. DeiT's 0.02
leaves a ViT a bag of patches for its first few hundred steps, which small data sets (the 8x8 digits)
cannot afford; for positional attention, std 1 makes the logits of S at initialisation as spread as
those of vanilla attention on LayerNorm'd tokens.
Parameters stay float32; `dtype` is the compute dtype (bfloat16 for mixed precision); logits are float32.
"""
from typing import Any

import jax
import jax.numpy as jnp
import flax.linen as nn

from posattn.vision.models.attention import PositionalAttention, VanillaAttention

_KERNEL_INIT = nn.initializers.xavier_uniform()


class MLP(nn.Module):
    """Two-layer GELU MLP of a transformer block."""

    mlp_dim: int
    dropout: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x_BxNxD: jax.Array, train: bool) -> jax.Array:
        width = x_BxNxD.shape[-1]
        h_BxNxF = nn.Dense(self.mlp_dim, dtype=self.dtype, kernel_init=_KERNEL_INIT, name="fc1")(x_BxNxD)
        h_BxNxF = nn.gelu(h_BxNxF)
        h_BxNxF = nn.Dropout(self.dropout, deterministic=not train)(h_BxNxF)
        y_BxNxD = nn.Dense(width, dtype=self.dtype, kernel_init=_KERNEL_INIT, name="fc2")(h_BxNxF)
        return nn.Dropout(self.dropout, deterministic=not train)(y_BxNxD)


class EncoderBlock(nn.Module):
    """One pre-LN transformer block; `p_NxD` is given for positional attention, None for vanilla."""

    num_heads: int
    mlp_dim: int
    attention: str = "positional"
    dropout: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x_BxNxD: jax.Array, p_NxD: jax.Array | None, train: bool) -> jax.Array:
        y_BxNxD = nn.LayerNorm(dtype=self.dtype, name="norm1")(x_BxNxD)
        if self.attention == "positional":
            y_BxNxD = PositionalAttention(self.num_heads, dtype=self.dtype, name="attn")(y_BxNxD, p_NxD)
        else:
            y_BxNxD = VanillaAttention(self.num_heads, dtype=self.dtype, name="attn")(y_BxNxD)
        x_BxNxD = x_BxNxD + nn.Dropout(self.dropout, deterministic=not train)(y_BxNxD)
        y_BxNxD = nn.LayerNorm(dtype=self.dtype, name="norm2")(x_BxNxD)
        return x_BxNxD + MLP(self.mlp_dim, self.dropout, dtype=self.dtype, name="mlp")(y_BxNxD, train)


class ViT(nn.Module):
    """ViT classifier; build it with `posattn.vision.models.create_model`, which validates the fields."""

    num_classes: int
    image_size: int
    patch_size: int
    width: int
    depth: int
    num_heads: int
    mlp_dim: int
    attention: str = "positional"  # vanilla | positional
    pos_shared: bool = True
    pos_add: bool = False
    pool: str = "gap"  # gap | cls
    dropout: float = 0.0
    dtype: Any = jnp.float32
    pos_init_std: float = 1.0

    @nn.compact
    def __call__(self, images_BxHxWxC: jax.Array, train: bool = False) -> jax.Array:
        if images_BxHxWxC.shape[1:3] != (self.image_size, self.image_size):
            raise ValueError(
                f"images are {images_BxHxWxC.shape[1:3]}, the model was built for "
                f"{(self.image_size, self.image_size)}"
            )
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
        pos_init = nn.initializers.normal(stddev=self.pos_init_std)

        if self.attention == "vanilla":
            pos_TxD = self.param("pos_embedding", pos_init, (T, D))
            x_BxTxD = x_BxTxD + pos_TxD.astype(self.dtype)
            p_per_block = [None] * self.depth
        elif self.pos_shared:
            P_TxD = self.param("pos_embedding", pos_init, (T, D))
            p_per_block = [P_TxD] * self.depth
        else:
            P_LxTxD = self.param("pos_embedding", pos_init, (self.depth, T, D))
            p_per_block = [P_LxTxD[i] for i in range(self.depth)]
        if self.attention == "positional" and self.pos_add:
            x_BxTxD = x_BxTxD + p_per_block[0].astype(self.dtype)

        x_BxTxD = nn.Dropout(self.dropout, deterministic=not train)(x_BxTxD)
        for i in range(self.depth):
            x_BxTxD = EncoderBlock(
                self.num_heads,
                self.mlp_dim,
                attention=self.attention,
                dropout=self.dropout,
                dtype=self.dtype,
                name=f"block_{i}",
            )(x_BxTxD, p_per_block[i], train)
        x_BxTxD = nn.LayerNorm(dtype=self.dtype, name="encoder_norm")(x_BxTxD)

        # Pool and classify in float32: the head is tiny and the logits feed a float32 loss.
        x_BxTxD = x_BxTxD.astype(jnp.float32)
        feat_BxD = x_BxTxD[:, 0] if self.pool == "cls" else x_BxTxD.mean(axis=1)
        # Zero-initialised head (ViT paper): every class starts at the same logit.
        return nn.Dense(
            self.num_classes, dtype=jnp.float32, kernel_init=nn.initializers.zeros, name="head"
        )(feat_BxD)
