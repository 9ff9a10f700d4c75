"""The markdown tables of JSL22's image sweeps beside the paper's numbers: Figure 5 (permuted pixels,
`permuted`) and Figures 6-7 (vanilla against positional attention, `attention_comparison`)."""

# Names of the models in the tables.
LABELS = {"vit": "ViT (positional attention)", "resnet18": "ResNet-18", "vgg16": "VGG-16"}


def permuted_table(summary: dict) -> str:
    """Markdown: mean +- std (%) over seeds (and permutations) per model and g (the value alone for one
    run), with the paper's number where it has one; a ViT cell whose blocks are whole tokens is marked
    (*): there the permuted problem is the unpermuted one with P's rows relabelled, the same problem in
    distribution, so its difference from the unpermuted cell is seed noise by construction."""
    gs = sorted({g for per in summary["accuracy"].values() for g in per}, key=int)
    paper = summary.get("paper") or {}
    lines = [
        f"| model ({summary.get('split', 'test')} accuracy, %) | "
        + " | ".join(f"g={g}" for g in gs)
        + " |",
        "|---" * (len(gs) + 1) + "|",
    ]
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
            patch = summary.get("patch_size", {}).get(model)
            whole = (
                bool(patch) and g in per and int(g) < summary["image_side"] and int(g) % patch == 0
            )
            cells.append(
                cell + (" (*)" if whole else "") + (f" (paper {ref})" if ref is not None else "")
            )
        lines.append(f"| {LABELS.get(model, model)} | " + " | ".join(cells) + " |")
    if any("(*)" in line for line in lines):
        lines += [
            "",
            "(*) blocks of whole tokens: with P drawn per position, the permuted problem is the "
            "unpermuted one with P's rows relabelled (the same in distribution): no test of the ViT.",
        ]
    drops = [
        (m, g, c) for m, per in summary.get("drop_contrast", {}).items() for g, c in per.items()
    ]
    if drops:
        lines += [
            "",
            "| CNN drop - ViT drop (points; drop = unpermuted - permuted) | g | value | Welch 95% "
            "| bootstrap 95% | verdict |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {LABELS.get(m, m)} | {g} | {c['value']:+.2f} | [{c['welch'][0]:+.2f}, "
            f"{c['welch'][1]:+.2f}] | [{c['bootstrap'][0]:+.2f}, {c['bootstrap'][1]:+.2f}] | "
            f"{c['verdict']} |"
            for m, g, c in drops
        ]
    return "\n".join(lines)


def compare_table(summary: dict) -> str:
    """Markdown: median (IQR) per attention kind, this run's dataset first, then the paper's rows; then
    the gap positional - vanilla of this run (`gap`), where the summary has one, with Figure 7's verdict
    (`attention_comparison.comparable_verdict`) where it has intervals."""
    acc, own = summary["accuracy"], summary["paper"].get(summary["dataset"], {})
    cell = lambda k: f"{acc[k]['median']:.2f} (IQR {acc[k]['iqr']:.2f})"  # noqa: E731
    lines = [
        f"| dataset ({summary.get('split', 'test')} accuracy, %) | vanilla: median (IQR) | positional: median (IQR) "
        "| paper vanilla | paper positional |",
        "|---|---|---|---|---|",
        f"| {summary['dataset']} (ViT {summary['variant']}, {summary['steps']} steps, "
        f"{summary['seeds']} seeds) | {cell('vanilla')} | {cell('positional')} | "
        f"{own.get('vanilla', '-')} | {own.get('positional', '-')} |",
    ]
    for name, ref in summary["paper"].items():
        if name == summary["dataset"]:
            continue
        command = (
            f"`python -m posattn.experiments.compare_attention --config={ref['config']} "
            f"--config.seeds={ref['seeds']} --workdir=DIR --config.data_dir=$TFDS_DATA_DIR`"
        )
        lines.append(
            f"| {name} | needs data: {command} | needs data | {ref['vanilla']} | "
            f"{ref['positional']} |"
        )
    if "gap" in summary:
        g = summary["gap"]
        lines += [
            "",
            f"positional - vanilla ({summary['dataset']}): {g['mean']:+.2f} ± {g['stderr']:.2f} points "
            f"(difference of the means ± its standard error over the seeds; of the medians "
            f"{g['median']:+.2f})",
        ]
        if "welch_95" in g:
            lines[-1] += (
                f"; 95% intervals over the seeds: Welch [{g['welch_95'][0]:+.2f}, {g['welch_95'][1]:+.2f}], "
                f"bootstrap [{g['bootstrap_95'][0]:+.2f}, {g['bootstrap_95'][1]:+.2f}]"
            )
        if summary.get("verdict"):
            lines[-1] += f". Figure 7's claim (comparable): **{summary['verdict']}**"
    return "\n".join(lines)
