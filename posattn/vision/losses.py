"""The training loss of the image classifiers: cross-entropy against label-smoothed targets.

`classification_loss` is the loss the train step differentiates; analysis tools (Hessian spectra, loss
landscapes) call the same function, bound to a run by `posattn.vision.setup.Setup.loss_fn`.
"""

import jax
import jax.numpy as jnp
import optax

from posattn.errors import ConfigError


def smoothed_cross_entropy(
    logits_BxK: jax.Array, labels_BxK: jax.Array, smoothing: float
) -> jax.Array:
    """Per-example cross-entropy against (1 - eps) y + eps / K (label smoothing, Szegedy et al. 2016)."""
    num_classes = labels_BxK.shape[-1]
    targets_BxK = labels_BxK * (1.0 - smoothing) + smoothing / num_classes
    return optax.softmax_cross_entropy(logits_BxK.astype(jnp.float32), targets_BxK)


def _check_labels(labels, batch: int, num_classes: int) -> None:
    """ConfigError unless `labels` are (B,) or (B, K) for B images and K classes (a (1,) or (1, K) label
    would broadcast over the batch), and (B,) class indices lie in [0, K) where their values are known:
    one_hot makes an index out of range a zero target, a loss of the smoothing term alone."""
    want = f"({batch},) class indices or ({batch}, {num_classes}) targets"
    if tuple(labels.shape) not in ((batch,), (batch, num_classes)):
        raise ConfigError(
            f"labels of shape {tuple(labels.shape)} for {batch} images of {num_classes} "
            f"classes: give {want}"
        )
    if labels.ndim == 1 and not isinstance(labels, jax.core.Tracer) and batch:
        low, high = int(jnp.min(labels)), int(jnp.max(labels))
        if low < 0 or high >= num_classes:
            raise ConfigError(
                f"labels in [{low}, {high}]: class indices lie in [0, {num_classes}) (labels "
                "counted from 1: subtract 1)"
            )


def classification_loss(
    model,
    params,
    batch_stats,
    images_BxHxWxC,
    labels,
    rng,
    train: bool,
    *,
    # 0 (plain cross-entropy), not the schema's 0.1: the analysis tools measure the plain loss; a run's
    # training loss passes its config.label_smoothing (`setup.Setup.loss_fn`)
    label_smoothing: float = 0.0,
):
    """(mean loss, (logits_BxK, batch_stats after the pass)) of `model` on normalised images.

    labels: int class indices (B,) in [0, K) or targets (B, K) (one-hot, or mixed by mixup); ConfigError
    for another shape or, where they are concrete (not traced), an index out of range. `rng` feeds dropout
    (may be None when `train` is False or the model has none). Models with batch norm update their running
    statistics when `train`; the returned batch_stats are the input ones otherwise (and {} for a ViT).
    """
    variables = (
        {"params": params, "batch_stats": batch_stats} if batch_stats else {"params": params}
    )
    mutable = ["batch_stats"] if batch_stats and train else False
    rngs = {} if rng is None else {"dropout": rng}
    out = model.apply(variables, images_BxHxWxC, train=train, rngs=rngs, mutable=mutable)
    logits_BxK, updates = out if mutable else (out, {"batch_stats": batch_stats})
    _check_labels(labels, *logits_BxK.shape)
    if labels.ndim == 1:
        labels = jax.nn.one_hot(labels, logits_BxK.shape[-1], dtype=jnp.float32)
    loss = smoothed_cross_entropy(logits_BxK, labels, label_smoothing).mean()
    return loss, (logits_BxK, updates.get("batch_stats", {}))
