"""Every PK22 measurement of one trained image model: what `experiments/how_vits_work.py` runs per run.

`measure(model, variables, config, settings, key)` reads the run's dataset (test images for the
Fourier, variance and noise tools; augmented training images for the Hessian and the landscape), runs
each tool of `posattn.analysis` under one `jax.jit` per tool, and returns plain numbers and arrays
(`jsonable`). Objectives (docs/how_vits_work.md, Decisions): the NLL of the model in evaluation mode
(batch norm with its running statistics, no dropout) on augmented training images, plus PK22's
regulariser with weight `settings.weight_decay`: (lambda / 2) ||theta||^2 for the Hessian,
lambda * sum of per-tensor Frobenius norms for the landscape (PK22's code).
"""
import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from posattn.analysis import fourier, frequency_noise, hessian, landscape, variance
from posattn.errors import ConfigError
from posattn.vision import losses, models
from posattn.vision.setup import Setup, resolve


@dataclasses.dataclass(frozen=True)
class Settings:
    """How much of each measurement to run. Defaults: PK22's values where it gives them."""

    hessian_batches: int = 2  # mini-batches pooled into the spectrum (a CNN HVP: ~0.5 s on 2 busy cores)
    hessian_batch_size: int = 16  # PK22
    hessian_iterations: int = hessian.MAX_ITERATIONS
    hessian_tolerance: float = hessian.TOLERANCE
    top_k: int = hessian.TOP_K
    weight_decay: float = 5e-4
    feature_images: int = 128  # test images for the Fourier and variance tools
    noise_eps: float = 1.0  # in units of the normalised inputs (one dataset std per pixel)
    landscape_grid: int = landscape.GRID
    landscape_images: int = 32  # augmented training images the landscape loss averages over
    landscape_chunk: int = 21  # grid points per vmapped chunk

    def __post_init__(self):
        positive = ("hessian_batches", "hessian_batch_size", "hessian_iterations", "top_k", "feature_images",
                    "landscape_images", "landscape_chunk")
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be a positive integer")
        if self.landscape_grid < 3 or self.landscape_grid % 2 == 0:
            raise ConfigError(f"landscape_grid={self.landscape_grid} must be odd and >= 3 (the grid needs "
                              "its centre, theta*, on it; PK22: 21)")
        for name in ("hessian_tolerance", "noise_eps"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be positive")
        if self.weight_decay < 0:
            raise ConfigError(f"weight_decay={self.weight_decay} must be >= 0")


QUICK = Settings(hessian_batches=1, hessian_iterations=10, feature_images=32, landscape_grid=5,
                 landscape_images=16, landscape_chunk=5)


def nll(model, variables, params, images, labels) -> jax.Array:
    """Mean cross-entropy (no label smoothing: PK22's NLL) of the model in evaluation mode, with
    `params` in place of variables["params"]: the run's training loss, `losses.classification_loss`."""
    loss, _ = losses.classification_loss(model, params, variables.get("batch_stats", {}), images, labels,
                                         None, False)
    return loss


def test_set(setup: Setup, limit: int | None = None):
    """(inputs, labels) of the test split (its first `limit` images), as the model sees them."""
    split = setup.split("test")
    n = split.num_examples if limit is None else min(limit, split.num_examples)
    images, labels = split.read(np.arange(n))
    return setup.eval_inputs(setup.permutation(jnp.asarray(images))), jnp.asarray(labels)


def augmented_training_images(key, setup: Setup, n: int):
    """n random training images through the run's training augmentation (no mixup): (inputs, labels)."""
    pick_key, aug_key = jax.random.split(key)
    split = setup.split("train")
    indices = jax.random.choice(pick_key, split.num_examples, (n,), replace=n > split.num_examples)
    images, labels = split.read(np.asarray(indices))
    return jax.jit(setup.training_inputs)(aug_key, jnp.asarray(images)), jnp.asarray(labels)


def _say(message: str) -> None:
    print(message, flush=True)


def measure(model, variables, config, settings: Settings, key: jax.Array, *, name: str = "") -> dict:
    """Every PK22 measurement of one model; returns {tool: results}, all numbers and lists."""
    setup = resolve(config, 1)
    k_hess, k_noise, k_land, k_d1, k_d2, k_hdata = jax.random.split(key, 6)
    out, t0 = {}, time.perf_counter()

    def done(tool):
        _say(f"  {name}: {tool} in {time.perf_counter() - t0:.1f}s")

    # Fourier and variance on test images (PK22 Figs. 4, 6)
    x_test, y_test = test_set(setup)
    feats_fn = jax.jit(lambda v, x: (lambda f: (fourier.layer_profiles(f), variance.layer_variances(f)))(
        models.features(model, v, x)))
    profiles, variances = feats_fn(variables, x_test[: settings.feature_images])
    feat_shapes = jax.eval_shape(functools.partial(models.features, model), variables, x_test[:1])
    out["layers"] = list(profiles)
    out["layer_sizes"] = [int(feat_shapes[k].shape[1]) for k in profiles]
    out["fourier"] = {k: np.asarray(v).tolist() for k, v in profiles.items()}
    out["high_frequency"] = [float(np.asarray(v)[-1]) for v in profiles.values()]
    out["variance"] = [float(v) for v in variances.values()]
    done("Fourier and variance")

    # accuracy drop under band-limited noise (PK22 Fig. 5)
    noise_fn = jax.jit(lambda v, x, y, k: frequency_noise.accuracy_drops(
        lambda z: model.apply(v, z, train=False), x, y, k, eps=settings.noise_eps))
    clean, drops = noise_fn(variables, x_test, y_test, k_noise)
    out["noise"] = {"frequencies_pi": [round(f / np.pi, 3) for f in frequency_noise.FREQUENCIES],
                    "clean_accuracy": float(clean), "drop_points": (100 * np.asarray(drops)).tolist(),
                    "eps": settings.noise_eps,
                    "empty_bands_pi": [round(f / np.pi, 3) for f in frequency_noise.empty_bands(
                        *setup.image_shape[:2])]}
    done("frequency noise")

    # Hessian max-eigenvalue spectrum (PK22 Fig. 2)
    M, b = settings.hessian_batches, settings.hessian_batch_size
    xh, yh = augmented_training_images(k_hdata, setup, M * b)
    batches = {"x": xh.reshape(M, b, *xh.shape[1:]), "y": yh.reshape(M, b)}
    wd = settings.weight_decay
    hess_loss = lambda v: lambda p, bt: nll(model, v, p, bt["x"], bt["y"]) + hessian.l2_penalty(p, wd)  # noqa: E731
    spec_fn = jax.jit(lambda v, bt, k: hessian.spectrum(
        hess_loss(v), v["params"], bt, k, k=settings.top_k, max_iterations=settings.hessian_iterations,
        tolerance=settings.hessian_tolerance))
    eigs, iters = spec_fn(variables, batches, k_hess)
    out["hessian"] = {"eigenvalues": np.asarray(eigs).tolist(), "iterations": np.asarray(iters).tolist(),
                      **hessian.summaries(eigs), "batch_size": b, "weight_decay": wd}
    done("Hessian spectrum")

    # loss landscape (PK22 Fig. 1)
    xl, yl = augmented_training_images(k_land, setup, settings.landscape_images)
    land_loss = lambda v: lambda p, bt: (nll(model, v, p, bt[0], bt[1])  # noqa: E731
                                         + landscape.frobenius_penalty(p, wd))
    d1 = landscape.filter_normalised_direction(k_d1, variables["params"])
    d2 = landscape.filter_normalised_direction(k_d2, variables["params"])
    axis = landscape.grid(settings.landscape_grid)
    surf_fn = jax.jit(lambda v, bt, a, c: landscape.surface(land_loss(v), v["params"], bt, a, c, xs=axis,
                                                            ys=axis, chunk=settings.landscape_chunk))
    surf = np.asarray(surf_fn(variables, (xl, yl), d1, d2))
    centre = settings.landscape_grid // 2
    out["landscape"] = {"axis": axis.tolist(), "loss": surf.tolist(),
                        "nll_at_optimum": float(jax.jit(lambda v: nll(model, v, v["params"], xl, yl))(variables)),
                        "loss_at_optimum": float(surf[centre, centre]),
                        "delta_at_half": float(surf[centre, int(np.argmin(np.abs(axis - 0.5)))] - surf[centre, centre]),
                        "delta_at_one": float(surf[centre, -1] - surf[centre, centre]),
                        "images": settings.landscape_images, "weight_decay": wd}
    done("loss landscape")
    return out

