"""On-device augmentation (posattn.vision.data.augment): crop, flip, RandAugment, normalisation, mixup."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from posattn.errors import ConfigError
from posattn.vision.data import augment as A
from posattn.vision.data.datasets import DatasetInfo

INFO = DatasetInfo(
    name="toy",
    num_classes=10,
    image_shape=(8, 8, 3),
    num_train=1,
    num_test=1,
    mean=(0.5, 0.4, 0.3),
    std=(0.25, 0.2, 0.3),
)


def aug_cfg(**overrides):
    c = ml_collections.ConfigDict(
        dict(
            crop_padding=0,
            flip=False,
            randaugment_layers=0,
            randaugment_magnitude=9,
            mixup_alpha=0.0,
            cutmix_alpha=0.0,
        )
    )
    c.update(overrides)
    return A.Settings.from_config(c)


def images(b=16, h=8, w=8, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(0, 256, (b, h, w, 3), dtype=np.uint8))


def normalised_np(x):
    return (np.asarray(x, np.float32) / 255.0 - np.array(INFO.mean)) / np.array(INFO.std)


def jitted(cfg):
    return jax.jit(lambda k, im: A.augment(k, im, cfg, INFO))


def run(key, x, cfg):
    return jitted(cfg)(key, x)


# one compiled RandAugment pipeline shared by the tests below (compiling it is the slow part)
RANDAUGMENT = jitted(aug_cfg(randaugment_layers=1, randaugment_magnitude=9))


def unnormalised(out):
    return (np.asarray(out) * np.array(INFO.std) + np.array(INFO.mean)) * 255.0


def test_no_crop_no_flip_is_normalisation_only():
    x = images()
    out = run(jax.random.key(0), x, aug_cfg())
    assert out.shape == x.shape and out.dtype == jnp.float32
    np.testing.assert_allclose(out, normalised_np(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(A.preprocess_eval(x, INFO), normalised_np(x), rtol=1e-5, atol=1e-5)


def test_shapes_and_determinism_per_key():
    x = images(b=32)
    a = RANDAUGMENT(jax.random.key(1), x)
    assert a.shape == x.shape and a.dtype == jnp.float32
    np.testing.assert_array_equal(a, RANDAUGMENT(jax.random.key(1), x))
    assert not np.array_equal(a, RANDAUGMENT(jax.random.key(2), x))


def test_flip_mirrors_about_half_of_the_batch():
    x = images(b=64)
    out = np.asarray(run(jax.random.key(3), x, aug_cfg(flip=True)))
    plain, mirrored = normalised_np(x), normalised_np(x[:, :, ::-1])
    is_plain = np.isclose(out, plain, atol=1e-5).all(axis=(1, 2, 3))
    is_mirrored = np.isclose(out, mirrored, atol=1e-5).all(axis=(1, 2, 3))
    assert (is_plain | is_mirrored).all()
    assert 10 < is_mirrored.sum() < 54


def test_crop_is_a_window_of_the_zero_padded_image():
    p = 2
    x = images(b=32)
    out = np.asarray(run(jax.random.key(4), x, aug_cfg(crop_padding=p)))
    padded = np.pad(np.asarray(x), ((0, 0), (p, p), (p, p), (0, 0)))
    offsets = []
    for i in range(len(x)):
        matches = [
            (dy, dx)
            for dy in range(2 * p + 1)
            for dx in range(2 * p + 1)
            if np.allclose(out[i], normalised_np(padded[i, dy : dy + 8, dx : dx + 8]), atol=1e-5)
        ]
        assert matches, f"example {i} is no window of its padded image"
        offsets.append(matches[0])
    assert len(set(offsets)) > 5  # the offsets really vary


def test_randaugment_ops_stay_in_range():
    x = images(b=1)[0].astype(jnp.float32)
    levels = jnp.array([0.0, 0.5, 1.0])
    # every op at every level in one compiled program (compiling them one by one is slow)
    all_ops = jax.jit(
        lambda k, im: [jax.vmap(op, in_axes=(None, None, 0))(k, im, levels) for op in A.OPS]
    )
    for op, out in zip(A.OPS, all_ops(jax.random.key(5), x)):
        assert out.shape == (3, *x.shape) and bool(jnp.isfinite(out).all()), op.__name__
        assert 0.0 <= float(out.min()) and float(out.max()) <= 255.0, op.__name__
        # level 0 is no change: magnitude 0 turns RandAugment off
        np.testing.assert_allclose(out[0], x, atol=1e-3, err_msg=op.__name__)
        # and every op but identity changes the image at a higher level
        assert (op.__name__ == "identity") == np.allclose(out[2], x, atol=1e-3), op.__name__


def test_randaugment_changes_images_and_stays_in_range():
    x = images(b=32)
    out = unnormalised(RANDAUGMENT(jax.random.key(6), x))
    assert np.isfinite(out).all() and -1e-3 <= out.min() and out.max() <= 255.0 + 1e-3
    changed = ~np.isclose(out, np.asarray(x, np.float32), atol=1e-2).all(axis=(1, 2, 3))
    assert changed.sum() > 16  # identity is 1 op in 11: most examples change
    with pytest.raises(ConfigError, match="randaugment_magnitude"):
        aug_cfg(randaugment_layers=1, randaugment_magnitude=11)


def test_mixup_is_one_convex_combination_with_the_reversed_batch():
    x = images(b=6).astype(jnp.float32)
    y = jax.nn.one_hot(jnp.arange(6), 10)
    xm, ym = jax.jit(A.mixup, static_argnums=3)(jax.random.key(7), x, y, 0.4)
    lam = float(ym[0, 0])
    assert 0.0 <= lam <= 1.0 and lam != 0.5
    np.testing.assert_allclose(ym, lam * y + (1 - lam) * y[::-1], atol=1e-6)
    np.testing.assert_allclose(xm, lam * x + (1 - lam) * x[::-1], rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(ym.sum(axis=1), 1.0, atol=1e-6)
    x0, y0 = A.mixup(jax.random.key(7), x, y, alpha=0.0)
    assert x0 is x and y0 is y


def test_cutmix_pastes_one_box_from_the_mirror_example_and_mixes_the_labels_by_its_area():
    # shifted off 0, so that no pixel equals its mirror's by chance
    x = images(b=6, h=16, w=12).astype(jnp.float32) + 1.0
    y = jax.nn.one_hot(jnp.arange(6), 10)
    for seed in range(20):
        xm, ym = jax.jit(A.cutmix, static_argnums=3)(jax.random.key(seed), x, y, 1.0)
        pasted = np.asarray(xm == x[::-1]).all(-1)  # (B, H, W): where the mirror's pixels are
        kept = np.asarray(xm == x).all(-1)
        assert (pasted ^ kept).all()  # every pixel is one example's or the other's
        box = pasted[0]
        assert (pasted == box).all()  # one box for the batch
        rows, cols = np.nonzero(box.any(1))[0], np.nonzero(box.any(0))[0]
        if box.any():  # a rectangle: every pixel between its extreme rows and columns
            assert box[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1].all()
        a = box.mean()  # the label weight is the area pasted (Yun et al.: lam = 1 - box area)
        np.testing.assert_allclose(ym, (1 - a) * y + a * y[::-1], atol=1e-6)
    x0, y0 = A.cutmix(jax.random.key(0), x, y, alpha=0.0)
    assert x0 is x and y0 is y


def test_with_mixup_and_cutmix_on_each_batch_takes_one_of_them_and_with_cutmix_off_it_is_mixup():
    x = images(b=4).astype(jnp.float32) + 1.0
    y = jax.nn.one_hot(jnp.arange(4), 10)
    both = A.Settings(mixup_alpha=0.8, cutmix_alpha=1.0)
    kinds = set()
    for seed in range(16):
        xm, _ = jax.jit(A.mix_batch, static_argnums=3)(jax.random.key(seed), x, y, both)
        whole = np.asarray((xm == x) | (xm == x[::-1])).all()  # CutMix: no blended pixel
        kinds.add("cutmix" if whole else "mixup")
    assert kinds == {"cutmix", "mixup"}
    key = jax.random.key(3)
    mixed = A.mix_batch(key, x, y, A.Settings(mixup_alpha=0.4))
    for a, b in zip(mixed, A.mixup(key, x, y, 0.4)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ConfigError, match="cutmix_alpha"):
        A.Settings(cutmix_alpha=-1.0)
