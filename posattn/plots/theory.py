"""Figures of JSL22's theory regime: the run's A and dynamics, (E) against (P), and the other claims
(Figure 2, transfer, the sample-size sweep).

Each function returns a `matplotlib.figure.Figure` built without pyplot (no backend is switched);
`posattn.plots.save_png` writes one.
"""

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

PHASE_COLOURS = {"I": "#fde0c5", "II": "#c6dbef", "III": "#c7e9c0"}


def _blank_diagonal(A) -> np.ndarray:
    A = np.array(A, dtype=float)
    np.fill_diagonal(
        A, np.nan
    )  # the diagonal is frozen: blanking it lets the colour scale show GD's part
    return A


def _show_A(fig, ax, A) -> None:
    """A with its diagonal blanked, on a colour scale set by the 2nd-98th percentiles of the rest (a
    few large entries would otherwise flatten the structure; the colour bar's arrows mark the clipping),
    on integer patch-index ticks."""
    A = _blank_diagonal(A)
    lo, hi = np.nanpercentile(A, [2, 98])
    extend = {
        (False, False): "neither",
        (True, False): "min",
        (False, True): "max",
        (True, True): "both",
    }[(bool(np.nanmin(A) < lo), bool(np.nanmax(A) > hi))]
    im = ax.imshow(A, cmap="viridis", vmin=lo, vmax=hi)
    fig.colorbar(im, ax=ax, fraction=0.046, extend=extend)
    _patch_ticks(ax)


def _patch_ticks(ax) -> None:
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("patch j")
    ax.set_ylabel("patch i")


def attention_figure(A, block_mask, title: str = "learned A") -> Figure:
    """The learned A (diagonal blanked: it is frozen) beside the true same-set mask (Definition 2.2)."""
    fig = Figure(figsize=(8.5, 3.8))
    axes = fig.subplots(1, 2)
    _show_A(fig, axes[0], A)
    axes[0].set_title(f"{title} (diagonal blanked)", fontsize=10)
    axes[1].imshow(np.asarray(block_mask), cmap="Greys")
    axes[1].set_title("true sets S_l (same-set mask)", fontsize=10)
    _patch_ticks(axes[1])
    fig.tight_layout()
    return fig


def _shade(ax, phases):
    for name, span in (phases or {}).items():
        if span is not None and span[1] is not None and span[1] > span[0]:
            ax.axvspan(span[0], span[1], color=PHASE_COLOURS[name], alpha=0.6, lw=0)
            ax.text(
                (span[0] + span[1]) / 2,
                1.0,
                name,
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=9,
            )


def dynamics_figure(history, phases=None) -> Figure:
    """The proof sketch's scalars over GD (Section 4): alpha and cos(v, w*); within/across means of A;
    loss and test error; phases I-III shaded."""
    step = history["step"]
    fig = Figure(figsize=(7, 8))
    axes = fig.subplots(3, 1, sharex=True)
    axes[0].plot(step, history["alpha"], label="alpha = <v, w*>")
    axes[0].plot(step, history["cos_v_wstar"], label="cos(v, w*)")
    axes[0].plot(step, history["v_perp_norm"], label="||v_perp||", ls=":")
    axes[1].plot(step, history["A_within"], label="within-set mean (gamma)")
    axes[1].plot(step, history["A_across"], label="across-set mean (rho)")
    axes[1].plot(
        step, history["patch_association_share"], label="rows with patch association", ls=":"
    )
    axes[2].semilogy(step, history["loss"], label="training risk")
    axes[2].semilogy(step, np.maximum(history["test_error"], 1e-5), label="test error")
    axes[2].set_xlabel("GD step")
    for ax in axes:
        _shade(ax, phases)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def error_figure(history, label_noise_rate=None, glm_error=None) -> Figure:
    """Test error over GD steps, with the label-noise rate as its floor and the best GLM's error, the
    level of phase I (Theorem 3.1)."""
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    ax.plot(history["step"], 100 * np.asarray(history["test_error"]), label="test error")
    if label_noise_rate is not None:
        ax.axhline(100 * label_noise_rate, color="k", ls="--", lw=1, label="label-noise rate")
    if glm_error is not None:
        ax.axhline(100 * glm_error, color="tab:red", ls=":", lw=1, label="best GLM (phase I level)")
    ax.set_xlabel("GD step")
    ax.set_ylabel("%")
    ax.legend()
    fig.tight_layout()
    return fig


def overlay_figure(exact_history, runs, phases=None) -> Figure:
    """(E) approaches (P) (Theorems 4.1-4.2): GD on the exact population risk beside GD on (E) at each N
    from the same start.

    `runs` maps N to the history of the (E) run. Left: the population risk along each trajectory (exact
    for (P); for (E), its estimate on the shared fixed test set); middle: gamma - rho (within-set minus
    across-set mean of A); right: alpha = <v, w*>. Phases of the (P) run shaded.
    """
    fig = Figure(figsize=(14, 4))
    axes = fig.subplots(1, 3)
    colours = matplotlib.colormaps["viridis"](np.linspace(0.1, 0.85, max(len(runs), 1)))
    curves = [
        ("population risk", lambda h, exact: h["loss"] if exact else h["test_loss"]),
        ("gamma - rho", lambda h, exact: np.asarray(h["A_within"]) - np.asarray(h["A_across"])),
        ("alpha = <v, w*>", lambda h, exact: h["alpha"]),
    ]
    for ax, (name, value) in zip(axes, curves):
        _shade(ax, phases)
        for colour, (N, h) in zip(colours, sorted(runs.items())):
            ax.plot(h["step"], value(h, False), color=colour, lw=1.2, label=f"(E), N = {N:,}")
        ax.plot(
            exact_history["step"],
            value(exact_history, True),
            color="k",
            lw=2.2,
            ls="--",
            label="(P), exact",
        )
        ax.set_xlabel("GD step")
        ax.set_title(name, pad=14)  # room for the phase labels above the axes
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        "GD on the empirical risk (E) approaches GD on the exact population risk (P) as N grows",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def figure2_figure(history, A, block_mask, overlap: float, chance: float) -> Figure:
    """JSL22 Figure 2: test error over GD steps (left), the learned A (middle) beside the 2x2 blocks."""
    fig = Figure(figsize=(14, 4.2))
    axes = fig.subplots(1, 3)
    axes[0].plot(history["step"], 100 * np.asarray(history["test_error"]))
    axes[0].set_xlabel("GD step")
    axes[0].set_ylabel("test error (%)")
    axes[0].set_title("Gaussian patches, cubic-CNN labels", fontsize=10)
    _show_A(fig, axes[1], A)
    # Two short lines: one long title ran into its neighbours.
    axes[1].set_title(
        f"learned A (diagonal blanked)\noff-diagonal top-(C-1) in block: {overlap:.2f} "
        f"(chance {chance:.2f})",
        fontsize=10,
    )
    axes[2].imshow(np.asarray(block_mask), cmap="Greys")
    axes[2].set_title("2x2 blocks of the labeller", fontsize=10)
    _patch_ticks(axes[2])
    fig.tight_layout(rect=(0, 0, 1, 0.96))  # room for the two-line title
    return fig


def _band(ax, sizes, summary, label, colour):
    mean = 100 * np.asarray(summary["test_error_mean"])
    lo, hi = (
        100 * np.asarray(summary["test_error_q25"]),
        100 * np.asarray(summary["test_error_q75"]),
    )
    ax.plot(sizes, mean, "o-", color=colour, label=label)
    ax.fill_between(sizes, lo, hi, color=colour, alpha=0.25, lw=0)


def transfer_figure(result: dict) -> Figure:
    """Theorem 5.1: test error against the downstream sample size N' (mean, band = quartiles over seeds)."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    sizes = result["frozen_A"]["sizes"]
    _band(ax, sizes, result["frozen_A"], "A frozen from pre-training, v re-trained", "C0")
    _band(ax, sizes, result["scratch"], "(A, v) from scratch", "C3")
    ax.axhline(
        100 * result["target"], color="k", ls="--", lw=1, label=f"{100 * result['target']:.0f}%"
    )
    ax.set_xscale("log")
    ax.set_xlabel("downstream samples N'")
    ax.set_ylabel("test error (%)")
    ax.set_title(f"transfer to w' orthogonal to w* ({result['frozen_A']['seeds']} seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def sweep_figure(summary: dict) -> Figure:
    """Theorem 4.2's sample complexity: success rate of patch association (left) and test error
    (right) against N, over seeds."""
    sizes = summary["sizes"]
    fig = Figure(figsize=(10, 3.8))
    axes = fig.subplots(1, 2)
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
    return fig


def phase_three_figure(runs: dict) -> Figure:
    """Phase III's alpha on the exact population dynamics for several q (left), and where its drift
    comes from (right): the misclassified patterns against the others (`alpha_drift_split`)."""
    fig = Figure(figsize=(11, 4))
    left, right = fig.subplots(1, 2)
    for q, run in runs.items():
        left.plot(run["step"], run["alpha"], label=f"q = {q}")
    left.set_xlabel("GD step on (P)")
    left.set_ylabel("alpha = <v, w*>")
    left.legend()
    labels = [f"q={q}\nstep {s}" for q, run in runs.items() for s in run["split_steps"]]
    splits = [sp for run in runs.values() for sp in run["splits"]]
    x = np.arange(len(splits))
    right.bar(
        x - 0.2, [sp["classified"] for sp in splits], 0.4, label="correctly classified (y F > 0)"
    )
    right.bar(
        x + 0.2, [sp["misclassified"] for sp in splits], 0.4, label="misclassified (y F <= 0)"
    )
    right.plot(
        x, [sp["total"] for sp in splits], "k_", ms=18, mew=2, ls="", label="total -dR/dalpha"
    )
    right.axhline(0, color="k", lw=0.5)
    right.set_xticks(x)
    right.set_xticklabels(labels, fontsize=7)
    right.set_ylabel("drift of alpha (-dR/dalpha)")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig
