"""Sweeps of image runs (JSL22 Figures 5-7): one config per (model, g, attention, seed) cell, trained in
its own sub-workdir, the spread of the cells' test accuracies, and the markdown tables that set them
beside the paper's numbers.

Each cell is an ordinary `posattn.vision.train.train_and_evaluate` run, so a sweep interrupted anywhere
resumes: a finished cell of the same config is read back from its `summary.json`, one with a checkpoint
continues from it.
"""

import copy
import json
import os

import numpy as np

from posattn import configs
from posattn.analysis import bootstrap
from posattn.errors import ConfigError
from posattn.vision import config as config_lib
from posattn.vision import resume, seeds, train


def finished_summary(config, workdir: str) -> dict | None:
    """The summary.json of `workdir` if it holds `config` (its config.json to the last field) trained to
    its total_steps, else None."""
    path, stored = os.path.join(workdir, "summary.json"), resume.read_record(workdir)
    if os.path.exists(path) and stored is not None:
        with open(path) as f:
            summary = json.load(f)
        if summary.get("steps") == config.total_steps and not resume.differing_fields(
            stored, resume.record(config)
        ):
            return summary
    return None


def run_cell(config, workdir: str, say=print, *, dataset=None) -> dict:
    """The summary of `config` trained in `workdir`: read back if finished, trained (or resumed) if not.

    A summary is read back only when the workdir's config.json is `config` to the last field and the run
    reached its total_steps; otherwise training runs, and refuses (ConfigError) a workdir that holds a run
    of another config. `dataset` (one of your own arrays, named by config.dataset) as in `train.train`.
    """
    summary = finished_summary(config, workdir)
    if summary is not None:
        return summary
    say(f"== {workdir}")
    return train.train_and_evaluate(config, workdir, dataset=dataset)


def run_seeds(configs, workdirs, say=print, *, vmap: bool = True, dataset=None) -> list[dict]:
    """`run_cell` of every (config, workdir), for configs that differ only in the seed: the finished ones
    read back, the others (two or more) trained in one vmapped program (`seeds.train_seeds`) where it can
    run them, else one after another; `say` tells which path ran, and why it fell back (checkpoints of
    different steps, programs that do not fit the devices' memory, or ran out of it before their end: the
    separate runs resume from the checkpoints the seeds share). vmap=False: one after another.
    ConfigError unless each config has its own workdir and they differ only in the seed."""
    seeds.check_seed_configs(configs, workdirs)
    summaries = [finished_summary(c, w) for c, w in zip(configs, workdirs)]
    todo = [i for i, s in enumerate(summaries) if s is None]
    if vmap and len(todo) > 1:
        say(
            f"== {len(todo)} seeds in one vmapped program: {', '.join(str(workdirs[i]) for i in todo)}"
        )
        try:
            for i, s in zip(
                todo,
                seeds.train_seeds(
                    [configs[i] for i in todo], [workdirs[i] for i in todo], dataset=dataset
                ),
            ):
                summaries[i] = s
            return summaries
        except (seeds.NotVmapped, train.OutOfMemory) as e:
            say(f"== separate runs instead: {e}")
    for i in todo:
        summaries[i] = run_cell(configs[i], workdirs[i], say, dataset=dataset)
    return summaries


def permuted_cell_config(
    dataset: str,
    config_file: str,
    model: str,
    g: int,
    seed: int,
    *,
    local: bool,
    data_dir: str | None = None,
    steps: int = 0,
    batch: int = 0,
    permutation: int = 0,
    validation_examples: int = 0,
):
    """The train_images config of one cell of the Figure 5 sweep (`experiments.permuted`).

    digits: tpu_configs/digits.py with no random crop and the block permutation set here, evaluated
    and checkpointed only at the end; otherwise the config file's `MODEL,G` argument. steps > 0 and
    batch > 0 replace the config's (the warm-up shrunk to at most a tenth of the steps). `permutation` is
    the permutation's seed (config.permute_seed), `validation_examples` the training images held out.
    """
    tail = ",quick" if local else ""
    if dataset == "digits":
        c = configs.load_config(config_file, model + tail, config_lib.SCHEMA)
        c.augment.crop_padding = 0
        c.permute_block = g
        c.eval_every, c.checkpoint_every = 0, 0
    else:
        c = configs.load_config(config_file, f"{model},{g}{tail}", config_lib.SCHEMA)
        if data_dir:
            c.data_dir = data_dir
    c.seed, c.permute_seed, c.validation_examples = seed, permutation, validation_examples
    if steps:
        c.total_steps = steps
        c.optimizer.warmup_steps = min(c.optimizer.warmup_steps, max(steps // 10, 1))
        c.log_every = min(c.log_every, steps)
    if batch:
        c.global_batch_size = batch
    return c


def attention_cell_configs(base, seeds: int, attentions=("vanilla", "positional")) -> dict:
    """{(attention, seed): config}: a ViT config with model.attention and seed set (Figures 6/7)."""
    config_lib.check_schema(base)
    if base.model.name != "vit":
        raise ConfigError(
            f"model.name={base.model.name!r}: compare_attention compares ViTs; use a ViT config"
        )
    out = {}
    for attention in attentions:
        for seed in range(seeds):
            c = copy.deepcopy(base)
            c.model.attention, c.seed = attention, seed
            out[(attention, seed)] = c
    return out


def spread(values) -> dict:
    """Mean, standard deviation (ddof 1 when there are 2+ values), median, quartiles, min, max; in %."""
    v = 100.0 * np.asarray(values, dtype=np.float64)
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return {
        "values": v.round(4).tolist(),
        "n": int(v.size),
        "mean": float(v.mean()),
        "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
        "median": float(med),
        "q1": float(q1),
        "q3": float(q3),
        "iqr": float(q3 - q1),
        "min": float(v.min()),
        "max": float(v.max()),
    }


def gap(values_a, values_b) -> dict:
    """b - a in points (values are fractions): the difference of the means over seeds, its standard error
    sqrt(s_a^2 / n_a + s_b^2 / n_b) (sample variances; 0 with one value each) and the difference of
    the medians; with 2+ values each, the 95% intervals of the difference of the means over the seeds
    (Welch's t, "welch_95", and the bootstrap, "bootstrap_95")."""
    a, b = (100.0 * np.asarray(v, dtype=np.float64) for v in (values_a, values_b))
    var = sum(v.var(ddof=1) / v.size for v in (a, b) if v.size > 1)
    out = {
        "mean": float(b.mean() - a.mean()),
        "stderr": float(np.sqrt(var)),
        "median": float(np.median(b) - np.median(a)),
    }
    if min(a.size, b.size) > 1:  # 95% intervals over the seeds (bootstrap.difference_of_means)
        diff = bootstrap.difference_of_means(a, b)
        out.update(welch_95=list(diff["welch"]), bootstrap_95=list(diff["bootstrap"]))
    return out


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
    return "\n".join(lines)


def compare_table(summary: dict) -> str:
    """Markdown: median (IQR) per attention kind, this run's dataset first, then the paper's rows; then
    the gap positional - vanilla of this run (`gap`), where the summary has one."""
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
            f"--seeds={ref['seeds']} --workdir=DIR --config.data_dir=$TFDS_DATA_DIR`"
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
    return "\n".join(lines)
