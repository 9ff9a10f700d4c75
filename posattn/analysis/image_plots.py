"""Figures and tables of the image experiments: JSL22 Figure 5 (permuted pixels), Figures 1a/5c
(positional-embedding similarity maps) and Figures 6/7 (vanilla vs positional attention over seeds)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

COLOURS = {"vit": "tab:blue", "resnet18": "tab:red", "vgg16": "tab:green"}
LABELS = {"vit": "ViT (positional attention)", "resnet18": "ResNet-18", "vgg16": "VGG-16"}


def plot_permuted(path: str, summary: dict) -> None:
    """Figure 5: test accuracy against g, mean +- std over seeds; the unpermuted value dashed."""
    fig, ax = plt.subplots(figsize=(6, 4))
    base = str(summary["unpermuted_g"])
    for model, per in summary["accuracy"].items():
        gs = sorted(per, key=int)
        means = [per[g]["mean"] for g in gs]
        stds = [per[g]["std"] for g in gs]
        colour = COLOURS.get(model)
        ax.errorbar([int(g) for g in gs], means, yerr=stds, marker="o", capsize=3, color=colour,
                    label=LABELS.get(model, model))
        if base in per:
            ax.axhline(per[base]["mean"], ls="--", color=colour, lw=1)
    ax.set_xscale("log", base=2)
    ticks = sorted({int(g) for per in summary["accuracy"].values() for g in per})
    ax.set_xticks(ticks, [str(g) for g in ticks])
    ax.set_xlabel(f"pixel-block size g (g = {base}: unpermuted, dashed)")
    ax.set_ylabel("test accuracy (%)")
    seeds = ", ".join(f"{LABELS.get(m, m).split(' ')[0]} {n}" for m, n in summary["seeds"].items())
    ax.set_title(f"permuted {summary['dataset']} (JSL22 Fig. 5); seeds: {seeds}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def permuted_table(summary: dict) -> str:
    """Markdown: mean +- std (%) over seeds per model and g (the value alone for one seed), with the
    paper's number where it has one."""
    gs = sorted({g for per in summary["accuracy"].values() for g in per}, key=int)
    paper = summary.get("paper") or {}
    lines = ["| model | " + " | ".join(f"g={g}" for g in gs) + " |", "|---" * (len(gs) + 1) + "|"]
    for model, per in summary["accuracy"].items():
        cells = []
        for g in gs:
            if g not in per:
                cell = "-"
            elif per[g]["n"] == 1:  # one seed: no spread to show
                cell = f"{per[g]['mean']:.2f}"
            else:
                cell = f"{per[g]['mean']:.2f} ± {per[g]['std']:.2f}"
            ref = paper.get(model, {}).get(g)
            cells.append(cell + (f" (paper {ref})" if ref is not None else ""))
        lines.append(f"| {LABELS.get(model, model)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_compare(path: str, summary: dict) -> None:
    """Figure 7: box plots of the test accuracy over seeds, vanilla beside positional attention."""
    kinds = list(summary["accuracy"])
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.boxplot([summary["accuracy"][k]["values"] for k in kinds], tick_labels=kinds, widths=0.5)
    for i, k in enumerate(kinds, start=1):
        v = summary["accuracy"][k]["values"]
        ax.scatter(np.full(len(v), i) + np.linspace(-0.08, 0.08, len(v)), v, s=10, alpha=0.6)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{summary['dataset']}, ViT {summary['variant']}, {summary['seeds']} seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare_table(summary: dict) -> str:
    """Markdown: median (IQR) per attention kind, this run's dataset first, then the paper's rows."""
    acc, own = summary["accuracy"], summary["paper"].get(summary["dataset"], {})
    cell = lambda k: f"{acc[k]['median']:.2f} (IQR {acc[k]['iqr']:.2f})"  # noqa: E731
    lines = [
        "| dataset | vanilla: median (IQR) | positional: median (IQR) | paper vanilla | paper positional |",
        "|---|---|---|---|---|",
        f"| {summary['dataset']} (ViT {summary['variant']}, {summary['steps']} steps, "
        f"{summary['seeds']} seeds) | {cell('vanilla')} | {cell('positional')} | "
        f"{own.get('vanilla', '-')} | {own.get('positional', '-')} |",
    ]
    for name, ref in summary["paper"].items():
        if name == summary["dataset"]:
            continue
        command = (f"`python -m experiments.compare_attention --config={ref['config']} "
                   f"--seeds={ref['seeds']} --workdir=DIR --config.data_dir=$TFDS_DATA_DIR`")
        lines.append(f"| {name} | needs data: {command} | needs data | {ref['vanilla']} | "
                     f"{ref['positional']} |")
    return "\n".join(lines)


def plot_similarity_maps(path: str, panels: dict, patches, grid_hw, threshold: float) -> None:
    """Figures 1a / 5c: one row per panel (e.g. "as trained", "un-permuted"), one thresholded similarity
    map per chosen patch (the patch itself outlined in red)."""
    h, w = grid_hw
    fig, axes = plt.subplots(len(panels), len(patches), squeeze=False,
                             figsize=(1.3 * len(patches) + 1, 1.5 * len(panels) + 0.6))
    image = None
    for r, (title, maps) in enumerate(panels.items()):
        for c, i in enumerate(patches):
            ax = axes[r, c]
            image = ax.imshow(maps[i], vmin=threshold, vmax=1.0, cmap="viridis")
            ax.add_patch(plt.Rectangle((i % w - 0.5, i // w - 0.5), 1, 1, fill=False, ec="red", lw=1.5))
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_facecolor("#eeeeee")
            if r == 0:
                ax.set_title(f"patch {i}", fontsize=8)
            if c == 0:
                ax.set_ylabel(title, fontsize=8)
    fig.suptitle(f"cosine similarity of positional embeddings (>= {threshold}, {h}x{w} grid)", fontsize=9)
    fig.colorbar(image, ax=axes, fraction=0.02)
    fig.savefig(path, dpi=120)
    plt.close(fig)
