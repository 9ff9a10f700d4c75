"""Figures of LWLC23's deeper-ViT experiment on token grids (`posattn.papers.lwlc23.grid_experiment`), as
`matplotlib.figure.Figure` objects: accuracy against alpha_* beside the paper's, the attention mass on
relevant slots against chance, and accuracy after pruning the least attended slots against random ones.
"""

import numpy as np
from matplotlib.figure import Figure

KIND_COLOURS = {"vanilla": "tab:blue", "positional": "tab:orange"}


def _style(point: dict) -> dict:
    """A curve's colour by attention kind, solid from a pre-trained start, dashed from scratch."""
    return {
        "color": KIND_COLOURS.get(point["attention"], "tab:grey"),
        "linestyle": "-" if point.get("start") == "pretrained" else "--",
    }


def _finish(fig: Figure, ax, xlabel: str, ylabel: str) -> Figure:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


ALPHA = "alpha_* (label-relevant slots / 9)"


def accuracy(curves: dict[str, list[dict]], paper: dict[int, float] | None = None) -> Figure:
    """Test accuracy against alpha_* = R/9 for each curve ({name: its points by R, from
    `grid_report.curves`}: the mean over seeds, error bars its 95% interval), and LWLC23's `paper`
    ({R: accuracy}, pre-trained init on CIFAR-10)."""
    fig = Figure(figsize=(5.5, 3.8))
    ax = fig.add_subplot()
    if paper:
        Rs = sorted(paper)
        ax.plot(
            [R / 9 for R in Rs],
            [paper[R] for R in Rs],
            "k:o",
            label="LWLC23 (pre-trained, CIFAR-10)",
        )
    for name, points in curves.items():
        mean, low, high = np.array([p["accuracy_interval"] for p in points]).T
        bars = None if np.isnan(low).all() else np.stack([mean - low, high - mean])
        ax.errorbar(
            [p["alpha_star"] for p in points],
            mean,
            yerr=bars,
            marker="o",
            capsize=3,
            label=f"ours, {name}",
            **_style(points[0]),
        )
    return _finish(fig, ax, ALPHA, "test accuracy")


def attention_mass(curves: dict[str, list[dict]]) -> Figure:
    """Attention mass on relevant slots (last block, mean over heads and seeds) against alpha_*, and
    chance R/9."""
    fig = Figure(figsize=(5.5, 3.8))
    ax = fig.add_subplot()
    for name, points in curves.items():
        ax.plot(
            [p["alpha_star"] for p in points],
            [p["relevant_mass"] for p in points],
            marker="o",
            label=name,
            **_style(points[0]),
        )
    alphas = sorted({p["alpha_star"] for points in curves.values() for p in points})
    ax.plot(alphas, alphas, "k:", label="chance (R/9)")
    return _finish(fig, ax, ALPHA, "attention mass on relevant slots")


def pruning(curves: dict[str, list[dict]]) -> Figure:
    """Per curve, test accuracy (mean over seeds) against the number k of removed slots, one line per
    alpha_*: the k least attended (solid) and k random ones (dashed)."""
    fig = Figure(figsize=(4.5 * len(curves), 3.6))
    for i, (name, points) in enumerate(curves.items()):
        ax = fig.add_subplot(1, len(curves), i + 1)
        for j, p in enumerate(points):
            colour = f"C{j}"
            ax.plot(
                p["ks"], p["accuracy_attention_pruned"], "-o", color=colour, label=f"R = {p['R']}"
            )
            ax.plot(p["ks"], p["accuracy_random_pruned"], "--", color=colour, alpha=0.6)
        ax.set_title(f"{name}: least attended (solid), random (dashed)", fontsize=9)
        _finish(fig, ax, "slots removed per grid, k", "test accuracy")
    return fig
