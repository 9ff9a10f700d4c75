"""Analytic FLOP count of a ViT (`vit.ViT`) in each attention kind, from its shapes: the matmul FLOPs
that model-FLOPs utilisation (MFU) divides by, as in PaLM (Chowdhery et al. 2022).

With n = (image side / p)^2 patches of p x p pixels and C channels, T tokens (n, plus the CLS token
under "cls" pooling), width D, MLP size F, depth L and c classes, one example's forward pass does these
multiply-adds (MACs):

    patch embedding       n p^2 C D
    per block, vanilla    3 T D^2 (fused Q, K, V) + T^2 D (Q K^T) + T^2 D (S V) + T D^2 (W_O)
    per block, positional     T D^2 (V)                           + T^2 D (S V) + T D^2 (W_O)
    per block, both       2 T D F (the MLP)
    head                  D c

and positional attention adds, once per forward pass whatever the batch (S is shared by the batch,
JSL22 Definition 3.2; docs/decisions.md, Models), per block 2 T D^2 (P W_Q, P W_K) + T^2 D (the logits).
A MAC is 2 FLOPs. LayerNorm, softmax, GELU, biases, residual adds and pooling are not counted
(elementwise, O(T D) against the O(T D^2) above). One training step is taken as 3 forward passes
(the backward pass multiplies each matmul twice, for the input's and the weight's gradient), the usual
convention of MFU, although the patch embedding's input needs no gradient.
"""

from posattn.errors import check_choice
from posattn.vision.models.vit import ViT

ATTENTION_KINDS = ("vanilla", "positional")  # the kinds counted here, each a key of ATTENTIONS
# The backward pass does two matmuls for each of the forward's: one training step is 3 forward passes.
TRAINING_FLOPS_PER_FORWARD = 3


def forward_flops(model: ViT, batch: int, channels: int | None = None) -> float:
    """Matmul FLOPs (2 x MACs) of one forward pass of `model` on `batch` images (see the module
    docstring for the count); positional attention's batch-shared logits are counted once. `channels`:
    the images' (None: the model's own, `model.channels`, so a one-channel run counts one; 3 for a model
    built to take any)."""
    check_choice(model.attention, ATTENTION_KINDS, "attention")
    channels = channels if channels is not None else model.channels or 3
    D, F, L = model.width, model.mlp_dim, model.depth
    patches = (model.image_size // model.patch_size) ** 2
    T = patches + (model.pool == "cls")
    embed = patches * model.patch_size**2 * channels * D
    if model.attention == "vanilla":
        block = 3 * T * D**2 + 2 * T**2 * D + T * D**2
        shared = 0
    else:
        block = T * D**2 + T**2 * D + T * D**2
        shared = L * (2 * T * D**2 + T**2 * D)
    block += 2 * T * D * F
    per_example = embed + L * block + D * model.num_classes
    return 2.0 * (batch * per_example + shared)


def training_flops(model: ViT, batch: int, channels: int | None = None) -> float:
    """Matmul FLOPs of one training step (forward + backward) on `batch` images: 3 x `forward_flops`."""
    return TRAINING_FLOPS_PER_FORWARD * forward_flops(model, batch, channels)
