"""Figures of the image experiments: JSL22 Figure 5 (permuted pixels), Figures 1a/5c (positional-embedding
similarity maps) and Figures 6/7 (vanilla vs positional attention over seeds).

Each function returns a `matplotlib.figure.Figure` (no pyplot: the user's backend is never touched);
the caller saves it (`posattn.plots.save_png`).
"""

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, NullFormatter

from posattn.papers.jsl22.image_tables import LABELS

COLOURS = {"vit": "tab:blue", "resnet18": "tab:red", "vgg16": "tab:green"}


def permuted_figure(summary: dict) -> Figure:
    """Figure 5: test accuracy against g, mean +- std over seeds; the unpermuted value dashed."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    base = str(summary["unpermuted_g"])
    for model, per in summary["accuracy"].items():
        gs = sorted(per, key=int)
        means = [per[g]["mean"] for g in gs]
        stds = [per[g]["std"] for g in gs]
        colour = COLOURS.get(model)
        ax.errorbar(
            [int(g) for g in gs],
            means,
            yerr=stds,
            marker="o",
            capsize=3,
            color=colour,
            label=LABELS.get(model, model),
        )
        if base in per:
            ax.axhline(per[base]["mean"], ls="--", color=colour, lw=1)
    ax.set_xscale("log", base=2)
    ticks = sorted({int(g) for per in summary["accuracy"].values() for g in per})
    ax.set_xticks(ticks, [str(g) for g in ticks])
    ax.set_xlabel(f"pixel-block size g (g = {base}: unpermuted, dashed)")
    ax.set_ylabel(f"{summary.get('split', 'test')} accuracy (%)")
    seeds = ", ".join(f"{LABELS.get(m, m).split(' ')[0]} {n}" for m, n in summary["seeds"].items())
    ax.set_title(f"permuted {summary['dataset']} (JSL22 Fig. 5); seeds: {seeds}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    return fig


def compare_figure(summary: dict) -> Figure:
    """Figure 7: box plots of the test accuracy over seeds, vanilla beside positional attention."""
    kinds = list(summary["accuracy"])
    fig = Figure(figsize=(4.5, 4))
    ax = fig.subplots()
    # showfliers=False: every seed is drawn as a point below, outliers included (not twice).
    ax.boxplot(
        [summary["accuracy"][k]["values"] for k in kinds],
        tick_labels=kinds,
        widths=0.5,
        showfliers=False,
    )
    for i, k in enumerate(kinds, start=1):
        v = summary["accuracy"][k]["values"]
        ax.scatter(np.full(len(v), i) + np.linspace(-0.08, 0.08, len(v)), v, s=10, alpha=0.6)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{summary['dataset']}, ViT {summary['variant']}, {summary['seeds']} seeds")
    fig.tight_layout()
    return fig


def _without_self(map_hxw, i: int, w: int) -> np.ndarray:
    out = np.array(map_hxw, dtype=float)
    out[i // w, i % w] = np.nan
    return out


def similarity_maps_figure(panels: dict, patches, grid_hw, threshold: float) -> Figure:
    """Figures 1a / 5c: one row per panel (e.g. "as trained", "un-permuted"), one similarity map per
    chosen patch (the patch itself outlined in red).

    Every similarity is drawn on a diverging scale centred at 0 and as wide as the largest |similarity|
    between two different patches (the patch itself, always 1, is drawn grey), with the paper's
    threshold as a black contour where a map reaches it: in small trained models often only the patch
    itself passes 0.55, and the paper's presentation (blank below 0.55) would hide the structure that is
    there.
    """
    h, w = grid_hw
    cols = min(len(patches), 8)
    rows_per_panel = -(-len(patches) // cols)
    size = 1.9  # inches per map: large enough to read a 4 x 4 or 8 x 8 grid
    fig = Figure(figsize=(size * cols + 1.2, size * rows_per_panel * len(panels) + 0.8))
    axes = fig.subplots(rows_per_panel * len(panels), cols, squeeze=False)
    others = {
        title: [_without_self(maps[i], i, w) for i in patches] for title, maps in panels.items()
    }
    scale = max(float(np.nanmax(np.abs(m))) for ms in others.values() for m in ms)
    scale = min(1.0, np.ceil(max(scale, 1e-3) * 20) / 20)  # to the next 0.05
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="#bbbbbb")
    image = None
    for r, (title, maps) in enumerate(panels.items()):
        for n, i in enumerate(patches):
            ax = axes[r * rows_per_panel + n // cols, n % cols]
            image = ax.imshow(others[title][n], vmin=-scale, vmax=scale, cmap=cmap)
            if np.nanmax(others[title][n]) > threshold:
                ax.contour(others[title][n], levels=[threshold], colors="k", linewidths=1.0)
            ax.add_patch(Rectangle((i % w - 0.5, i // w - 0.5), 1, 1, fill=False, ec="red", lw=1.5))
            ax.set_title(f"{title}: patch {i}" if n == 0 else f"patch {i}", fontsize=8)
        for n in range(len(patches), rows_per_panel * cols):
            axes[r * rows_per_panel + n // cols, n % cols].set_visible(False)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(
        f"cosine similarity of positional embeddings to the patch outlined in red (grey: itself, "
        f"1); {h}x{w} grid; black contour: {threshold}, JSL22 Fig. 1a's threshold",
        fontsize=9,
    )
    fig.colorbar(image, ax=axes, fraction=0.02)
    return fig


def training_curves_figure(records: list[dict], title: str = "") -> Figure:
    """An image run's metrics.jsonl (the schema of `posattn.metric_log`) over the steps: training and
    test loss, then training and test error, as the theory binary draws its run."""

    def series(key):
        points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        return [p[0] for p in points], [p[1] for p in points]

    fig = Figure(figsize=(7, 6))
    loss_ax, error_ax = fig.subplots(2, 1, sharex=True)
    for key, style in (("train_loss", "-"), ("test_loss", "o-")):
        loss_ax.plot(*series(key), style, ms=3, label=key.replace("_", " "))
    steps, accuracy = series("train_accuracy")
    error_ax.plot(steps, [100 * (1 - a) for a in accuracy], "-", label="train error")
    steps, error = series("test_error")
    error_ax.plot(steps, [100 * e for e in error], "o-", ms=3, label="test error")
    loss_ax.set_ylabel("loss")
    error_ax.set_ylabel("error (%)")
    error_ax.set_xlabel("step")
    errors = [100 * (1 - a) for a in accuracy] + [100 * e for e in error]
    positive = [e for e in errors if e > 0]
    if positive and max(positive) > 10 * min(positive):  # a run that learns: errors span decades
        error_ax.set_yscale("log")
        error_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        error_ax.yaxis.set_minor_formatter(NullFormatter())
    for ax in (loss_ax, error_ax):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    loss_ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
