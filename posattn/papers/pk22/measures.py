"""PK22's measurements of one batch, as functions for `jax.jit` (`posattn.papers.pk22.suite` compiles
and runs them): the evaluation pass under band-limited noise that serves the Fourier, variance and noise
tools, the stem's positional part, the Hessian spectrum (whole, or one Hessian-vector step for a loop
on the host), and the loss landscape.

The Hessian and the landscape share an objective (`objective_fn`; `posattn.analysis.objective`,
docs/how_vits_work.md, Decisions): the NLL of the model in evaluation mode (batch norm with its running
statistics, no dropout) against PK22's mixed, label-smoothed targets, plus `settings.weight_decay`
times an L2 term (PK22's sum of per-tensor norms for the landscape, half the squared norm for the
Hessian: `Settings`).
"""

import collections
import functools

import jax
import jax.numpy as jnp

from posattn.analysis import (
    eigensolvers,
    fourier,
    frequency_noise,
    hessian,
    landscape,
    objective,
    subject,
    variance,
)
from posattn.papers.pk22.settings import Settings
from posattn.vision import losses
from posattn.vision.models.sown import INTERMEDIATES, STEM


def nll(model, variables, params, images, targets) -> jax.Array:
    """Mean cross-entropy against `targets` (class indices or (B, K) soft targets, used as given) of the
    model in evaluation mode, with `params` in place of variables["params"]: `losses.classification_loss`."""
    loss, _ = losses.classification_loss(
        model, params, variables.get("batch_stats", {}), images, targets, None, False
    )
    return loss


def objective_fn(model, variables, settings: Settings, l2_form: str):
    """(params, (images, targets)) -> NLL + L2 (of `l2_form`): the objective of the Hessian and the
    landscape."""

    def loss(p, batch):
        images, targets = batch
        penalty = objective.l2_penalty(p, settings.weight_decay, l2_form)
        return nll(model, variables, p, images, targets) + penalty

    return loss


def forward_measures(model, layers, settings: Settings, variables, x_BxHxWxC, labels_B, keys_B):
    """PK22 Figs. 4, 5 and 6 per test image, from one evaluation pass per noise band:
    (correct_(1+F)xB, {layer: profile_Bxn}, {layer: variance_B}).

    Every pass (clean, then band-limited noise at each f, `frequency_noise.under_noise`; image i's noise
    drawn from keys_B[i]) gives each image's correctness (1.0 or 0.0; NaN at a band with no frequency
    of the images); the clean pass (index 0) also gives each
    image's Fourier profile and variance of the `layers` feature maps (PK22 measures them on clean
    images; their figures' values are the means over images). One forward pass in the program serves
    all three tools.
    """

    def measure(x):
        logits, state = model.apply(variables, x, train=False, mutable=[INTERMEDIATES])
        feats = collections.OrderedDict((name, state[INTERMEDIATES][name][-1]) for name in layers)
        return (
            jnp.argmax(logits, -1) == labels_B,
            fourier.image_profiles(feats),
            variance.image_variances(feats),
        )

    correct, profiles, variances = frequency_noise.under_noise(
        measure, x_BxHxWxC, keys_B, eps=settings.noise_eps, band=settings.noise_band
    )
    return correct, jax.tree.map(lambda v: v[0], profiles), jax.tree.map(lambda v: v[0], variances)


def stem_position_parts(model, pos_path: str, variables, x_BxHxWxC):
    """Per image, the high-frequency value and variance (PK22 Figs. 4, 6) of the stem, of the stem with
    the model's positional embedding (at the "/"-path `pos_path` of its params, `Subject.pos_embedding`)
    set to 0, and of their difference (the positional embedding's part): {"with": (hf_B, var_B),
    "without": .., "position": ..}. For a ViT that adds P to its patch embeddings the stem is patches +
    P, so this splits the stem's Fourier value and variance into P's share."""

    def stem(params):
        _, state = model.apply(
            {**variables, "params": params}, x_BxHxWxC, train=False, mutable=[INTERMEDIATES]
        )
        return state[INTERMEDIATES][STEM][-1]

    params = variables["params"]
    with_P = stem(params)
    without_P = stem(subject.replace_at(params, pos_path, jnp.zeros_like))
    parts = {"with": with_P, "without": without_P, "position": with_P - without_P}
    hf = lambda z: fourier.image_profiles({STEM: z})[STEM][:, -1]  # noqa: E731
    return {k: (hf(z), variance.image_variances({STEM: z})[STEM]) for k, z in parts.items()}


def hessian_spectrum(model, settings: Settings, variables, batches, key):
    """PK22 Fig. 2 as one program: `hessian.spectrum` of `objective_fn` over the M mini-batches of
    `batches` ((images_MxbxHxWxC, targets_MxbxK)): `eigensolvers.Eigenpairs` of fields (M, k)."""
    loss = objective_fn(model, variables, settings, settings.hessian_l2_form)
    return hessian.spectrum(
        loss,
        variables["params"],
        batches,
        key,
        k=settings.top_k,
        max_iterations=settings.hessian_iterations,
        tolerance=settings.hessian_tolerance,
    )


def hessian_step(model, settings: Settings, variables, batch, state):
    """PK22 Fig. 2: one Hessian-vector product (`hessian.spectrum_step` of `settings.hessian_method`: a
    power iteration's step of `state`, or Lanczos's H v of the vector `state`) of `objective_fn` on one
    mini-batch (images_bxHxWxC, targets_bxK); `measure` calls it from the host
    (`hessian.spectrum_on_host`) over the M mini-batches."""
    loss = objective_fn(model, variables, settings, settings.hessian_l2_form)
    step = hessian.spectrum_step(
        loss, method=settings.hessian_method, **stopping(settings, "power")
    )
    return step(variables["params"], batch, state)


def stopping(settings: Settings, method: str) -> dict:
    """The cap and tolerance as arguments, where `settings.hessian_method` is `method`: power's go to its
    step (`hessian.spectrum_step`), Lanczos's to its host loop (`hessian.spectrum_on_host`)."""
    if settings.hessian_method != method:
        return {}
    return {"max_iterations": settings.hessian_iterations, "tolerance": settings.hessian_tolerance}


def on_host(model, variables, settings: Settings, batch) -> bool:
    """Whether the Hessian's iterations run from the host: always for Lanczos; for power iteration,
    `settings.hessian_loop` ("auto": `hessian.host_loop_is_faster` on one mini-batch `batch`)."""
    if settings.hessian_method == "lanczos":
        return True
    if settings.hessian_loop != "auto":
        return settings.hessian_loop == "host"
    loss = objective_fn(model, variables, settings, settings.hessian_l2_form)
    return hessian.host_loop_is_faster(loss, variables["params"], batch)


def hessian_program(model, variables, settings: Settings, batches, key) -> tuple:
    """(jitted function, example arguments, whether it runs from the host) of the Hessian for
    `programs.compile_all`: the HVP step (`hessian_step`, state donated) where `on_host`, else the whole
    spectrum (`hessian_spectrum`)."""
    first = jax.tree.map(lambda a: a[0], batches)
    if on_host(model, variables, settings, first):
        v0_P = hessian.start_vector(key, variables["params"])
        state = (
            eigensolvers.power_init(v0_P, settings.top_k)
            if settings.hessian_method == "power"
            else v0_P
        )
        step = jax.jit(functools.partial(hessian_step, model, settings), donate_argnums=2)
        return step, (variables, first, state), True
    return (
        jax.jit(functools.partial(hessian_spectrum, model, settings)),
        (variables, batches, key),
        False,
    )


def loss_landscape(model, settings: Settings, variables, batches, key):
    """PK22 Fig. 1 on one batch of training images: (surface_GxG of `objective_fn` along two directions
    drawn from `key` (the same for every batch) and normalised by `settings.landscape_normalisation`,
    penalty_GxG: the L2 term of that objective at the same points). `batches` are mixed mini-batches
    (images_MxbxHxWxC, targets_MxbxK), scored together: the loss is the mean over their M b images. The
    L2 term comes apart so that a rise can be read with and without it: away from theta* it is most of
    PK22's rise (docs/how_vits_work.md, Issue 46)."""
    params = variables["params"]
    k1, k2 = jax.random.split(key)
    d1 = landscape.random_direction(k1, params, settings.landscape_normalisation)
    d2 = landscape.random_direction(k2, params, settings.landscape_normalisation)
    axis = landscape.grid(settings.landscape_grid)
    loss = objective_fn(model, variables, settings, settings.landscape_l2_form)
    images, targets = batches
    batch = (images.reshape(-1, *images.shape[2:]), targets.reshape(-1, targets.shape[-1]))
    surface = landscape.surface(
        loss, params, batch, d1, d2, xs=axis, ys=axis, chunk=settings.landscape_chunk or None
    )
    l2 = lambda p, _: objective.l2_penalty(p, settings.weight_decay, settings.landscape_l2_form)  # noqa: E731
    return surface, landscape.surface(l2, params, None, d1, d2, xs=axis, ys=axis, chunk=len(axis))
