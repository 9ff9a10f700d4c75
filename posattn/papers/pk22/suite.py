"""Every PK22 measurement of one trained image model: what `experiments/how_vits_work.py` runs per run.

`measure(model, variables, config, settings, key)` streams the run's dataset (`posattn.papers.pk22.
streams`: test images for the Fourier, variance and noise tools; augmented, mixed-up training images
for the Hessian and the landscape) through the measurements of `posattn.papers.pk22.measures`, as
three compiled programs, each compiled once for its batch shape and run batch after batch: one
evaluation pass per noise band serves the Fourier, variance and noise tools; the Hessian spectrum (or,
where `measures.on_host`, its Hessian-vector step called from Python); the landscape on one batch of
training images (and a fourth, `measures.stem_position_parts`, for a model whose Subject names a
positional embedding). A split of any size fits, since no program sees more than one batch
(`Settings.eval_batch_size`, `Settings.landscape_batch_size`), and the answer does not depend on the
batch size: the noise of a test image is drawn from its index, the augmentation and mixup of a
training mini-batch from its index.

It returns plain numbers and arrays (`jsonable`) and, beside every summary, the per-unit values the
intervals of `posattn.papers.pk22.claims` resample (per test image, per Hessian mini-batch, per
landscape batch: `posattn.analysis.bootstrap`). The objective of the Hessian and the landscape is
`measures.objective_fn`.
"""

import functools
import time

import jax
import numpy as np

from posattn import progress
from posattn.analysis import frequency_noise, hessian, landscape, programs, subject
from posattn.papers.pk22 import measures, streams
from posattn.papers.pk22.settings import QUICK, Settings, settings_from  # noqa: F401 (suite.Settings, ...)
from posattn.vision.models.sown import STEM
from posattn.vision.setup import resolve


def measure(
    model, variables, config, settings: Settings, key: jax.Array, *, name: str = "", dataset=None
) -> dict:
    """Every PK22 measurement of one model; returns {tool: results}, all numbers and lists.

    Three programs (`forward_measures`, `hessian_program`, `loss_landscape` of `measures`; and
    `stem_position_parts` where the Subject names a positional embedding and sows a stem), each
    compiled once for its batch shape, two at a time (`programs.compile_all`), then run over the
    batches of their split; "seconds" holds each one's compile and run time. `dataset` (one of your own
    arrays, named by config.dataset) replaces the lookup of config.dataset. `model` is posattn's image
    model with its `variables`, or any model as a `posattn.analysis.subject.Subject` with `variables`
    None (config.model is then not measured).
    """
    # every model runs as a Subject (posattn's own by `subject.of_model`), seen by the programs as a module
    subj = model if isinstance(model, subject.Subject) else subject.of_model(model, variables)
    model, variables = subject.as_module(subj)
    setup = resolve(config, 1, dataset)
    k_hess, k_noise, k_land, k_data, k_aug, k_mix = jax.random.split(key, 6)
    train = setup.split("train")
    b, M = settings.hessian_batch_size, settings.hessian_batches
    L = streams.landscape_image_count(settings, train.num_examples)
    E = settings.landscape_batch_size
    # one random order of the training split: the Hessian's M mini-batches are its first M b images
    # (from the start again where the split is shorter), the landscape's its first L images
    order = np.asarray(jax.random.permutation(k_data, train.num_examples))
    train_batch = streams.training_batches(setup, settings, order, k_aug, k_mix)

    hess_batches = train_batch(np.arange(M * b), 0, 0)
    test = setup.split("test")
    x0, y0, keys0 = streams.test_batch(
        setup,
        test,
        next(streams.batches_of(test.num_examples, settings.eval_batch_size))[1],
        k_noise,
    )
    land0 = train_batch(np.arange(E), 0, 1)
    feat_shapes = jax.eval_shape(functools.partial(subject.features, subj), x0[:1])
    layers = list(feat_shapes)  # forward order (an OrderedDict)
    with_position = subj.pos_embedding is not None and STEM in layers

    hess_fn, hess_args, hess_on_host = measures.hessian_program(
        model, variables, settings, hess_batches, k_hess
    )
    t = time.perf_counter()
    # the Hessian first: the longest compile, overlapped with the others
    specs = {
        "hessian": (hess_fn, hess_args),
        "forward": (
            jax.jit(functools.partial(measures.forward_measures, model, layers, settings)),
            (variables, x0, y0, keys0),
        ),
        "landscape": (
            jax.jit(functools.partial(measures.loss_landscape, model, settings)),
            (variables, land0, k_land),
        ),
    }
    if with_position:  # on the Fourier and variance tools' images
        x_feat = streams.test_inputs(
            setup, test, np.arange(min(test.num_examples, settings.feature_images))
        )[0]
        specs["stem"] = (
            jax.jit(functools.partial(measures.stem_position_parts, model, subj.pos_embedding)),
            (variables, x_feat),
        )
    compiled, compile_s = programs.compile_all(specs)
    seconds = {
        "compile_wall": time.perf_counter() - t,
        **{f"compile_{k}": v for k, v in compile_s.items()},
    }
    progress.say(
        f"  {name}: compiled its {len(specs)} programs in {seconds['compile_wall']:.1f}s ("
        + ", ".join(f"{k} {v:.1f}s" for k, v in compile_s.items())
        + ")"
    )

    def timed(tool, fn):
        t = time.perf_counter()
        out = jax.block_until_ready(fn())
        seconds[f"run_{tool}"] = time.perf_counter() - t
        progress.say(f"  {name}: ran {tool} in {seconds[f'run_{tool}']:.1f}s")
        return out

    # Fourier, variance and accuracy under band-limited noise on the test split (PK22 Figs. 4, 5, 6)
    fwd = timed(
        "forward",
        lambda: streams.stream_forward(
            functools.partial(compiled["forward"], variables),
            setup,
            settings,
            k_noise,
            limit=settings.test_images or None,
        ),
    )
    out = _forward_results(fwd, layers, feat_shapes, settings, setup)
    if (
        with_position
    ):  # the positional embedding's share of the stem (docs/how_vits_work.md, Subjects)
        parts = jax.device_get(compiled["stem"](variables, x_feat))
        out["stem_position"] = {
            k: {"high_frequency": np.asarray(hf).tolist(), "variance": np.asarray(v).tolist()}
            for k, (hf, v) in parts.items()
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
                **measures.stopping(settings, "lanczos"),
            ),
        )
    else:
        eigs = timed("hessian", lambda: compiled["hessian"](variables, hess_batches, k_hess))
    out["hessian"] = _hessian_results(eigs, settings)

    # loss landscape (PK22 Fig. 1): the mean of its batches' surfaces (batches of equal size)
    def landscape_batches():
        surfaces = []
        for start in range(0, L, E):
            batch = train_batch(np.arange(start, start + E), start // b, 1)
            surf, penalty_GxG = compiled["landscape"](variables, batch, k_land)
            surfaces.append(np.asarray(surf))
        return np.stack(surfaces), np.asarray(penalty_GxG, np.float64)

    surf_BxGxG, penalty = timed("landscape", landscape_batches)
    out["landscape"] = _landscape_results(surf_BxGxG, penalty, settings, L)
    out["seconds_by_program"] = seconds
    return out


def _forward_results(fwd: dict, layers, feat_shapes, settings: Settings, setup) -> dict:
    """The layers, Fourier profiles, high-frequency values, variances and accuracy under noise of the
    streamed evaluation passes `fwd` (`streams.stream_forward`), with their per-image values."""
    # (1 + F, N), 1.0 / 0.0; NaN rows: bands with no frequency of these images
    correct = fwd["correct"]
    acc = correct.mean(axis=1)
    out = {"layers": layers, "layer_sizes": [int(feat_shapes[k].shape[1]) for k in layers]}
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
    return out


def _objective_settings(settings: Settings) -> dict:
    """The settings of the objective the Hessian and the landscape measure (`measures.objective_fn`)."""
    return {
        "weight_decay": settings.weight_decay,
        "mixup_alpha": settings.mixup_alpha,
        "label_smoothing": settings.label_smoothing,
    }


def _hessian_results(eigs, settings: Settings) -> dict:
    """Every eigenvalue of the Hessian's mini-batches with its convergence (one that did not converge
    is flagged in the summary), and the summaries of `hessian.summaries`."""
    return {
        "eigenvalues": np.asarray(eigs.values).tolist(),
        "iterations": np.asarray(eigs.iterations).tolist(),
        "residuals": np.asarray(eigs.residuals).tolist(),
        "converged": np.asarray(eigs.converged).tolist(),
        **hessian.summaries(
            eigs, resamples=settings.bootstrap_resamples, seed=settings.bootstrap_seed
        ),
        "batch_size": settings.hessian_batch_size,
        "l2_form": settings.hessian_l2_form,
        **_objective_settings(settings),
    }


def _landscape_results(
    surf_BxGxG: np.ndarray, penalty_GxG: np.ndarray, settings: Settings, L: int
) -> dict:
    """The landscape of `L` training images: the mean of its batches' surfaces `surf_BxGxG`, each
    batch's, the L2 term at every point (`penalty_GxG`, the same for every batch), and the loss at and
    along d1 from theta*."""
    surf, axis = surf_BxGxG.mean(axis=0), landscape.grid(settings.landscape_grid)
    centre = settings.landscape_grid // 2
    row = surf[centre]  # y = 0: the loss along d1 through theta*
    at_optimum = float(row[centre])
    penalty = float(penalty_GxG[centre, centre])
    return {
        "axis": axis.tolist(),
        "loss": surf.tolist(),
        "batch_loss": surf_BxGxG.tolist(),
        "penalty": penalty_GxG.tolist(),
        "penalty_at_optimum": penalty,
        "nll_at_optimum": float(at_optimum - penalty),
        "loss_at_optimum": at_optimum,
        "delta_at_half": float(row[centre + centre // 2] - at_optimum),  # x = 0.5
        "delta_at_one": float(row[-1] - at_optimum),
        "images": L,
        "batch_size": settings.landscape_batch_size,
        "normalisation": settings.landscape_normalisation,
        "l2_form": settings.landscape_l2_form,
        **_objective_settings(settings),
    }
