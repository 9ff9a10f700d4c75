"""Figures of PK22's measurements (Figs. 1, 2, 4, 5, 6), one panel per model, side by side.

Every function takes {model label: results of `posattn.papers.pk22.suite.measure`} and returns a
`matplotlib.figure.Figure` (no pyplot, no backend switch); `posattn.plots.save_png` writes it.
"""

import numpy as np
from matplotlib import cm
from matplotlib.figure import Figure

ATTENTION_SHADE = dict(color="0.85", zorder=0)  # PK22 shades attention layers grey


def _depth(n: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(1)


def _shade_attention(ax, r) -> None:
    """Grey bands over the attention layers, at their normalised depth."""
    depth = _depth(len(r["layers"]))
    half = 0.5 / max(len(r["layers"]) - 1, 1)
    for name, d in zip(r["layers"], depth):
        if name.endswith("/attention"):
            ax.axvspan(d - half, d + half, **ATTENTION_SHADE)


def _panels(n: int, width: float = 3.4, height: float = 3.0, **kw):
    fig = Figure(figsize=(width * n, height), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False, **kw)[0]
    return fig, axes


def hessian_spectra(results: dict) -> Figure:
    """PK22 Fig. 2: density of the top-5 Hessian eigenvalues pooled over mini-batches, per model; NEP and
    APE in the title, with their 95% intervals where the results hold them (`hessian.summaries`)."""
    fig, axes = _panels(len(results))
    for ax, (label, r) in zip(axes, results.items()):
        lams = np.ravel(r["hessian"]["eigenvalues"])
        ax.hist(lams, bins=30, density=True, color="tab:blue", alpha=0.8)
        ax.axvline(0, color="k", lw=0.8)
        h = r["hessian"]
        interval = lambda k, d: (
            f" [{h[k + '_interval'][0]:.{d}f}, {h[k + '_interval'][1]:.{d}f}]"  # noqa: E731
            if k + "_interval" in h
            else ""
        )
        ax.set_title(
            f"{label}\nNEP {h['nep']:.2f}{interval('nep', 2)}, APE {h['ape']:.1f}{interval('ape', 1)}",
            fontsize=9,
        )
        ax.set_xlabel("top-5 Hessian eigenvalue")
    axes[0].set_ylabel("density")
    return fig


def fourier_profiles(results: dict) -> Figure:
    """PK22 Fig. 4: (top) relative log amplitude against frequency, one curve per layer (dark = early,
    bright = late); (bottom) its high-frequency value against depth, attention layers shaded."""
    n = len(results)
    fig = Figure(figsize=(3.4 * n, 6.0), layout="constrained")
    axes = fig.subplots(2, n, squeeze=False)
    for i, (label, r) in enumerate(results.items()):
        ax, ax2 = axes[0, i], axes[1, i]
        names = r["layers"]
        colours = cm.plasma(np.linspace(0, 0.9, len(names)))
        for name, colour in zip(names, colours):
            delta = np.asarray(r["fourier"][name], float)
            if delta.size > 1 and np.isfinite(delta).all():
                ax.plot(np.linspace(0, 1, delta.size), delta, color=colour, lw=1)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("frequency (x pi)")
        _shade_attention(ax2, r)
        ax2.plot(_depth(len(names)), r["high_frequency"], marker="o", ms=3, color="tab:red")
        ax2.set_xlabel("normalised depth")
    axes[0, 0].set_ylabel("Delta log amplitude")
    axes[1, 0].set_ylabel("Delta log amplitude at 1.0 pi")
    return fig


def feature_variance(results: dict) -> Figure:
    """PK22 Fig. 6: feature-map variance against depth, attention layers shaded."""
    fig, axes = _panels(len(results))
    for ax, (label, r) in zip(axes, results.items()):
        _shade_attention(ax, r)
        ax.plot(_depth(len(r["layers"])), r["variance"], marker="o", ms=3, color="tab:green")
        ax.set_yscale("log")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("normalised depth")
    axes[0].set_ylabel("feature-map variance")
    return fig


def noise_robustness(results: dict) -> Figure:
    """PK22 Fig. 5: the change of test accuracy under band-limited noise (negative: a drop) against the
    noise frequency, all models. A band that holds no frequency of a model's images
    (results["noise"]["empty_bands_pi"]) is left out of its curve, not drawn as 0, and named below."""
    fig = Figure(figsize=(5, 3.5), layout="constrained")
    ax = fig.subplots()
    empty_any = set()
    for label, r in results.items():
        freqs, empty = (
            np.asarray(r["noise"]["frequencies_pi"], float),
            r["noise"].get("empty_bands_pi", []),
        )
        drops = np.where(
            np.isin(freqs, empty), np.nan, np.asarray(r["noise"]["drop_points"], float)
        )
        ax.plot(freqs, drops, marker="o", label=label)
        empty_any.update(empty)
    if empty_any:
        ax.text(
            0.01,
            0.01,
            "no frequency at this size: " + ", ".join(f"{f:g}" for f in sorted(empty_any)) + " pi",
            transform=ax.transAxes,
            fontsize=7,
            va="bottom",
        )
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("noise frequency (x pi)")
    ax.set_ylabel("accuracy with noise - without (points)")
    ax.legend(fontsize=8)
    return fig


def loss_landscapes(results: dict) -> Figure:
    """PK22 Fig. 1: the loss on the 2-D slice, contours (top row) and surfaces (bottom row)."""
    n = len(results)
    fig = Figure(figsize=(3.4 * n, 6.4), layout="constrained")
    for i, (label, r) in enumerate(results.items()):
        axis = np.asarray(r["landscape"]["axis"])
        X, Y = np.meshgrid(axis, axis)
        Z = np.asarray(r["landscape"]["loss"], float)
        ax = fig.add_subplot(2, n, i + 1)
        levels = np.linspace(
            np.nanmin(Z), np.nanmin(Z) + 3 * max(np.nanmedian(Z) - np.nanmin(Z), 1e-3), 15
        )
        ax.contour(X, Y, Z, levels=levels, cmap="viridis", linewidths=0.8)
        ax.plot(0, 0, "k+")
        ax.set_title(f"{label}\nloss at theta* {r['landscape']['loss_at_optimum']:.2f}", fontsize=9)
        ax3 = fig.add_subplot(2, n, n + i + 1, projection="3d")
        ax3.plot_surface(X, Y, np.minimum(Z, levels[-1] * 2), cmap="viridis", linewidth=0)
        ax3.set_zlabel("loss")
    return fig
