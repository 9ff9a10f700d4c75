"""The inputs of the PK22 suite, streamed in batches (`posattn.papers.pk22.suite`).

Test images for the Fourier, variance and noise tools (`stream_forward`, the noise of image i drawn
from fold_in(key, i)); augmented, mixed-up training mini-batches for the Hessian and the landscape
(`training_minibatches`, mini-batch j augmented and mixed from its index j). So a split of any size
fits, no program sees more than one batch, and the answer does not depend on the batch size.
"""

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np

from posattn.analysis import objective
from posattn.errors import ConfigError
from posattn.papers.pk22.settings import Settings
from posattn.vision.setup import Setup


def test_set(setup: Setup, limit: int | None = None):
    """(inputs, labels) of the test split (its first `limit` images), as the model sees them, in one
    array: for a small split (`measure` streams it in batches instead)."""
    split = setup.split("test")
    n = split.num_examples if limit is None else min(limit, split.num_examples)
    return test_inputs(setup, split, np.arange(n))


def test_inputs(setup: Setup, split, indices):
    """(inputs, labels) of the test images `indices`, as the model sees them."""
    images, labels = split.read(indices)
    return setup.eval_inputs(setup.permutation(jnp.asarray(images))), jnp.asarray(labels)


def fold_keys(key, indices) -> jax.Array:
    """fold_in(key, i) for every i of `indices`: the keys of numbered units, whatever their batching."""
    return jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.asarray(indices))


def batches_of(n: int, size: int):
    """(start, indices_size) of the batches that cover 0 .. n - 1 in order; the last is padded with
    index 0, and its padding is dropped by the caller (start + size > n)."""
    for start in range(0, n, size):
        idx = np.arange(start, start + size)
        yield start, np.where(idx < n, idx, 0)


def mixed_minibatches(
    key, images_NxHxWxC, labels_N, num_classes: int, b: int, settings: Settings, first: int = 0
):
    """The images in N / b mini-batches of b, mini-batch j mixed up with its own lambda (drawn from
    `fold_in(key, first + j)`) and given PK22's soft targets (`objective.mixed_targets`):
    (images_MxbxHxWxC, targets_MxbxK). `first`: the index of the first mini-batch in its stream."""
    M = images_NxHxWxC.shape[0] // b
    x = images_NxHxWxC.reshape(M, b, *images_NxHxWxC.shape[1:])
    keys = fold_keys(key, first + jnp.arange(M))
    mix = functools.partial(
        objective.mixed_targets,
        num_classes=num_classes,
        alpha=settings.mixup_alpha,
        smoothing=settings.label_smoothing,
    )
    return jax.vmap(mix)(keys, x, labels_N.reshape(M, b))


def training_minibatches(
    setup: Setup, settings: Settings, aug_key, mix_key, images_NxHxWxC, labels_N, first
):
    """Raw training images -> their augmented, mixed mini-batches of `settings.hessian_batch_size`
    (`mixed_minibatches`), mini-batch j augmented with `fold_in(aug_key, first + j)`: so a stream of
    images cut into batches of whole mini-batches gives the same mini-batches whatever the cut."""
    b = settings.hessian_batch_size
    M = images_NxHxWxC.shape[0] // b
    keys = fold_keys(aug_key, first + jnp.arange(M))
    x = jax.vmap(setup.training_inputs)(
        keys, images_NxHxWxC.reshape(M, b, *images_NxHxWxC.shape[1:])
    )
    return mixed_minibatches(
        mix_key,
        x.reshape(images_NxHxWxC.shape),
        labels_N,
        setup.info.num_classes,
        b,
        settings,
        first,
    )


def training_batches(setup: Setup, settings: Settings, order, aug_key, mix_key):
    """train_batch(indices, first, stream): the augmented, mixed mini-batches of the training images
    order[indices] (from the start again past the split's end), the first of them mini-batch `first` of
    stream `stream` (0: the Hessian's, 1: the landscape's), each stream with keys of its own."""
    train = setup.split("train")
    b = settings.hessian_batch_size
    minibatches = jax.jit(functools.partial(training_minibatches, setup, settings))

    def train_batch(indices, first, stream):
        images, labels = train.read(order[indices % train.num_examples])
        keys = [jax.random.fold_in(k, stream) for k in (aug_key, mix_key)]
        # one mini-batch per call, so one program (2-3 s of compile on a CPU) serves both streams;
        # mini-batch j is drawn from its index whatever the cut (`training_minibatches`)
        parts = [
            minibatches(
                *keys,
                jnp.asarray(images[j : j + b]),
                jnp.asarray(labels[j : j + b]),
                first + j // b,
            )
            for j in range(0, len(indices), b)
        ]
        return jax.tree.map(lambda *a: jnp.concatenate(a), *parts)

    return train_batch


def test_batch(setup: Setup, split, indices, key):
    """(inputs, labels, noise keys) of the test images `indices`: image i's noise key is fold_in(key, i)."""
    return (*test_inputs(setup, split, indices), fold_keys(key, indices))


def stream_forward(run, setup: Setup, settings: Settings, key, limit: int | None = None) -> dict:
    """`run(x, labels, keys)` (a compiled `forward_measures`) over the test split (its first `limit`
    images) in batches of `settings.eval_batch_size`: {"correct": (1+F, N), "profiles": {layer: (n_feat,
    points)}, "variances": {layer: (n_feat,)}} with n_feat = min(N, settings.feature_images) (the first
    images). Padding is dropped, so the answer does not depend on the batch size."""
    split = setup.split("test")
    n = split.num_examples if limit is None else min(limit, split.num_examples)
    n_feat = min(n, settings.feature_images)
    correct, profiles, variances = [], collections.defaultdict(list), collections.defaultdict(list)
    for start, idx in batches_of(n, settings.eval_batch_size):
        c, p, v = jax.device_get(run(*test_batch(setup, split, idx, key)))
        real = min(n - start, len(idx))
        correct.append(np.asarray(c)[:, :real])
        keep = max(0, min(real, n_feat - start))
        for name in p:
            profiles[name].append(np.asarray(p[name])[:keep])
            variances[name].append(np.asarray(v[name])[:keep])
    return {
        "correct": np.concatenate(correct, axis=1),
        "profiles": {k: np.concatenate(v) for k, v in profiles.items()},
        "variances": {k: np.concatenate(v) for k, v in variances.items()},
    }


def landscape_image_count(settings: Settings, num_train: int) -> int:
    """How many training images the landscape scores: `settings.landscape_images`, or for 0 the whole
    split rounded down to whole landscape batches; ConfigError where the split has too few."""
    size = settings.landscape_batch_size
    n = settings.landscape_images or num_train // size * size
    if n < 2 * size or n > num_train:  # 2 batches: the units of its intervals
        raise ConfigError(
            f"landscape_images={settings.landscape_images}: the training split has {num_train} "
            f"images; give at most that many, a multiple of landscape_batch_size={size} and at "
            "least 2 of them"
        )
    return n
