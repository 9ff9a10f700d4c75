"""Figures of LWLC23's deeper-ViT experiment on token grids (`posattn.papers.lwlc23.grid_experiment`), as
`matplotlib.figure.Figure` objects: accuracy against alpha_* beside the paper's, the attention mass on
relevant slots against chance, and accuracy after pruning the least attended slots against random ones.
"""
from matplotlib.figure import Figure

KIND_COLOURS = {"vanilla": "tab:blue", "positional": "tab:orange"}


def _colour(kind: str) -> str:
    return KIND_COLOURS.get(kind, "tab:grey")


def _finish(fig: Figure, ax, xlabel: str, ylabel: str) -> Figure:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


ALPHA = "alpha_* (label-relevant slots / 9)"


def accuracy(kinds: dict[str, list[dict]], paper: dict[int, float] | None = None) -> Figure:
    """Test accuracy against alpha_* = R/9 for each attention kind ({kind: its cells by R}), and LWLC23's
    `paper` ({R: accuracy}, pre-trained init)."""
    fig = Figure(figsize=(5, 3.6))
    ax = fig.add_subplot()
    if paper:
        Rs = sorted(paper)
        ax.plot([R / 9 for R in Rs], [paper[R] for R in Rs], "k--o", label="LWLC23 (pre-trained, CIFAR-10)")
    for kind, cs in kinds.items():
        ax.plot([c["alpha_star"] for c in cs], [c["test_accuracy"] for c in cs], "-o", color=_colour(kind),
                label=f"ours, {kind} (from scratch)")
    return _finish(fig, ax, ALPHA, "test accuracy")


def attention_mass(kinds: dict[str, list[dict]]) -> Figure:
    """Attention mass on relevant slots (last block, mean over heads) against alpha_*, and chance R/9."""
    fig = Figure(figsize=(5, 3.6))
    ax = fig.add_subplot()
    for kind, cs in kinds.items():
        ax.plot([c["alpha_star"] for c in cs], [c["relevant_mass"] for c in cs], "-o", color=_colour(kind),
                label=kind)
    alphas = sorted({c["alpha_star"] for cs in kinds.values() for c in cs})
    ax.plot(alphas, alphas, "k:", label="chance (R/9)")
    return _finish(fig, ax, ALPHA, "attention mass on relevant slots")


def pruning(kinds: dict[str, list[dict]]) -> Figure:
    """Per attention kind, test accuracy against the number k of removed slots, one line per alpha_*:
    the k least attended (solid) and k random ones (dashed)."""
    fig = Figure(figsize=(4.5 * len(kinds), 3.6))
    for i, (kind, cs) in enumerate(kinds.items()):
        ax = fig.add_subplot(1, len(kinds), i + 1)
        for j, c in enumerate(cs):
            colour = f"C{j}"
            ax.plot(c["ks"], c["accuracy_attention_pruned"], "-o", color=colour, label=f"R = {c['R']}")
            ax.plot(c["ks"], c["accuracy_random_pruned"], "--", color=colour, alpha=0.6)
        ax.set_title(f"{kind}: least attended (solid), random (dashed)", fontsize=9)
        _finish(fig, ax, "slots removed per grid, k", "test accuracy")
    return fig
