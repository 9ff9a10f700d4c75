"""Multi-head self-attention of the ViT in its two kinds (JSL22 Section 3), and their registry.

Vanilla: S = softmax((LN(z) W_Q)(LN(z) W_K)^T / sqrt(d_head)), one N x N matrix per example and head.
Positional (Definition 3.2 of JSL22): S = softmax((P W_Q)(P W_K)^T / sqrt(d_head)) from the learned
positional embedding P alone. S does not depend on the input, so it is computed once per forward pass
with shape (H, N, N) and shared by the whole batch: no Q/K projections of the tokens and no per-example
Q K^T or softmax. Both kinds then mix the values LN(z) W_V with S and project back with W_O.

Every kind is called as `module(x_BxNxD, p_NxD, keep_BxN=None) -> (y_BxNxD, att)` with `att` its
softmax weights, (B, H, N, N) or, when they do not depend on the input, (H, N, N). `keep_BxN` (bool)
removes the tokens where it is False from the softmax as keys, so no kept token attends to them: the sum
over the kept tokens S^n of LWLC23 Eq. (1) (token sparsification); None keeps every token.
`takes_position` says where the ViT puts P: into the attention (True) or added to the patch embeddings
(False). Adding a kind is its class here and one line of `ATTENTIONS`; a knob of its own is a field of
its class, set from a config by `model.attention_options` ("name=value,...", `parse_options`).
"""

import ast
import dataclasses
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from posattn.errors import ConfigError, check_choice

# ViT convention (big_vision): Glorot-uniform projections, zero biases.
_KERNEL_INIT = nn.initializers.xavier_uniform()


def _head_dim(width: int, num_heads: int) -> int:
    return width // num_heads


def _project_out(out_BxNxHxK: jax.Array, width: int, dtype) -> jax.Array:
    """W_O: the heads' outputs concatenated and mapped back to the token width."""
    return nn.DenseGeneral(width, axis=(-2, -1), dtype=dtype, kernel_init=_KERNEL_INIT, name="out")(
        out_BxNxHxK
    )


def _drop_keys(logits_BxHxNxN: jax.Array, keep_BxN: jax.Array) -> jax.Array:
    """Logits with the removed keys at -inf, so the softmax gives them weight exactly 0 (every query
    keeps at least one key: the ViT never removes every token)."""
    return jnp.where(keep_BxN[:, None, None, :], logits_BxHxNxN, -jnp.inf)


# `VanillaAttention.implementation`: "einsum" writes the products and the softmax out (the weights are
# returned for maps and features); the others call `jax.nn.dot_product_attention` with that
# implementation ("xla", or "cudnn": the fused kernel of an NVIDIA GPU, bfloat16 or float16 only),
# which never materialises the weights.
IMPLEMENTATIONS = ("einsum", "xla", "cudnn")


class VanillaAttention(nn.Module):
    """Standard multi-head self-attention; queries, keys and values all come from the tokens.

    `implementation` (`IMPLEMENTATIONS`): the fused ones return None for the weights, so a model built
    with them trains and predicts but has no attention maps."""

    num_heads: int
    dtype: Any = jnp.float32
    implementation: str = "einsum"
    takes_position: ClassVar[bool] = False

    def __post_init__(self):
        check_choice(self.implementation, IMPLEMENTATIONS, "vanilla attention implementation")
        super().__post_init__()

    @nn.compact
    def __call__(
        self, x_BxNxD: jax.Array, p_NxD: jax.Array | None = None, keep_BxN: jax.Array | None = None
    ):
        del p_NxD  # P was added to the patch embeddings
        width = x_BxNxD.shape[-1]
        H, K = self.num_heads, _head_dim(width, self.num_heads)
        # One fused matmul for Q, K and V of all heads.
        qkv_BxNx3xHxK = nn.DenseGeneral(
            (3, H, K), dtype=self.dtype, kernel_init=_KERNEL_INIT, name="qkv"
        )(x_BxNxD)
        q_BxNxHxK, k_BxNxHxK, v_BxNxHxK = (qkv_BxNx3xHxK[:, :, i] for i in range(3))
        if self.implementation != "einsum":
            mask = None if keep_BxN is None else keep_BxN[:, None, None, :]
            out_BxNxHxK = jax.nn.dot_product_attention(
                q_BxNxHxK, k_BxNxHxK, v_BxNxHxK, mask=mask, implementation=self.implementation
            )
            return _project_out(out_BxNxHxK, width, self.dtype), None
        # Scaling q (B N H K) rather than the logits (B H N N) is the cheaper place for 1/sqrt(d_head).
        logits_BxHxNxN = jnp.einsum("bnhk,bmhk->bhnm", q_BxNxHxK * K**-0.5, k_BxNxHxK)
        # Softmax in float32: bf16 logits lose the small differences that decide the weights.
        logits_BxHxNxN = logits_BxHxNxN.astype(jnp.float32)
        if keep_BxN is not None:
            logits_BxHxNxN = _drop_keys(logits_BxHxNxN, keep_BxN)
        att_BxHxNxN = jax.nn.softmax(logits_BxHxNxN, axis=-1)
        out_BxNxHxK = jnp.einsum("bhnm,bmhk->bnhk", att_BxHxNxN.astype(self.dtype), v_BxNxHxK)
        return _project_out(out_BxNxHxK, width, self.dtype), att_BxHxNxN


class PositionalAttention(nn.Module):
    """Positional attention (JSL22 Definition 3.2): S from P only, values from the tokens."""

    num_heads: int
    dtype: Any = jnp.float32
    takes_position: ClassVar[bool] = True

    @nn.compact
    def __call__(self, x_BxNxD: jax.Array, p_NxD: jax.Array, keep_BxN: jax.Array | None = None):
        width = x_BxNxD.shape[-1]
        H, K = self.num_heads, _head_dim(width, self.num_heads)
        if p_NxD.shape != x_BxNxD.shape[1:]:
            raise ValueError(
                f"P has shape {p_NxD.shape}, the tokens {x_BxNxD.shape[1:]}: they must match"
            )
        # S is computed once, in float32: it is N x N per head, tiny next to the token stream.
        q_NxHxK = nn.DenseGeneral(
            (H, K), dtype=jnp.float32, kernel_init=_KERNEL_INIT, name="query"
        )(p_NxD)
        k_NxHxK = nn.DenseGeneral((H, K), dtype=jnp.float32, kernel_init=_KERNEL_INIT, name="key")(
            p_NxD
        )
        logits_HxNxN = jnp.einsum("nhk,mhk->hnm", q_NxHxK * K**-0.5, k_NxHxK)
        # One fused V projection for all heads, one batched mixing einsum shared by the batch.
        v_BxNxHxK = nn.DenseGeneral(
            (H, K), dtype=self.dtype, kernel_init=_KERNEL_INIT, name="value"
        )(x_BxNxD)
        if keep_BxN is None:
            S_HxNxN = jax.nn.softmax(logits_HxNxN, axis=-1)
            out_BxNxHxK = jnp.einsum("hnm,bmhk->bnhk", S_HxNxN.astype(self.dtype), v_BxNxHxK)
            return _project_out(out_BxNxHxK, width, self.dtype), S_HxNxN
        # Removing tokens makes S per example: the same logits, renormalised over each one's kept keys.
        S_BxHxNxN = jax.nn.softmax(_drop_keys(logits_HxNxN[None], keep_BxN), axis=-1)
        out_BxNxHxK = jnp.einsum("bhnm,bmhk->bnhk", S_BxHxNxN.astype(self.dtype), v_BxNxHxK)
        return _project_out(out_BxNxHxK, width, self.dtype), S_BxHxNxN


# name -> attention module: the names `model.attention` of a config takes.
ATTENTIONS = {
    "vanilla": VanillaAttention,
    "positional": PositionalAttention,
}

# The fields every kind has, set by the model, never by `model.attention_options`.
_SET_BY_THE_MODEL = ("num_heads", "dtype", "parent", "name")


def parse_options(attention: str, text: str) -> tuple[tuple[str, Any], ...]:
    """`model.attention_options` ("name=value,...", values Python literals, e.g. "tau=0.5,window=3"; ""
    none) as (name, value) pairs of fields of the kind `ATTENTIONS[attention]`, hashable so that a flax
    module can hold them; ConfigError naming the kind's fields for a name it lacks or a value that is
    not a literal."""
    check_choice(attention, ATTENTIONS, "attention")
    module = ATTENTIONS[attention]
    knobs = [
        f.name for f in dataclasses.fields(module) if f.init and f.name not in _SET_BY_THE_MODEL
    ]
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, value = (part.strip() for part in item.partition("="))
        if not eq or name not in knobs:
            raise ConfigError(
                f"model.attention_options={text!r}: {item!r} is not NAME=VALUE with NAME a field of "
                f"the {attention!r} attention ({', '.join(knobs) or 'it has none'})"
            )
        try:
            pairs.append((name, ast.literal_eval(value)))
        except (ValueError, SyntaxError):
            raise ConfigError(
                f"model.attention_options={text!r}: the value of {name} is not a Python literal "
                f"(a number, True/False, a quoted string)"
            ) from None
    return tuple(pairs)
