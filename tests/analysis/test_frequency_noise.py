"""Band-limited noise really is band-limited, and the accuracy drop is measured (PK22 Figure 5)."""
import jax
import jax.numpy as jnp
import numpy as np

from posattn.analysis import frequency_noise as fn


def test_noise_spectrum_lies_in_its_band():
    shape = (3, 16, 16, 2)
    for f in (0.3 * np.pi, 0.9 * np.pi):
        noise = fn.band_limited_noise(jax.random.key(0), shape, f, eps=1.0)
        spec = np.abs(np.fft.fftshift(np.fft.fft2(np.asarray(noise), axes=(1, 2)), axes=(1, 2)))
        om = np.asarray(fn.omega_inf(16, 16))
        inside = (om >= f - 0.2) & (om < f + 0.2)
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
    assert fn.FREQUENCIES[0] in fn.empty_bands(8, 8)
    assert fn.empty_bands(16, 16) == []


def test_accuracy_drops_and_one_compilation_for_many_batches():
    traces = []
    diff = lambda x: (x[:, 1:] - x[:, :-1]).mean((1, 2, 3))  # noqa: E731
    models = {
        # reads only the image mean (the DC component): blind to band-limited noise (f > 0)
        "mean": lambda x: jnp.stack([x.mean((1, 2, 3)), -x.mean((1, 2, 3))], -1),
        # reads the pixel-to-pixel differences, a high-pass filter: hurt by high-frequency noise
        "high_pass": lambda x: jnp.stack([diff(x), -diff(x)], -1),
    }

    def tool(x, k):
        traces.append(1)  # runs only while jax traces (compiles) the function
        return {name: fn.accuracy_drops(m, x, jnp.argmax(m(x), -1), k, eps=3.0) for name, m in models.items()}

    run = jax.jit(tool)
    for seed in (1, 2):
        out = run(jax.random.normal(jax.random.key(seed), (64, 16, 16, 1)), jax.random.key(seed + 10))
        clean, drops = out["mean"]
        assert clean == 1.0 and drops.shape == (9,)
        np.testing.assert_allclose(drops, 0.0, atol=1e-6)
        clean, drops = out["high_pass"]
        assert clean == 1.0 and drops[-1] < -0.05 and drops[-1] < drops[0]
    assert len(traces) == 1
