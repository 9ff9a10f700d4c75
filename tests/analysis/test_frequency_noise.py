"""Band-limited noise really is band-limited, and the accuracy drop is measured (PK22 Figure 5)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.analysis import frequency_noise as fn
from posattn.errors import ConfigError


def _pk22_center_mask(w1, w2):
    """PK22's ops/adversarial.py FreqAttack._center_mask, in numpy: a w1 x w1 block of ones (w1 clipped
    to [0, w2]) zero-padded by int((w2 - w1) / 2) on every side."""
    w1 = min(max(w1, 0), w2)
    return np.pad(np.ones((w1, w1)), int((w2 - w1) / 2))


def _pk22_fourier_mask(x_BxCxHxW, f, s=0.2):
    """PK22's FreqAttack._fourier_mask, in numpy: FFT, roll by h/2, amplitude times the band, phase kept,
    roll back, inverse FFT."""
    h = x_BxCxHxW.shape[2]
    shift = lambda a: np.roll(a, (int(h / 2), int(h / 2)), axis=(2, 3))  # noqa: E731
    X = shift(np.fft.fft2(x_BxCxHxW))
    mask = _pk22_center_mask(int(((f + s) * h) / (2 * np.pi)) * 2, h) - _pk22_center_mask(
        int(((f - s) * h) / (2 * np.pi)) * 2, h
    )
    return np.fft.ifft2(shift(mask * np.abs(X) * np.exp(1j * np.angle(X)))), mask


def test_band_and_noise_are_pk22s_fourier_mask():
    for h in (8, 16, 32):
        for f in fn.FREQUENCIES:
            _, mask = _pk22_fourier_mask(np.zeros((1, 1, h, h)), f)
            np.testing.assert_array_equal(
                fn.band_mask(h, h, f), mask.astype(bool), err_msg=f"{h} {f}"
            )
    _, mask = _pk22_fourier_mask(np.zeros((1, 1, 16, 16)), 0.1 * np.pi)
    assert (
        mask[8, 8] == 1 and mask[7, 7] == 1 and mask[9, 9] == 0
    )  # DC kept at 0.1 pi; k = -1 but not +1
    key, shape = jax.random.key(3), (2, 16, 16, 3)
    delta = 0.7 * np.sign(
        np.asarray(jax.random.normal(key, shape, jnp.float32))
    )  # PK22's Random, eps 0.7
    for f in (0.1 * np.pi, 0.5 * np.pi, 0.9 * np.pi):
        expected, _ = _pk22_fourier_mask(delta.transpose(0, 3, 1, 2), f)
        ours = fn.band_limited_noise(key, shape, f, eps=fn.EPS)
        np.testing.assert_allclose(ours, expected.real.transpose(0, 2, 3, 1), atol=1e-5)
    assert fn.EPS == 0.7 and fn.EPS_REPOSITORY == 0.007


def test_noise_spectrum_lies_in_its_band():
    shape = (3, 16, 16, 2)
    for f, band in ((0.3 * np.pi, "annulus"), (0.9 * np.pi, "annulus"), (0.3 * np.pi, "pk22")):
        noise = fn.band_limited_noise(jax.random.key(0), shape, f, eps=1.0, band=band)
        spec = np.abs(np.fft.fftshift(np.fft.fft2(np.asarray(noise), axes=(1, 2)), axes=(1, 2)))
        inside = np.asarray(fn.band_mask(16, 16, f, band=band))
        # the real part keeps k where the band holds k or -k (PK22's band holds -n, not +n)
        inside = inside | np.roll(inside[::-1, ::-1], 1, (0, 1))
        assert inside.any() and (~inside).any()
        assert spec[:, ~inside].max() < 1e-4  # nothing outside the band
        assert spec[:, inside].mean() > 1.0  # and real energy inside it
        assert noise.dtype == jnp.float32 and float(jnp.abs(noise).max()) > 0.01


def test_omega_inf_layout_and_empty_bands():
    om = np.asarray(fn.omega_inf(8, 8))
    assert om[4, 4] == 0.0  # DC in the middle of the centred spectrum
    np.testing.assert_allclose(om[0, 4], np.pi)  # the Nyquist row
    np.testing.assert_allclose(om[5, 3], np.pi / 4)
    # 8 x 8 images have frequencies every pi/4: the band around 0.1 pi holds none; at 16 x 16 all are full
    for band in fn.BANDS:
        assert fn.FREQUENCIES[0] in fn.empty_bands(8, 8, band=band)
        assert fn.empty_bands(16, 16, band=band) == []


def test_accuracy_drops_and_one_compilation_for_many_batches():
    traces = []
    diff = lambda x: (x[:, 1:] - x[:, :-1]).mean((1, 2, 3))  # noqa: E731
    models = {
        # reads only the image mean (the DC component): blind to band-limited noise but at 0.1 pi, whose
        # band in PK22's code holds DC
        "mean": lambda x: jnp.stack([x.mean((1, 2, 3)), -x.mean((1, 2, 3))], -1),
        # reads the pixel-to-pixel differences, a high-pass filter: hurt by high-frequency noise
        "high_pass": lambda x: jnp.stack([diff(x), -diff(x)], -1),
    }

    def tool(x, k):
        traces.append(1)  # runs only while jax traces (compiles) the function
        return {
            name: fn.accuracy_drops(m, x, jnp.argmax(m(x), -1), k, eps=3.0)
            for name, m in models.items()
        }

    run = jax.jit(tool)
    for seed in (1, 2):
        out = run(
            jax.random.normal(jax.random.key(seed), (64, 16, 16, 1)), jax.random.key(seed + 10)
        )
        clean, drops = out["mean"]
        assert clean == 1.0 and drops.shape == (9,)
        assert drops[0] < -0.05
        np.testing.assert_allclose(drops[1:], 0.0, atol=1e-6)
        clean, drops = out["high_pass"]
        assert clean == 1.0 and drops[-1] < -0.05 and drops[-1] < drops[0]
    assert len(traces) == 1


def test_empty_bands_of_8x8_images_are_nan_not_a_zero_drop():
    # 8 x 8 images have frequencies every pi/4: 4 of PK22's 9 bands hold none, and their "noise" is zero
    x = jax.random.normal(jax.random.key(0), (16, 8, 8, 1))
    model = lambda z: jnp.stack([z.mean((1, 2, 3)), -z.mean((1, 2, 3))], -1)  # noqa: E731
    clean, drops = fn.accuracy_drops(model, x, jnp.argmax(model(x), -1), jax.random.key(1))
    empty = np.isin(
        np.asarray(fn.FREQUENCIES, np.float32), np.asarray(fn.empty_bands(8, 8), np.float32)
    )
    assert empty.sum() == 4
    np.testing.assert_array_equal(np.isnan(np.asarray(drops)), empty)
    assert clean == 1.0
    # under_noise: the same for any measure, cast to float for the NaN (index 0 is the clean pass)
    correct = fn.under_noise(lambda z: jnp.argmax(model(z), -1) == 0, x, jax.random.key(1))
    assert correct.dtype == jnp.float32
    np.testing.assert_array_equal(
        np.isnan(np.asarray(correct)).all(1), np.concatenate([[False], empty])
    )


def test_images_and_labels_of_the_wrong_layout_or_range_are_refused():
    model = lambda z: z.mean((1, 2))  # noqa: E731  (B, C) logits
    x, key = jnp.zeros((4, 16, 16, 3)), jax.random.key(0)
    with pytest.raises(ConfigError, match=r"look channels-first \(B, C, H, W\)"):
        fn.accuracy_drops(model, jnp.zeros((4, 3, 16, 16)), jnp.zeros(4, int), key)
    with pytest.raises(ConfigError, match=r"give \(B, H, W, C\)"):
        fn.accuracy_drops(model, jnp.zeros((4, 16, 16)), jnp.zeros(4, int), key)
    with pytest.raises(ConfigError, match=r"labels must be integer class indices in \[0, 3\)"):
        fn.accuracy_drops(model, x, jnp.array([0, 1, 2, 3]), key)
    with pytest.raises(ConfigError, match=r"shape \(B,\) \(not one-hot\)"):
        fn.accuracy_drops(model, x, jnp.eye(4, 3), key)
    with pytest.raises(ConfigError, match="3 noise keys for a batch of 4 images"):
        fn.band_limited_noise(jax.random.split(key, 3), (4, 16, 16, 3), 0.5, eps=1.0)
