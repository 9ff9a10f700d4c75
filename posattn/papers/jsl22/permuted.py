"""Permuted pixels, JSL22 Figure 5 (`experiments/permuted.py`): ViT against CNNs on images whose g x g
pixel blocks are shuffled by one fixed random permutation; the config of each (model, g, seed,
permutation) cell, and the driver that trains every cell and writes the summary beside the paper's numbers.
"""

import os

import jax
import ml_collections

from posattn import configs, io
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


def run(config, workdir: str, claim) -> None:
    """Check `config` (SCHEMA) and every cell's config, `claim(workdir, "permuted", config)` (the
    binary's `cli.claim`), train every cell (each resumed if present) and write summary.json, summary.md
    and permuted.png into `workdir`."""
    dataset = config.dataset
    if dataset not in DATASETS:
        raise ConfigError(f"dataset={dataset!r}: use one of {', '.join(DATASETS)}")
    _, side, paper = DATASETS[dataset]
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
    perms = lambda g: range(config.permutations if g < side else 1)  # noqa: E731 (unpermuted: one)
    cells = {
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
        for p in perms(g)
    }
    for c in cells.values():  # all validated up front
        setup.resolve(
            c, sharding.batch_shards_of(c.mesh, jax.device_count())
        )  # every cell's batch divides by this run's devices

    # its own (its cells resume), writable and locked, before any training
    claim(workdir, "permuted", config, resumes=True)
    split = "test" if cells[next(iter(cells))].evaluate_test else "validation"
    acc = {m: {} for m in models}
    for (m, g, s, p), c in cells.items():
        out = sweep.run_cell(
            c, os.path.join(workdir, f"{m}-g{g}-seed{s}" + (f"-perm{p}" if p else ""))
        )
        acc[m].setdefault(g, []).append(out[f"{split}_accuracy"])
    first = {m: cells[(m, blocks[0], 0, 0)] for m in models}
    summary = {
        "dataset": dataset,
        "image_side": side,
        "unpermuted_g": side,
        "seeds": seeds,
        "permutations": config.permutations,
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
    io.write_json(os.path.join(workdir, "summary.json"), summary)
    save_png(plots.permuted_figure(summary), os.path.join(workdir, "permuted.png"))
    table = image_tables.permuted_table(summary)
    io.write_text(os.path.join(workdir, "summary.md"), table + "\n")
    print(table)
