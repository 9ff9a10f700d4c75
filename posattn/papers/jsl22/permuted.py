"""Permuted pixels, JSL22 Figure 5 (`experiments/permuted.py`): ViT against CNNs on images whose g x g
pixel blocks are shuffled by one fixed random permutation; the config of each (model, g, seed,
permutation) cell, and the driver that trains every cell and writes the summary beside the paper's numbers.
"""

import os

import jax
import ml_collections

from posattn import configs, io
from posattn.analysis import bootstrap
from posattn.errors import ConfigError
from posattn.papers.jsl22 import image_tables, published
from posattn.plots import save_png
from posattn.plots import vision as plots
from posattn.vision import config as config_lib
from posattn.vision import setup, sharding, sweep

DATASETS = {  # dataset -> (config file, image side, paper numbers of Figure 5 or None)
    "digits": ("tpu_configs/digits.py", 8, None),
    "fashion_mnist": ("tpu_configs/fashion_mnist.py", 28, None),
    "cifar100": ("tpu_configs/permuted_cifar100.py", 32, published.PERMUTED_ACCURACY["cifar100"]),
}
MODELS = {
    "vit": "vit",
    "resnet": "resnet18",
    "resnet18": "resnet18",
    "vgg": "vgg16",
    "vgg16": "vgg16",
}


def _schema(fields) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "dataset": "digits",  # digits, fashion_mnist or cifar100 (DATASETS)
            "block_sizes": (2, 4, 8),  # pixel-block sizes g (g = the image side: unpermuted)
            "models": "vit,resnet,vgg",  # comma-separated: vit, resnet, vgg
            "seeds": 3,  # seeds 0..N-1 per (model, g)
            "cnn_seeds": 0,  # seeds of the CNNs if fewer (0 = seeds)
            "data_dir": ml_collections.config_dict.placeholder(
                str
            ),  # tfds data directory (cifar100, fashion_mnist)
            "vit_steps": 0,
            "cnn_steps": 0,  # training steps of the ViT and of the CNNs (0 = the cell config's)
            "cnn_batch": 0,  # batch size of the CNNs (0 = the cell config's)
            "permutations": 1,  # fixed random permutations per (model, g): permute seeds 0..N-1
            # each seed its own permutation (permute seed = training seed) instead, so that the spread
            # over seeds holds the spread over permutations at no extra run
            "permutation_per_seed": False,
            "validation_examples": 0,  # training images every cell holds out (posattn.vision.config)
            # what `:quick` sets: every cell shrunk by its config file's `quick` token (test/2 ViT, batch 16, 4
            # steps); a field because the cells' config files, not this schema, hold their smoke runs
            "quick": False,
        }
    )


SCHEMA = configs.Schema("a permuted config", _schema, lambda c: c.update(quick=True))


def permuted_cell_config(
    dataset: str,
    config_file: str,
    model: str,
    g: int,
    seed: int,
    *,
    quick: bool,
    data_dir: str | None = None,
    steps: int = 0,
    batch: int = 0,
    permutation: int = 0,
    validation_examples: int = 0,
):
    """The train_images config of one cell of the Figure 5 sweep (`experiments.permuted`); `quick`: each cell's
    config file's smoke run (`FILE:MODEL,quick`).

    digits: tpu_configs/digits.py with no random crop and the block permutation set here, evaluated
    and checkpointed only at the end; otherwise the config file's `MODEL,G` argument. steps > 0 and
    batch > 0 replace the config's (the warm-up shrunk to at most a tenth of the steps). `permutation` is
    the permutation's seed (config.permute_seed), `validation_examples` the training images held out.
    """
    tail = ",quick" if quick else ""
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


def drop_contrasts(accuracy: dict, side: int) -> dict:
    """Figure 5's claim at each permuted g, per CNN: its drop (unpermuted - permuted accuracy, mean over
    seeds) minus the ViT's, with 95% Welch and bootstrap intervals over the four groups of runs
    (`bootstrap.contrast`) and the verdict of docs/image_results.md (Fig. 5, fixed before the runs):
    "reproduced" where both intervals lie above 0 (the CNN loses more), "not reproduced" where both lie
    below, else "not decidable". {cnn: {g: {..., "verdict"}}} for every g < side with at least 2 runs in
    each of the four groups; `accuracy` is the summary's (values in %)."""
    vit, base = accuracy.get("vit", {}), str(side)
    out = {}
    for m, per in accuracy.items():
        if m == "vit" or base not in per or base not in vit:
            continue
        for g in sorted(set(per) & set(vit) - {base}, key=int):
            groups = [per[base], per[g], vit[base], vit[g]]
            if min(grp["n"] for grp in groups) < 2:
                continue
            c = bootstrap.contrast([grp["values"] for grp in groups], [1, -1, -1, 1])
            sign = bootstrap.agreed_sign(c["welch"], c["bootstrap"])
            c["verdict"] = {1: "reproduced", -1: "not reproduced", 0: "not decidable"}[sign]
            out.setdefault(m, {})[g] = c
    return out


def cells(config) -> dict:
    """Check `config` (SCHEMA) and return the train_images config of every cell, {(model, g, seed,
    permutation): config}, in the order they train: each model's block sizes, seeds and permutations."""
    dataset = config.dataset
    if dataset not in DATASETS:
        raise ConfigError(f"dataset={dataset!r}: use one of {', '.join(DATASETS)}")
    side = DATASETS[dataset][1]
    blocks = list(config.block_sizes)
    if not blocks or not all(isinstance(g, int) and g > 0 for g in blocks):
        raise ConfigError(
            f"block_sizes={config.block_sizes}: give positive integers, e.g. --config.block_sizes=2,4,8"
        )
    if any(side % g for g in blocks):
        raise ConfigError(
            f"block_sizes={config.block_sizes}: every g must divide the image side {side}"
        )
    names = [m.strip() for m in config.models.split(",") if m.strip()]
    if not names or any(m not in MODELS for m in names):
        raise ConfigError(
            f"models={config.models!r}: use a comma-separated list of vit, resnet, vgg"
        )
    if config.seeds < 1 or config.cnn_seeds < 0 or config.permutations < 1:
        raise ConfigError(
            f"seeds={config.seeds} and permutations={config.permutations} must be at least 1 "
            f"and cnn_seeds={config.cnn_seeds} >= 0"
        )
    models = list(dict.fromkeys(MODELS[m] for m in names))
    seeds = {m: config.seeds if m == "vit" else (config.cnn_seeds or config.seeds) for m in models}
    steps = {"vit": config.vit_steps, "cnn": config.cnn_steps}
    if config.permutation_per_seed and config.permutations != 1:
        raise ConfigError(
            f"permutation_per_seed with permutations={config.permutations}: each seed has its own "
            "permutation; leave permutations at 1"
        )

    def perms(g, s):
        if g == side:  # unpermuted: one cell a seed
            return [0]
        return [s] if config.permutation_per_seed else range(config.permutations)

    out = {
        (m, g, s, p): permuted_cell_config(
            dataset,
            DATASETS[dataset][0],
            m,
            g,
            s,
            quick=config.quick,
            data_dir=config.data_dir,
            steps=steps["vit" if m == "vit" else "cnn"],
            batch=0 if m == "vit" else config.cnn_batch,
            permutation=p,
            validation_examples=config.validation_examples,
        )
        for m in models
        for g in blocks
        for s in range(seeds[m])
        for p in perms(g, s)
    }
    for c in out.values():  # all validated up front
        setup.resolve(
            c, sharding.batch_shards_of(c.mesh, jax.device_count())
        )  # every cell's batch divides by this run's devices
    return out


def run(config, workdir: str, claim) -> None:
    """Check `config` (SCHEMA) and every cell's config (`cells`), `claim(workdir, "permuted", config)`
    (the binary's `cli.claim`), train every cell (each resumed if present) and write summary.json,
    summary.md and permuted.png into `workdir`."""
    by_cell = cells(config)
    _, side, paper = DATASETS[config.dataset]
    models = list(dict.fromkeys(m for m, *_ in by_cell))
    blocks = list(config.block_sizes)
    seeds = {m: 1 + max(s for mm, _, s, _ in by_cell if mm == m) for m in models}
    # its own (its cells resume), writable and locked, before any training. The sweep may grow or shrink
    # on a resume (every cell is a run of its own, resumed from its directory); a workdir of an older
    # version resumes with the fields added since at their defaults.
    claim(
        workdir,
        "permuted",
        config,
        resumes=True,
        may_change=("models", "block_sizes", "seeds", "cnn_seeds"),
        complete=SCHEMA.complete,
    )
    split = "test" if next(iter(by_cell.values())).evaluate_test else "validation"
    acc = {m: {} for m in models}
    for (m, g, s, p), c in by_cell.items():
        out = sweep.run_cell(
            c, os.path.join(workdir, f"{m}-g{g}-seed{s}" + (f"-perm{p}" if p else ""))
        )
        acc[m].setdefault(g, []).append(out[f"{split}_accuracy"])
    first = {m: by_cell[(m, blocks[0], 0, 0)] for m in models}
    summary = {
        "dataset": config.dataset,
        "image_side": side,
        "unpermuted_g": side,
        "seeds": seeds,
        "permutations": "one per seed" if config.permutation_per_seed else config.permutations,
        "split": split,
        "steps": {m: c.total_steps for m, c in first.items()},
        "batch": {m: c.global_batch_size for m, c in first.items()},
        "patch_size": {
            m: setup.resolve(c).model.patch_size for m, c in first.items() if m == "vit"
        },
        "accuracy": {
            m: {str(g): sweep.spread(v) for g, v in per.items()} for m, per in acc.items()
        },
        "paper": {m: {str(g): v for g, v in per.items()} for m, per in (paper or {}).items()},
    }
    summary["drop_contrast"] = drop_contrasts(summary["accuracy"], side)
    io.write_json(os.path.join(workdir, "summary.json"), summary)
    save_png(plots.permuted_figure(summary), os.path.join(workdir, "permuted.png"))
    table = image_tables.permuted_table(summary)
    io.write_text(os.path.join(workdir, "summary.md"), table + "\n")
    print(table)
