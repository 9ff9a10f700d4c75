"""Every PK22 measurement of one trained image model: what `experiments/how_vits_work.py` runs per run.

`measure(model, variables, config, settings, key)` streams the run's dataset through the tools of
`posattn.analysis` in batches (test images for the Fourier, variance and noise tools; augmented, mixed-up
training images for the Hessian and the landscape), as three compiled programs, each compiled once
for its batch shape and run batch after batch: one evaluation pass per noise band serves the Fourier,
variance and noise tools; the Hessian spectrum (or, where `on_host`, its Hessian-vector step called
from Python); the landscape on one batch of training images (and a
fourth, `stem_position_parts`, for a model whose Subject names a positional embedding). A split of
any size fits, since no program sees more than one batch (`Settings.eval_batch_size`,
`Settings.landscape_batch_size`), and the answer does not depend on the batch size: the noise of a test
image is drawn from its index, the augmentation and mixup of a training mini-batch from its index.

It returns plain numbers and arrays (`jsonable`) and, beside every summary, the per-unit values the
intervals of `posattn.papers.pk22.claims` resample (per test image, per Hessian mini-batch, per
landscape batch: `posattn.analysis.bootstrap`). The Hessian and the landscape share an objective
(`posattn.analysis.objective`, docs/how_vits_work.md, Decisions): the NLL of the model in evaluation
mode (batch norm with its running statistics, no dropout) against PK22's mixed, label-smoothed targets,
plus `settings.weight_decay` times an L2 term (PK22's sum of per-tensor norms for the landscape, half
the squared norm for the Hessian: `Settings`).
"""

import collections
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from posattn.analysis import (
    eigensolvers,
    fourier,
    frequency_noise,
    hessian,
    landscape,
    objective,
    programs,
    subject,
    variance,
)
from posattn.errors import ConfigError
from posattn.papers.pk22.settings import QUICK, Settings, settings_from  # noqa: F401 (suite.Settings, ...)
from posattn.vision import losses
from posattn.vision.models.sown import INTERMEDIATES, STEM
from posattn.vision.setup import Setup, resolve


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


def test_set(setup: Setup, limit: int | None = None):
    """(inputs, labels) of the test split (its first `limit` images), as the model sees them, in one
    array: for a small split (`measure` streams it in batches instead)."""
    split = setup.split("test")
    n = split.num_examples if limit is None else min(limit, split.num_examples)
    return _test_inputs(setup, split, np.arange(n))


def _test_inputs(setup: Setup, split, indices):
    """(inputs, labels) of the test images `indices`, as the model sees them."""
    images, labels = split.read(indices)
    return setup.eval_inputs(setup.permutation(jnp.asarray(images))), jnp.asarray(labels)


def _fold_keys(key, indices) -> jax.Array:
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
    keys = _fold_keys(key, first + jnp.arange(M))
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
    keys = _fold_keys(aug_key, first + jnp.arange(M))
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
        loss, method=settings.hessian_method, **_stopping(settings, "power")
    )
    return step(variables["params"], batch, state)


def _stopping(settings: Settings, method: str) -> dict:
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
    the L2 term at theta*). `batches` are mixed mini-batches (images_MxbxHxWxC, targets_MxbxK), scored
    together: the loss is the mean over their M b images."""
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
    return surface, objective.l2_penalty(params, settings.weight_decay, settings.landscape_l2_form)


def _say(message: str) -> None:
    print(message, flush=True)


def _test_batch(setup: Setup, split, indices, key):
    """(inputs, labels, noise keys) of the test images `indices`: image i's noise key is fold_in(key, i)."""
    return (*_test_inputs(setup, split, indices), _fold_keys(key, indices))


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
        c, p, v = jax.device_get(run(*_test_batch(setup, split, idx, key)))
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


def measure(
    model, variables, config, settings: Settings, key: jax.Array, *, name: str = "", dataset=None
) -> dict:
    """Every PK22 measurement of one model; returns {tool: results}, all numbers and lists.

    Three programs (`forward_measures`, `hessian_program`, `loss_landscape`; and `stem_position_parts`
    where the Subject names a positional embedding and sows a stem), each compiled once for its batch shape, two at a time
    (`programs.compile_all`), then run over the batches of their split; "seconds" holds each one's
    compile and run time. `dataset` (one of your own arrays, named by
    config.dataset) replaces the lookup of config.dataset. `model` is posattn's image model with its
    `variables`, or any model as a `posattn.analysis.subject.Subject` with `variables` None (config.model
    is then not measured).
    """
    # every model runs as a Subject (posattn's own by `subject.of_model`), seen by the programs as a module
    subj = model if isinstance(model, subject.Subject) else subject.of_model(model, variables)
    model, variables = subject.as_module(subj)
    setup = resolve(config, 1, dataset)
    k_hess, k_noise, k_land, k_data, k_aug, k_mix = jax.random.split(key, 6)
    train = setup.split("train")
    b, M = settings.hessian_batch_size, settings.hessian_batches
    L, E = landscape_image_count(settings, train.num_examples), settings.landscape_batch_size
    # one random order of the training split: the Hessian's M mini-batches are its first M b images
    # (from the start again where the split is shorter), the landscape's its first L images
    order = np.asarray(jax.random.permutation(k_data, train.num_examples))
    minibatches = jax.jit(functools.partial(training_minibatches, setup, settings))

    def train_batch(indices, first, stream):  # stream 0: the Hessian's, 1: the landscape's
        images, labels = train.read(order[indices % train.num_examples])
        keys = [jax.random.fold_in(k, stream) for k in (k_aug, k_mix)]
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

    hess_batches = train_batch(np.arange(M * b), 0, 0)
    test = setup.split("test")
    x0, y0, keys0 = _test_batch(
        setup, test, next(batches_of(test.num_examples, settings.eval_batch_size))[1], k_noise
    )
    land0 = train_batch(np.arange(E), 0, 1)
    feat_shapes = jax.eval_shape(functools.partial(subject.features, subj), x0[:1])
    layers = list(feat_shapes)  # forward order (an OrderedDict)
    with_position = subj.pos_embedding is not None and STEM in layers

    hess_fn, hess_args, hess_on_host = hessian_program(
        model, variables, settings, hess_batches, k_hess
    )
    t = time.perf_counter()
    # the Hessian first: the longest compile, overlapped with the others
    specs = {
        "hessian": (hess_fn, hess_args),
        "forward": (
            jax.jit(functools.partial(forward_measures, model, layers, settings)),
            (variables, x0, y0, keys0),
        ),
        "landscape": (
            jax.jit(functools.partial(loss_landscape, model, settings)),
            (variables, land0, k_land),
        ),
    }
    if with_position:  # on the Fourier and variance tools' images
        x_feat = _test_inputs(
            setup, test, np.arange(min(test.num_examples, settings.feature_images))
        )[0]
        specs["stem"] = (
            jax.jit(functools.partial(stem_position_parts, model, subj.pos_embedding)),
            (variables, x_feat),
        )
    compiled, compile_s = programs.compile_all(specs)
    seconds = {
        "compile_wall": time.perf_counter() - t,
        **{f"compile_{k}": v for k, v in compile_s.items()},
    }
    _say(
        f"  {name}: compiled its {len(specs)} programs in {seconds['compile_wall']:.1f}s ("
        + ", ".join(f"{k} {v:.1f}s" for k, v in compile_s.items())
        + ")"
    )

    def timed(tool, fn):
        t = time.perf_counter()
        out = jax.block_until_ready(fn())
        seconds[f"run_{tool}"] = time.perf_counter() - t
        _say(f"  {name}: ran {tool} in {seconds[f'run_{tool}']:.1f}s")
        return out

    out = {}
    # Fourier, variance and accuracy under band-limited noise on the test split (PK22 Figs. 4, 5, 6)
    fwd = timed(
        "forward",
        lambda: stream_forward(
            functools.partial(compiled["forward"], variables),
            setup,
            settings,
            k_noise,
            limit=settings.test_images or None,
        ),
    )
    correct = fwd[
        "correct"
    ]  # (1 + F, N), 1.0 / 0.0; NaN rows: bands with no frequency of these images
    acc = correct.mean(axis=1)
    out["layers"] = layers
    out["layer_sizes"] = [int(feat_shapes[k].shape[1]) for k in layers]
    out["fourier"] = {k: v.mean(axis=0).tolist() for k, v in fwd["profiles"].items()}
    # a profile of one point (a 2 x 2 map or smaller) is the DC term's own 0: no high-frequency value
    hf_NxL = np.stack(
        [
            p[:, -1] if p.shape[1] > 1 else np.full(p.shape[0], np.nan)
            for p in fwd["profiles"].values()
        ],
        axis=1,
    )
    var_NxL = np.stack(list(fwd["variances"].values()), axis=1)
    out["high_frequency"] = hf_NxL.mean(axis=0).tolist()
    out["variance"] = var_NxL.mean(axis=0).tolist()
    out["per_image"] = {"high_frequency": hf_NxL.tolist(), "variance": var_NxL.tolist()}
    out["noise"] = {
        "frequencies_pi": [round(f / np.pi, 3) for f in frequency_noise.FREQUENCIES],
        "clean_accuracy": float(acc[0]),
        "drop_points": (100 * (acc[1:] - acc[0])).tolist(),
        # (1 + F, N): clean, then each band; null where a band holds no frequency (not measured)
        "correct": [
            [None] * row.size if np.isnan(row).any() else row.astype(int).tolist()
            for row in correct
        ],
        "eps": settings.noise_eps,
        "band": settings.noise_band,
        "images": int(correct.shape[1]),
        "empty_bands_pi": [
            round(f / np.pi, 3)
            for f in frequency_noise.empty_bands(*setup.image_shape[:2], band=settings.noise_band)
        ],
    }
    if (
        with_position
    ):  # the positional embedding's share of the stem (docs/how_vits_work.md, Subjects)
        parts = jax.device_get(compiled["stem"](variables, x_feat))
        out["stem_position"] = {
            k: {"high_frequency": np.asarray(hf).tolist(), "variance": np.asarray(v).tolist()}
            for k, (hf, v) in parts.items()
        }
    objective_settings = {
        "weight_decay": settings.weight_decay,
        "mixup_alpha": settings.mixup_alpha,
        "label_smoothing": settings.label_smoothing,
    }

    # Hessian max-eigenvalue spectrum (PK22 Fig. 2)
    if hess_on_host:
        eigs = timed(
            "hessian",
            lambda: hessian.spectrum_on_host(
                lambda batch, state: compiled["hessian"](variables, batch, state),
                variables["params"],
                hess_batches,
                k_hess,
                k=settings.top_k,
                method=settings.hessian_method,
                **_stopping(settings, "lanczos"),
            ),
        )
    else:
        eigs = timed("hessian", lambda: compiled["hessian"](variables, hess_batches, k_hess))
    # every eigenvalue with its convergence: one that did not converge is flagged in the summary
    out["hessian"] = {
        "eigenvalues": np.asarray(eigs.values).tolist(),
        "iterations": np.asarray(eigs.iterations).tolist(),
        "residuals": np.asarray(eigs.residuals).tolist(),
        "converged": np.asarray(eigs.converged).tolist(),
        **hessian.summaries(
            eigs, resamples=settings.bootstrap_resamples, seed=settings.bootstrap_seed
        ),
        "batch_size": b,
        "l2_form": settings.hessian_l2_form,
        **objective_settings,
    }

    # loss landscape (PK22 Fig. 1): the mean of its batches' surfaces (batches of equal size)
    def landscape_batches():
        surfaces = []
        for start in range(0, L, E):
            batch = train_batch(np.arange(start, start + E), start // b, 1)
            surf, penalty = compiled["landscape"](variables, batch, k_land)
            surfaces.append(np.asarray(surf))
        return np.stack(surfaces), float(penalty)

    surf_BxGxG, penalty = timed("landscape", landscape_batches)
    surf, axis = surf_BxGxG.mean(axis=0), landscape.grid(settings.landscape_grid)
    centre = settings.landscape_grid // 2
    row = surf[centre]  # y = 0: the loss along d1 through theta*
    at_optimum = float(row[centre])
    out["landscape"] = {
        "axis": axis.tolist(),
        "loss": surf.tolist(),
        "batch_loss": surf_BxGxG.tolist(),
        "penalty_at_optimum": penalty,
        "nll_at_optimum": float(at_optimum - penalty),
        "loss_at_optimum": at_optimum,
        "delta_at_half": float(row[centre + centre // 2] - at_optimum),  # x = 0.5
        "delta_at_one": float(row[-1] - at_optimum),
        "images": L,
        "batch_size": E,
        "normalisation": settings.landscape_normalisation,
        "l2_form": settings.landscape_l2_form,
        **objective_settings,
    }
    out["seconds_by_program"] = seconds
    return out
