"""Figures of JSL22's other claims (SPEC 1.6): Figure 2, transfer (Theorem 5.1) and the sample sweep.

Kept apart from `posattn.theory.plots` (the theory-core figures) so the two can change independently.
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_figure2(path, history, A, block_mask, overlap: float, chance: float):
    """JSL22 Figure 2: test error over GD steps (left), the learned A (middle) beside the 2x2 blocks."""
    A = np.array(A, dtype=float)
    np.fill_diagonal(A, np.nan)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    axes[0].plot(history["step"], 100 * np.asarray(history["test_error"]))
    axes[0].set_xlabel("GD step")
    axes[0].set_ylabel("test error (%)")
    axes[0].set_title("Gaussian patches, cubic-CNN labels")
    im = axes[1].imshow(A, cmap="viridis")
    fig.colorbar(im, ax=axes[1], fraction=0.046)
    axes[1].set_title(f"learned A: off-diagonal top-(C-1) in block {overlap:.2f} (chance {chance:.2f})")
    axes[2].imshow(np.asarray(block_mask), cmap="Greys")
    axes[2].set_title("2x2 blocks of the labeller")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _band(ax, sizes, summary, label, colour):
    mean = 100 * np.asarray(summary["test_error_mean"])
    lo, hi = 100 * np.asarray(summary["test_error_q25"]), 100 * np.asarray(summary["test_error_q75"])
    ax.plot(sizes, mean, "o-", color=colour, label=label)
    ax.fill_between(sizes, lo, hi, color=colour, alpha=0.25, lw=0)


def plot_transfer(path, result: dict):
    """Test error against the downstream sample size N' (mean, band = quartiles over seeds)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    sizes = result["frozen_A"]["sizes"]
    _band(ax, sizes, result["frozen_A"], "A frozen from pre-training, v re-trained", "C0")
    _band(ax, sizes, result["scratch"], "(A, v) from scratch", "C3")
    ax.axhline(100 * result["target"], color="k", ls="--", lw=1, label=f"{100 * result['target']:.0f}%")
    ax.set_xscale("log")
    ax.set_xlabel("downstream samples N'")
    ax.set_ylabel("test error (%)")
    ax.set_title(f"transfer to w' orthogonal to w* ({result['frozen_A']['seeds']} seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_sweep(path, summary: dict):
    """Success rate of patch association (left) and test error (right) against N, over seeds."""
    sizes = summary["sizes"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    axes[0].plot(sizes, 100 * np.asarray(summary["patch_association_rate"]), "o-")
    axes[0].set_ylabel("runs with patch association (%)")
    axes[0].set_ylim(-5, 105)
    _band(axes[1], sizes, summary, "test error", "C0")
    axes[1].set_ylabel("test error (%)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("training samples N")
    fig.suptitle(f"GD on (E) over {summary['seeds']} seeds per N", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
