"""The training loss of the image classifiers: cross-entropy against label-smoothed targets.

`classification_loss` is the loss the train step differentiates; analysis tools (Hessian spectra, loss
landscapes) call the same function, bound to a run by `posattn.vision.setup.Setup.loss_fn`.
"""
import jax
import jax.numpy as jnp
import optax


def smoothed_cross_entropy(logits_BxK: jax.Array, labels_BxK: jax.Array, smoothing: float) -> jax.Array:
    """Per-example cross-entropy against (1 - eps) y + eps / K (label smoothing, Szegedy et al. 2016)."""
    num_classes = labels_BxK.shape[-1]
    targets_BxK = labels_BxK * (1.0 - smoothing) + smoothing / num_classes
    return optax.softmax_cross_entropy(logits_BxK.astype(jnp.float32), targets_BxK)


def classification_loss(model, params, batch_stats, images_BxHxWxC, labels, rng, train: bool, *,
                        label_smoothing: float = 0.0):
    """(mean loss, (logits_BxK, batch_stats after the pass)) of `model` on normalised images.

    labels: int class indices (B,) or targets (B, K) (one-hot, or mixed by mixup). `rng` feeds dropout
    (may be None when `train` is False or the model has none). Models with batch norm update their running
    statistics when `train`; the returned batch_stats are the input ones otherwise (and {} for a ViT).
    """
    variables = {"params": params, "batch_stats": batch_stats} if batch_stats else {"params": params}
    mutable = ["batch_stats"] if batch_stats and train else False
    rngs = {} if rng is None else {"dropout": rng}
    out = model.apply(variables, images_BxHxWxC, train=train, rngs=rngs, mutable=mutable)
    logits_BxK, updates = out if mutable else (out, {"batch_stats": batch_stats})
    if labels.ndim == 1:
        labels = jax.nn.one_hot(labels, logits_BxK.shape[-1], dtype=jnp.float32)
    loss = smoothed_cross_entropy(logits_BxK, labels, label_smoothing).mean()
    return loss, (logits_BxK, updates.get("batch_stats", {}))
