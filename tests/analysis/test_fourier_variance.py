"""Fourier amplitude of known signals (PK22 Figure 4) and feature-map variance (PK22 Figure 6)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.analysis import fourier, variance
from posattn.errors import ConfigError


def _diagonal_wave(n, k, amplitude, offset):
    """offset + amplitude * cos(2 pi k (i + j) / n): energy only at DC and at frequency +-(k, k)."""
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    return offset + amplitude * np.cos(2 * np.pi * k * (i + j) / n)


def test_log_amplitude_of_known_signal():
    n, k, a, c = 8, 2, 3.0, 5.0
    z = np.stack([_diagonal_wave(n, k, a, c)] * 2)[..., None].repeat(3, axis=-1)  # B=2, C=3
    A = np.array(fourier.log_amplitude(jnp.asarray(z)))
    centre = n // 2
    np.testing.assert_allclose(
        A[centre, centre], np.log(c * n * n + 1e-6), rtol=1e-5
    )  # DC in the middle
    np.testing.assert_allclose(A[centre + k, centre + k], np.log(a * n * n / 2 + 1e-6), rtol=1e-5)
    np.testing.assert_allclose(A[centre - k, centre - k], np.log(a * n * n / 2 + 1e-6), rtol=1e-5)
    A[centre, centre] = A[centre + k, centre + k] = A[centre - k, centre - k] = np.log(1e-6)
    assert np.all(A < np.log(1e-3))  # nothing anywhere else


def test_relative_profile_reads_the_half_diagonal():
    n, k, a, c = 8, 3, 3.0, 5.0  # k = n/2 - 1: the last point of the profile, labelled 1.0 pi
    z = jnp.asarray(_diagonal_wave(n, k, a, c))[None, :, :, None]
    delta = np.asarray(fourier.relative_profile(z))
    assert delta.shape == (n // 2,) and delta[0] == 0.0
    np.testing.assert_allclose(fourier.high_frequency(z), np.log(a / 2 / c), rtol=1e-4)
    np.testing.assert_allclose(fourier.frequencies(4), [0, 1 / 3, 2 / 3, 1])


def test_low_pass_filter_lowers_the_high_frequency_value():
    z = np.random.default_rng(0).normal(size=(4, 8, 8, 5))
    blurred = (
        z + np.roll(z, 1, 1) + np.roll(z, 1, 2) + np.roll(z, (1, 1), (1, 2))
    ) / 4  # 2 x 2 box filter
    hf = jax.jit(fourier.high_frequency)
    assert hf(jnp.asarray(blurred)) < hf(jnp.asarray(z)) - 1.0


def _pk22_profile(z_BxCxHxW):
    """PK22's fourier_analysis.ipynb, in numpy: log(|FFT2| + 1e-6), rolled by int(h/2), mean over batch and
    channels, diag()[int(h/2):], minus its first point."""
    h, w = z_BxCxHxW.shape[2:]
    A = np.roll(
        np.log(np.abs(np.fft.fft2(z_BxCxHxW)) + 1e-6), (int(h / 2), int(w / 2)), (2, 3)
    ).mean((0, 1))
    d = np.diag(A)[int(h / 2) :]
    return d - d[0]


def test_profile_is_pk22s_indexing_for_odd_and_small_maps():
    for n in (1, 2, 3, 5, 7, 8):
        z = np.random.default_rng(n).normal(size=(2, n, n, 3))
        ours = np.asarray(fourier.relative_profile(jnp.asarray(z, jnp.float32)))
        expected = _pk22_profile(z.transpose(0, 3, 1, 2))
        assert ours.shape == (n - n // 2,) == expected.shape
        np.testing.assert_allclose(ours, expected, atol=1e-4, err_msg=str(n))
    assert fourier.high_frequency(jnp.ones((2, 2, 2, 3))) == 0.0  # the DC point alone
    assert np.isfinite(fourier.high_frequency(jnp.ones((2, 3, 3, 3))))


def test_feature_variance_is_the_unbiased_spatial_variance():
    z = np.random.default_rng(0).normal(size=(3, 4, 5, 6)) * np.arange(
        1, 7
    )  # channels of different scales
    expected = np.mean([np.var(z[b, :, :, c], ddof=1) for b in range(3) for c in range(6)])
    np.testing.assert_allclose(
        variance.feature_variance(jnp.asarray(z, jnp.float32)), expected, rtol=1e-5
    )
    # a constant map has none; a 1 x 1 map has no spatial variance at all
    assert variance.feature_variance(jnp.ones((2, 4, 4, 3))) == 0.0
    assert np.isnan(variance.feature_variance(jnp.ones((2, 1, 1, 3))))


def test_fourier_and_variance_compile_once_per_layer_shape():
    traces = []

    def tools(features):
        traces.append(1)
        return fourier.layer_profiles(features), variance.layer_variances(features)

    run = jax.jit(tools)
    for seed in range(3):
        z = jax.random.normal(jax.random.key(seed), (2, 8, 8, 4))
        run({"stem": z, "block_00/attention": z * 2})
    assert len(traces) == 1


def test_per_image_profiles_and_variances_average_to_the_layers():
    # the bootstrap's units: their mean over images is the figure's value (the profile is linear in the
    # batch mean of the log amplitude; the variance is a batch mean)
    feats = {
        "a": jax.random.normal(jax.random.key(0), (5, 7, 7, 3)),
        "b": jax.random.normal(jax.random.key(1), (5, 4, 4, 2)) ** 2,
    }
    for name in feats:
        np.testing.assert_allclose(
            fourier.image_profiles(feats)[name].mean(0),
            fourier.layer_profiles(feats)[name],
            rtol=1e-5,
            atol=1e-5,
        )
        np.testing.assert_allclose(
            variance.image_variances(feats)[name].mean(0),
            variance.layer_variances(feats)[name],
            rtol=1e-5,
        )
    assert fourier.image_profiles(feats)["a"].shape == (5, 4)


def test_tokens_not_on_their_grid_are_refused_by_the_fourier_and_variance_tools():
    # (B, N, D) tokens: today FFT'd over the token and channel axes and averaged over the batch axis
    tokens = jnp.zeros((2, 16, 8))
    for fn in (fourier.log_amplitude, fourier.relative_profile, variance.feature_variance):
        with pytest.raises(ConfigError, match=r"give a \(B, h, w, C\) map"):
            fn(tokens)
    for fn in (
        fourier.image_profiles,
        fourier.layer_profiles,
        variance.image_variances,
        variance.layer_variances,
    ):
        with pytest.raises(ConfigError, match="feature 'block'"):
            fn({"block": tokens})
