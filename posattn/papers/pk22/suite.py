"""Every PK22 measurement of one trained image model: what `experiments/how_vits_work.py` runs per run.

`measure(model, variables, config, settings, key)` reads the run's dataset (test images for the
Fourier, variance and noise tools; augmented, mixed-up training images for the Hessian and the
landscape), runs the tools of `posattn.analysis` as three compiled programs (one evaluation pass per
noise band serves the Fourier, variance and noise tools; the Hessian spectrum; the landscape), and
returns plain numbers and arrays (`jsonable`). The Hessian and the landscape share an objective
(`posattn.analysis.objective`, docs/how_vits_work.md, Decisions): the NLL of the model in evaluation
mode (batch norm with its running statistics, no dropout) against PK22's mixed, label-smoothed targets,
plus `settings.weight_decay` times an L2 term (PK22's sum of per-tensor norms for the landscape, half
the squared norm for the Hessian: `Settings`).
"""
import collections
import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from posattn.analysis import fourier, frequency_noise, hessian, landscape, objective, programs, subject, variance
from posattn.errors import ConfigError
from posattn.vision import losses
from posattn.vision.models.sown import INTERMEDIATES
from posattn.vision.setup import Setup, resolve


@dataclasses.dataclass(frozen=True)
class Settings:
    """How much of each measurement to run, and how. Defaults: PK22's values where it gives them (the
    modules of `posattn.analysis` cite them)."""

    hessian_batches: int = 8  # mini-batches pooled into the spectrum (docs/how_vits_work.md, Time)
    hessian_batch_size: int = 16  # PK22
    hessian_iterations: int = hessian.MAX_ITERATIONS
    hessian_tolerance: float = hessian.TOLERANCE
    top_k: int = hessian.TOP_K
    weight_decay: float = objective.WEIGHT_DECAY  # of the L2 term of the Hessian's and landscape's objective
    # objective.L2_FORMS: PK22's sum of norms for the landscape; for the Hessian, whose form PK22 did not
    # publish, the squared norm, since the Hessian of w ||theta_t|| is w / ||theta_t|| on a tensor's
    # sphere and a tensor near zero then fills the top of the spectrum (docs/how_vits_work.md, Decisions)
    landscape_l2_form: str = "norms"
    hessian_l2_form: str = "squared"
    mixup_alpha: float = objective.MIXUP_ALPHA  # 0: no mixup
    label_smoothing: float = objective.LABEL_SMOOTHING
    feature_images: int = 128  # test images for the Fourier and variance tools
    noise_eps: float = frequency_noise.EPS  # in units of the normalised inputs
    noise_band: str = "pk22"  # frequency_noise.BANDS
    landscape_normalisation: str = "pk22"  # landscape.NORMALISATIONS
    landscape_grid: int = landscape.GRID
    # augmented training images the landscape loss averages over, mixed in mini-batches of
    # hessian_batch_size (PK22: the whole training set)
    landscape_images: int = 32
    landscape_chunk: int = 21  # grid points per vmapped chunk

    def __post_init__(self):
        positive = ("hessian_batches", "hessian_batch_size", "hessian_iterations", "top_k", "feature_images",
                    "landscape_images", "landscape_chunk")
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be a positive integer")
        if self.landscape_grid < 5 or self.landscape_grid % 4 != 1:
            raise ConfigError(f"landscape_grid={self.landscape_grid} must be 4k + 1 >= 5 (5, 9, .., 21): the "
                              "grid of [-1, 1] needs theta* and x = 0.5, where the rise is read, on it; PK22: 21")
        for name in ("hessian_tolerance", "noise_eps"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be positive")
        if self.landscape_images % self.hessian_batch_size:
            raise ConfigError(f"landscape_images={self.landscape_images} must be a multiple of "
                              f"hessian_batch_size={self.hessian_batch_size}: its images are mixed up in "
                              "mini-batches of that size")
        for name in ("weight_decay", "mixup_alpha"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 0")
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"label_smoothing={self.label_smoothing} must be in [0, 1)")
        for name, choices in (("landscape_l2_form", objective.L2_FORMS),
                              ("hessian_l2_form", objective.L2_FORMS), ("noise_band", frequency_noise.BANDS),
                              ("landscape_normalisation", landscape.NORMALISATIONS)):
            if getattr(self, name) not in choices:
                raise ConfigError(f"{name}={getattr(self, name)!r} must be one of {', '.join(choices)}")


QUICK = Settings(hessian_batches=1, hessian_iterations=10, feature_images=32, landscape_grid=5,
                 landscape_images=16, landscape_chunk=5)


def nll(model, variables, params, images, targets) -> jax.Array:
    """Mean cross-entropy against `targets` (class indices or (B, K) soft targets, used as given) of the
    model in evaluation mode, with `params` in place of variables["params"]: `losses.classification_loss`."""
    loss, _ = losses.classification_loss(model, params, variables.get("batch_stats", {}), images, targets,
                                         None, False)
    return loss


def objective_fn(model, variables, settings: Settings, l2_form: str):
    """(params, (images, targets)) -> NLL + L2 (of `l2_form`): the objective of the Hessian and the
    landscape."""
    def loss(p, batch):
        images, targets = batch
        penalty = objective.l2_penalty(p, settings.weight_decay, l2_form)
        return nll(model, variables, p, images, targets) + penalty

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


def mixed_minibatches(key, images_NxHxWxC, labels_N, num_classes: int, b: int, settings: Settings):
    """The images in N / b mini-batches of b, each mixed up with its own lambda and given PK22's soft
    targets (`objective.mixed_targets`): (images_MxbxHxWxC, targets_MxbxK)."""
    M = images_NxHxWxC.shape[0] // b
    x = images_NxHxWxC.reshape(M, b, *images_NxHxWxC.shape[1:])
    mix = functools.partial(objective.mixed_targets, num_classes=num_classes, alpha=settings.mixup_alpha,
                            smoothing=settings.label_smoothing)
    return jax.jit(jax.vmap(mix))(jax.random.split(key, M), x, labels_N.reshape(M, b))


def forward_measures(model, layers, settings: Settings, variables, x_BxHxWxC, labels_B, key):
    """PK22 Figs. 4, 5 and 6 from one evaluation pass per noise band: (accuracy_1+F, profiles, variances).

    Every pass (clean, then band-limited noise at each f, `frequency_noise.under_noise`) returns its
    accuracy and the Fourier profile and variance of the `layers` feature maps of its first
    `settings.feature_images` images; the clean pass's (index 0) are the figures' (PK22 measures them on
    clean images). One forward pass in the program serves all three tools.
    """
    def measure(x):
        logits, state = model.apply(variables, x, train=False, mutable=[INTERMEDIATES])
        feats = collections.OrderedDict(
            (name, state[INTERMEDIATES][name][-1][: settings.feature_images]) for name in layers)
        return (frequency_noise.accuracy(logits, labels_B), fourier.layer_profiles(feats),
                variance.layer_variances(feats))

    return frequency_noise.under_noise(measure, x_BxHxWxC, key, eps=settings.noise_eps,
                                       band=settings.noise_band)


def hessian_spectrum(model, settings: Settings, variables, batches, key):
    """PK22 Fig. 2: `hessian.spectrum` of `objective_fn` over the M mini-batches of `batches`
    ((images_MxbxHxWxC, targets_MxbxK)): (eigenvalues_Mxk, iterations_Mxk)."""
    loss = objective_fn(model, variables, settings, settings.hessian_l2_form)
    return hessian.spectrum(loss, variables["params"], batches, key,
                            k=settings.top_k, max_iterations=settings.hessian_iterations,
                            tolerance=settings.hessian_tolerance)


def loss_landscape(model, settings: Settings, variables, batch, key):
    """PK22 Fig. 1: (surface_GxG of `objective_fn` along two directions drawn from `key` and normalised
    by `settings.landscape_normalisation`, the L2 term at theta*)."""
    params = variables["params"]
    k1, k2 = jax.random.split(key)
    d1 = landscape.random_direction(k1, params, settings.landscape_normalisation)
    d2 = landscape.random_direction(k2, params, settings.landscape_normalisation)
    axis = landscape.grid(settings.landscape_grid)
    loss = objective_fn(model, variables, settings, settings.landscape_l2_form)
    surface = landscape.surface(loss, params, batch, d1, d2, xs=axis, ys=axis, chunk=settings.landscape_chunk)
    return surface, objective.l2_penalty(params, settings.weight_decay, settings.landscape_l2_form)


def _say(message: str) -> None:
    print(message, flush=True)


def measure(model, variables, config, settings: Settings, key: jax.Array, *, name: str = "",
            dataset=None) -> dict:
    """Every PK22 measurement of one model; returns {tool: results}, all numbers and lists.

    Three programs (`forward_measures`, `hessian_spectrum`, `loss_landscape`), each compiled once, two
    at a time (`programs.compile_all`), then run; "seconds" holds each one's compile and run time.
    `dataset` (one of your own arrays, named by config.dataset) replaces the lookup of config.dataset.
    `model` is posattn's image model with its `variables`, or any model as a `posattn.analysis.subject.Subject`
    with `variables` None (config.model is then not measured).
    """
    # every model runs as a Subject (posattn's own by `subject.of_model`), seen by the programs as a module
    subj = model if isinstance(model, subject.Subject) else subject.of_model(model, variables)
    model, variables = subject.as_module(subj)
    setup = resolve(config, 1, dataset)
    k_hess, k_noise, k_land, k_data, k_mix = jax.random.split(key, 5)
    x_test, y_test = test_set(setup)
    # one draw of augmented training images, mixed up in mini-batches of b: the Hessian's M mini-batches,
    # then the landscape's batch
    M, b, L = settings.hessian_batches, settings.hessian_batch_size, settings.landscape_images
    x_aug, y_aug = augmented_training_images(k_data, setup, M * b + L)
    x_mix, t_mix = mixed_minibatches(k_mix, x_aug, y_aug, setup.info.num_classes, b, settings)
    hess_batches = (x_mix[:M], t_mix[:M])
    land_batch = (x_mix[M:].reshape(L, *x_mix.shape[2:]), t_mix[M:].reshape(L, -1))
    feat_shapes = jax.eval_shape(functools.partial(subject.features, subj), x_test[:1])
    layers = list(feat_shapes)  # forward order (an OrderedDict)

    t = time.perf_counter()
    # the Hessian first: the longest compile, overlapped with the two others
    compiled, compile_s = programs.compile_all({
        "hessian": (jax.jit(functools.partial(hessian_spectrum, model, settings)),
                    (variables, hess_batches, k_hess)),
        "forward": (jax.jit(functools.partial(forward_measures, model, layers, settings)),
                    (variables, x_test, y_test, k_noise)),
        "landscape": (jax.jit(functools.partial(loss_landscape, model, settings)),
                      (variables, land_batch, k_land)),
    })
    seconds = {"compile_wall": time.perf_counter() - t, **{f"compile_{k}": v for k, v in compile_s.items()}}
    _say(f"  {name}: compiled its 3 programs in {seconds['compile_wall']:.1f}s (" +
         ", ".join(f"{k} {v:.1f}s" for k, v in compile_s.items()) + ")")

    def timed(tool, *args):
        t = time.perf_counter()
        out = jax.block_until_ready(compiled[tool](*args))
        seconds[f"run_{tool}"] = time.perf_counter() - t
        _say(f"  {name}: ran {tool} in {seconds[f'run_{tool}']:.1f}s")
        return out

    out = {}
    # Fourier, variance and accuracy under band-limited noise on test images (PK22 Figs. 4, 5, 6)
    acc, profiles, variances = timed("forward", variables, x_test, y_test, k_noise)
    acc = np.asarray(acc)
    out["layers"] = layers
    out["layer_sizes"] = [int(feat_shapes[k].shape[1]) for k in layers]
    out["fourier"] = {k: np.asarray(v[0]).tolist() for k, v in profiles.items()}
    # a profile of one point (a 2 x 2 map or smaller) is the DC term's own 0: no high-frequency value
    out["high_frequency"] = [float(np.asarray(v)[0, -1]) if v.shape[-1] > 1 else float("nan")
                             for v in profiles.values()]
    out["variance"] = [float(v[0]) for v in variances.values()]
    out["noise"] = {"frequencies_pi": [round(f / np.pi, 3) for f in frequency_noise.FREQUENCIES],
                    "clean_accuracy": float(acc[0]), "drop_points": (100 * (acc[1:] - acc[0])).tolist(),
                    "eps": settings.noise_eps, "band": settings.noise_band, "images": int(x_test.shape[0]),
                    "empty_bands_pi": [round(f / np.pi, 3) for f in frequency_noise.empty_bands(
                        *setup.image_shape[:2], band=settings.noise_band)]}
    objective_settings = {"weight_decay": settings.weight_decay, "mixup_alpha": settings.mixup_alpha,
                          "label_smoothing": settings.label_smoothing}

    # Hessian max-eigenvalue spectrum (PK22 Fig. 2)
    eigs, iters = timed("hessian", variables, hess_batches, k_hess)
    out["hessian"] = {"eigenvalues": np.asarray(eigs).tolist(), "iterations": np.asarray(iters).tolist(),
                      **hessian.summaries(eigs), "batch_size": b, "l2_form": settings.hessian_l2_form,
                      **objective_settings}

    # loss landscape (PK22 Fig. 1)
    surf, penalty = timed("landscape", variables, land_batch, k_land)
    surf, axis = np.asarray(surf), landscape.grid(settings.landscape_grid)
    centre = settings.landscape_grid // 2
    row = surf[centre]  # y = 0: the loss along d1 through theta*
    at_optimum = float(row[centre])
    out["landscape"] = {"axis": axis.tolist(), "loss": surf.tolist(),
                        "nll_at_optimum": float(at_optimum - penalty), "loss_at_optimum": at_optimum,
                        "delta_at_half": float(row[centre + centre // 2] - at_optimum),  # x = 0.5
                        "delta_at_one": float(row[-1] - at_optimum),
                        "images": L, "normalisation": settings.landscape_normalisation,
                        "l2_form": settings.landscape_l2_form, **objective_settings}
    out["seconds_by_program"] = seconds
    return out
