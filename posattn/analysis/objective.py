"""The objective PK22 measures its Hessians and loss landscapes on: NLL + L2 on augmented data.

PK22's README ("Investigate Loss Landscapes and Hessians With L2 Regularization on Augmented Datasets")
measures "NLL + L2" on augmented training data, since that is what the network was optimised on.

- L2: PK22's code (xxxnell/how-do-vits-work, ops/norm.py, `l2`) sums `torch.norm(param)` over
  `model.parameters()`: the sum of per-tensor Frobenius norms, not squared, over every parameter
  (weights, biases, normalisation scales, class token, positional embedding; batch-norm statistics are
  buffers, not parameters). losslandscape.ipynb plots NLL + weight_decay * l2 with the weight decay of
  configs/cifar100_vit.yaml (`optim.weight_decay` 0.05, AdamW; that file says it served CNNs and ViTs).
  PK22's Hessian code is unpublished (its issue #12: PyHessian called with `weight_decay=`), so its
  form there is unknown. `form="squared"` gives (weight / 2) ||theta||^2, the loss whose gradient is a
  coupled weight decay (it shifts every Hessian eigenvalue by `weight`). The sum of norms is a poor
  Hessian term: its Hessian is weight / ||theta_t|| on each tensor's sphere, so a tensor near zero (a
  key bias, which no loss gradient moves) puts eigenvalues of thousands at the top of the spectrum.
- Augmentation: losslandscape.ipynb passes timm's `Mixup` built from the config's `train.mixup`
  (mixup_alpha 1.0, cutmix_alpha 0.8, prob 1.0) with `label_smoothing` = `train.smoothing` (0.1), and
  ops/tests.py (`test`) scores the model against those soft targets (timm's SoftTargetCrossEntropy).
  `mixed_targets` is its mixup half: one lambda ~ Beta(alpha, alpha) per mini-batch, example i mixed
  with example B-1-i, label-smoothed one-hot targets mixed alike. timm's Mixup takes CutMix instead
  for half of the batches (switch_prob 0.5); CutMix is not implemented here.
"""

import jax
import jax.numpy as jnp
import numpy as np

from posattn.errors import ConfigError
from posattn.vision.data import augment

WEIGHT_DECAY = 0.05  # PK22 configs/cifar100_vit.yaml, optim.weight_decay
MIXUP_ALPHA = 1.0  # PK22 configs/cifar100_vit.yaml, train.mixup.mixup_alpha
LABEL_SMOOTHING = (
    0.1  # PK22 configs/cifar100_vit.yaml, train.smoothing (timm Mixup's label_smoothing)
)
L2_FORMS = ("norms", "squared")


def _norm(x) -> jax.Array:
    """||x||_F whose derivatives at x = 0 are 0, not NaN (PyTorch's norm backward also gives 0 there):
    a tensor still at a zero initialisation must not make the Hessian NaN."""
    sq = jnp.sum(jnp.square(x))
    nonzero = sq > 0
    return jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, sq, 1.0)), 0.0)


def l2_penalty(params, weight: float, form: str = "norms") -> jax.Array:
    """weight * sum over tensors of ||theta_t||_F ("norms", PK22's ops/norm.py `l2`), or
    (weight / 2) * sum over tensors of ||theta_t||_F^2 ("squared")."""
    leaves = [x.astype(jnp.float32) for x in jax.tree.leaves(params)]
    if form == "norms":
        return weight * sum(_norm(x) for x in leaves)
    if form == "squared":
        return 0.5 * weight * sum(jnp.sum(jnp.square(x)) for x in leaves)
    raise ConfigError(f"form={form!r}: choose one of {L2_FORMS}")


def check_labels(labels_B, n: int, num_classes: int) -> None:
    """ConfigError unless `labels_B` are n class indices, (n,), and (where they are concrete, not traced
    under jit) integers in [0, num_classes): a label outside is never predicted and its one-hot is zero,
    so it would lower an accuracy or empty a target silently."""
    if jnp.shape(labels_B) != (n,):
        raise ConfigError(
            f"labels of shape {jnp.shape(labels_B)} for {n} examples: give one class index per "
            "example, shape (B,) (not one-hot)"
        )
    if isinstance(labels_B, jax.core.Tracer):
        return
    labels = np.asarray(labels_B)
    low, high = labels.min(initial=0), labels.max(initial=0)
    if not np.issubdtype(labels.dtype, np.integer) or low < 0 or high >= num_classes:
        raise ConfigError(
            f"labels must be integer class indices in [0, {num_classes}) (got {labels.dtype}, "
            f"{low} .. {high}): check the labels or num_classes"
        )


def mixed_targets(
    key,
    images_BxHxWxC,
    labels_B,
    num_classes: int,
    *,
    alpha: float = MIXUP_ALPHA,
    smoothing: float = LABEL_SMOOTHING,
):
    """(images, targets_BxK) of one mini-batch mixed as timm's Mixup in "batch" mode (module docstring):
    targets (1 - smoothing) y + smoothing / K from one-hot y, then mixup (`augment.mixup`); alpha = 0
    leaves the images and the smoothed targets unmixed. ConfigError for labels not (B,) class indices
    of the B images, labels outside [0, num_classes) where they are concrete (one_hot would make their
    targets all zero), alpha < 0 or smoothing outside [0, 1)."""
    check_labels(labels_B, jnp.shape(images_BxHxWxC)[0], num_classes)
    if not alpha >= 0 or not 0 <= smoothing < 1:
        raise ConfigError(
            f"alpha={alpha}, smoothing={smoothing}: give alpha >= 0 (0: no mixup) and "
            "smoothing in [0, 1)"
        )
    y_BxK = jax.nn.one_hot(labels_B, num_classes, dtype=jnp.float32)
    return augment.mixup(
        key, images_BxHxWxC, y_BxK * (1.0 - smoothing) + smoothing / num_classes, alpha
    )
