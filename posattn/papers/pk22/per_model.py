"""One model's summary numbers from its measurements (`suite.measure` results), each with its 95%
percentile bootstrap interval over the measurement's own units (`estimates`); `claims` sets them beside
PK22's claims, `over_seeds` takes them over trained models.

Layer changes (how a layer moves the high-frequency amplitude or the variance) compare each layer with
the one before it at the same map size: a subsampling step changes both for reasons of its own (PK22
shades it apart, Fig. 6).
"""

import numpy as np

from posattn.analysis import bootstrap


def layer_changes(names, sizes, values) -> dict[str, float]:
    """Mean change of a per-layer value across attention layers and across the other layers
    (conv blocks, MLPs), each against the previous layer of the same map size; NaNs left out."""
    att, other = [], []
    for i in range(1, len(names)):
        if sizes[i] != sizes[i - 1] or not np.isfinite(values[i]) or not np.isfinite(values[i - 1]):
            continue
        (att if names[i].endswith("/attention") else other).append(values[i] - values[i - 1])
    mean = lambda xs: float(np.mean(xs)) if xs else float("nan")  # noqa: E731
    share = lambda xs: float(np.mean(np.asarray(xs) < 0)) if xs else float("nan")  # noqa: E731
    return {
        "attention": mean(att),
        "other": mean(other),
        "attention_lowers": share(att),
        "other_lowers": share(other),
        "attention_layers": len(att),
        "other_layers": len(other),
    }


def hessian_not_converged(r: dict) -> int | None:
    """How many of one model's Hessian eigenvalues did not converge: from the results' "converged" flags
    (`eigensolvers.Eigenpairs.converged`), or for results written before them, the runs whose iterations
    reached settings.hessian_iterations (stalled runs are not known there); None where neither is."""
    h = r["hessian"]
    if "converged" in h:
        return int(np.sum(~np.asarray(h["converged"], bool)))
    cap = r.get("settings", {}).get("hessian_iterations")
    if cap is None or "iterations" not in h:
        return None
    return int(np.sum(np.asarray(h["iterations"]) >= cap))


def _log_variance(v):
    v = np.asarray(v, np.float64)
    return np.where(np.isfinite(v) & (v > 0), np.log(np.where(v > 0, v, 1.0)), np.nan)


def bootstrap_settings(r: dict) -> dict:
    """{"resamples", "seed"} of the intervals of one model's results: its settings' (bootstrap's defaults
    for results written without them)."""
    settings = r.get("settings", {})
    return {
        "resamples": settings.get("bootstrap_resamples", bootstrap.RESAMPLES),
        "seed": settings.get("bootstrap_seed", bootstrap.SEED),
    }


def estimates(r: dict) -> dict[str, dict | None]:
    """Every summary number of one model's results, {"value", "lo", "hi"} with its 95% percentile
    bootstrap interval (`bootstrap.interval`) over the measurement's units: test images for the accuracy,
    the noise drops and (the first `feature_images` of them) the Fourier and variance changes; mini-batches
    for the Hessian (`hessian.summaries`); the landscape's batches for its NLL and rises. None where a
    model has no such number (no attention layer). The resamples and seed are the results' settings'."""
    kw = bootstrap_settings(r)
    est = lambda units, fn: bootstrap.estimate(np.asarray(units, np.float64), fn, **kw)  # noqa: E731
    names, sizes = r["layers"], r["layer_sizes"]
    out = {}
    correct_NxF = np.asarray(
        r["noise"]["correct"], np.float64
    ).T  # (N, 1 + F): the units are images
    out["accuracy"] = est(correct_NxF[:, 0], lambda c: 100 * c.mean())
    freqs = r["noise"]["frequencies_pi"]
    for key, f in (("noise_low", 0.1), ("noise_high", 0.9)):
        i = 1 + freqs.index(f)
        if f in r["noise"].get(
            "empty_bands_pi", ()
        ):  # no noise there: not a drop of 0 (`_cell`, `rows`)
            out[key] = {
                "value": float("nan"),
                "lo": float("nan"),
                "hi": float("nan"),
                "empty": True,
            }
            continue
        out[key] = est(correct_NxF[:, [0, i]], lambda c: 100 * (c[:, 1].mean() - c[:, 0].mean()))
    hf_NxL = np.asarray(r["per_image"]["high_frequency"], np.float64)
    logvar = lambda v_NxL: _log_variance(np.asarray(v_NxL).mean(axis=0))  # noqa: E731
    changes = {
        "fourier": (hf_NxL, lambda v_NxL: np.asarray(v_NxL).mean(axis=0)),  # NaN: a one-point map
        "variance": (np.asarray(r["per_image"]["variance"], np.float64), logvar),
    }
    for tool, (units, per_layer) in changes.items():
        point = layer_changes(names, sizes, per_layer(units))
        for kind in ("attention", "other"):
            stat = lambda u, kind=kind: layer_changes(names, sizes, per_layer(u))[kind]  # noqa: E731
            out[f"{tool}_{kind}"] = est(units, stat) if point[f"{kind}_layers"] else None
    out["fourier_min"] = est(hf_NxL, lambda u: np.nanmin(u.mean(axis=0)))
    out["fourier_max"] = est(hf_NxL, lambda u: np.nanmax(u.mean(axis=0)))
    not_converged, count = hessian_not_converged(r), int(np.size(r["hessian"]["eigenvalues"]))
    for name in ("ape", "nep"):
        lo, hi = r["hessian"][f"{name}_interval"]
        out[f"hessian_{name}"] = {
            "value": r["hessian"][name],
            "lo": lo,
            "hi": hi,
            "not_converged": not_converged,
            "eigenvalues": count,
        }
    land = r["landscape"]
    surf_BxGxG = np.asarray(land["batch_loss"], np.float64)
    c = surf_BxGxG.shape[-1] // 2
    penalty = land.get("penalty_at_optimum", land["loss_at_optimum"] - land["nll_at_optimum"])
    out["landscape_nll"] = est(surf_BxGxG[:, c, c], lambda u: u.mean() - penalty)
    # the L2 term's own rise (the same for every batch), where the results hold it at every point
    l2_GxG = np.asarray(land["penalty"], np.float64) if "penalty" in land else None
    for key, x in (("landscape_half", c + c // 2), ("landscape_one", 2 * c)):
        out[key] = est(surf_BxGxG[:, c, [c, x]], lambda u: (u[:, 1] - u[:, 0]).mean())
        l2_rise = None if l2_GxG is None else l2_GxG[c, x] - l2_GxG[c, c]
        out[f"{key}_nll"] = (
            None
            if l2_rise is None
            else est(surf_BxGxG[:, c, [c, x]], lambda u, r=l2_rise: (u[:, 1] - u[:, 0]).mean() - r)
        )
    return out
