"""Figures of the theory regime (matplotlib, written to PNG files)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

PHASE_COLOURS = {"I": "#fde0c5", "II": "#c6dbef", "III": "#c7e9c0"}


def plot_attention(path, A, block_mask, title="learned A"):
    """The learned A (diagonal blanked: it is frozen) beside the true same-set mask."""
    A = np.array(A, dtype=float)
    np.fill_diagonal(A, np.nan)
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.8))
    im = axes[0].imshow(A, cmap="viridis")
    axes[0].set_title(f"{title} (diagonal blanked)")
    fig.colorbar(im, ax=axes[0], fraction=0.046)
    axes[1].imshow(np.asarray(block_mask), cmap="Greys")
    axes[1].set_title("true sets S_l (same-set mask)")
    for ax in axes:
        ax.set_xlabel("j")
        ax.set_ylabel("i")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _shade(ax, phases):
    for name, span in (phases or {}).items():
        if span is not None and span[1] is not None and span[1] > span[0]:
            ax.axvspan(span[0], span[1], color=PHASE_COLOURS[name], alpha=0.6, lw=0)
            ax.text((span[0] + span[1]) / 2, 1.0, name, transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=9)


def plot_dynamics(path, history, phases=None):
    """alpha and cos(v, w*); within/across means of A; loss and test error; phases shaded."""
    step = history["step"]
    fig, axes = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
    axes[0].plot(step, history["alpha"], label="alpha = <v, w*>")
    axes[0].plot(step, history["cos_v_wstar"], label="cos(v, w*)")
    axes[0].plot(step, history["v_perp_norm"], label="||v_perp||", ls=":")
    axes[1].plot(step, history["A_within"], label="within-set mean (gamma)")
    axes[1].plot(step, history["A_across"], label="across-set mean (rho)")
    axes[1].plot(step, history["patch_association_share"], label="rows with patch association", ls=":")
    axes[2].semilogy(step, history["loss"], label="training risk")
    axes[2].semilogy(step, np.maximum(history["test_error"], 1e-5), label="test error")
    axes[2].set_xlabel("GD step")
    for ax in axes:
        _shade(ax, phases)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_test_error(path, history, label_noise_rate=None):
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(history["step"], 100 * np.asarray(history["test_error"]), label="test error")
    if label_noise_rate is not None:
        ax.axhline(100 * label_noise_rate, color="k", ls="--", lw=1, label="label-noise rate")
    ax.set_xlabel("GD step")
    ax.set_ylabel("%")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_overlay(path, exact_history, runs, phases=None):
    """(E) approaches (P): GD on the exact population risk beside GD on (E) at each N (same start).

    `runs` maps N to the history of the (E) run. Left: the population risk along each trajectory (exact
    for (P); for (E), its estimate on the shared fixed test set); middle: gamma - rho (within-set minus
    across-set mean of A); right: alpha = <v, w*>. Phases of the (P) run shaded.
    """
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    colours = plt.cm.viridis(np.linspace(0.1, 0.85, max(len(runs), 1)))
    curves = [("population risk", lambda h, exact: h["loss"] if exact else h["test_loss"]),
              ("gamma - rho", lambda h, exact: np.asarray(h["A_within"]) - np.asarray(h["A_across"])),
              ("alpha = <v, w*>", lambda h, exact: h["alpha"])]
    for ax, (name, value) in zip(axes, curves):
        _shade(ax, phases)
        for colour, (N, h) in zip(colours, sorted(runs.items())):
            ax.plot(h["step"], value(h, False), color=colour, lw=1.2, label=f"(E), N = {N:,}")
        ax.plot(exact_history["step"], value(exact_history, True), color="k", lw=2.2, ls="--",
                label="(P), exact")
        ax.set_xlabel("GD step")
        ax.set_title(name, pad=14)  # room for the phase labels above the axes
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle("GD on the empirical risk (E) approaches GD on the exact population risk (P) as N grows",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
