r"""Permuted pixels, JSL22 Figure 5: ViT vs CNNs on images whose g x g pixel blocks are shuffled
by one fixed random permutation (the same for train and test, and for every seed).

  python -m posattn.experiments.permuted --workdir=/tmp/permuted-digits --config.models=vit,resnet,vgg \
      --config.cnn_seeds=3 --config.vit_steps=500 --config.cnn_steps=80 --config.cnn_batch=32
  python -m posattn.experiments.permuted --config=tpu_configs/permuted.py:fashion_mnist \
      --config.models=vit,resnet --config.seeds=2 --workdir=/tmp/permuted-fashion
  python -m posattn.experiments.permuted --config=tpu_configs/permuted.py:cifar100 --workdir=$WORKDIR \
      --config.data_dir=$TFDS_DATA_DIR
  python -m posattn.experiments.permuted --config=tpu_configs/permuted.py:quick --workdir=/tmp/smoke

`--config=FILE[:ARG]` (default tpu_configs/permuted.py: the digits) with fields dataset, block_sizes,
models, seeds, cnn_seeds, permutations, validation_examples, data_dir, vit_steps, cnn_steps, cnn_batch
and quick, each overridable as
`--config.FIELD=VALUE`; `:quick` (or the older `--local`) shrinks every cell to a smoke run.

digits: tpu_configs/digits.py (ViT XS/2, 16 patches of 2 x 2; g = 8 is the unpermuted image), with no
random crop (docs/decisions.md, Recipes: the committed digits runs were made without it). fashion_mnist:
tpu_configs/fashion_mnist.py's CPU settings (ViT XS with patch 7, so that g = 7 and 14 move whole
patches; ResNet-18 and VGG-16 at width 8; g = 28 unpermuted). cifar100: the paper's protocol,
tpu_configs/permuted_cifar100.py (ViT-Ti/4 body with patch 2, ResNet-18, VGG-16; g = 32 unpermuted).
Every (model, g, seed, permutation) is one train_images run in WORKDIR/MODEL-gG-seedS (-permP for
permutations after the first; resumable); WORKDIR gets summary.json (`accuracy[model][g]`: mean, std,
median, quartiles, values over seeds and permutations, in %, of the test set, or of the validation
split where the cells read no test image),
summary.md beside the paper's numbers, and permuted.png (Figure 5 style; unpermuted baselines dashed).
"""

import os

import jax
import ml_collections
from absl import flags, logging

from posattn import cli
from posattn.errors import ConfigError
from posattn.papers.jsl22 import published

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
            "quick": False,  # every cell shrunk by its config file's `quick` token (test/2 ViT, batch 16, 4 steps)
        }
    )


SCHEMA = cli.Schema("a permuted config", _schema, lambda c: c.update(quick=True))
_CONFIG = cli.define_config("tpu_configs/permuted.py", SCHEMA, "The dataset and the sweep")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")
_INITIALIZE_DISTRIBUTED = cli.define_distributed_flags()  # one process per host of a cluster


def main(argv):
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    from posattn import io
    from posattn.plots import vision as plots
    from posattn.vision import setup, sweep

    if not _WORKDIR.value:
        raise ConfigError("--workdir=DIR is required")
    config = _CONFIG.value
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
    if not flags.FLAGS["verbosity"].present:  # quiet library logs (orbax, tfds)
        logging.set_verbosity(logging.ERROR)
    _INITIALIZE_DISTRIBUTED()  # before any computation (docs/distributed.md)
    models = list(dict.fromkeys(MODELS[m] for m in names))
    seeds = {m: config.seeds if m == "vit" else (config.cnn_seeds or config.seeds) for m in models}
    steps = {"vit": config.vit_steps, "cnn": config.cnn_steps}
    perms = lambda g: range(config.permutations if g < side else 1)  # noqa: E731 (unpermuted: one)
    configs = {
        (m, g, s, p): sweep.permuted_cell_config(
            dataset,
            DATASETS[dataset][0],
            m,
            g,
            s,
            local=config.quick,
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
    for c in configs.values():  # all validated up front
        setup.resolve(c, jax.device_count())  # every cell's batch divides by this run's devices

    # its own (its cells resume), writable and locked, before any training
    cli.claim(_WORKDIR.value, "permuted", config, resumes=True)
    split = "test" if configs[next(iter(configs))].evaluate_test else "validation"
    acc = {m: {} for m in models}
    for (m, g, s, p), c in configs.items():
        out = sweep.run_cell(
            c, os.path.join(_WORKDIR.value, f"{m}-g{g}-seed{s}" + (f"-perm{p}" if p else ""))
        )
        acc[m].setdefault(g, []).append(out[f"{split}_accuracy"])
    first = {m: configs[(m, blocks[0], 0, 0)] for m in models}
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
    io.write_json(os.path.join(_WORKDIR.value, "summary.json"), summary)
    plots.permuted_figure(summary).savefig(os.path.join(_WORKDIR.value, "permuted.png"), dpi=120)
    table = sweep.permuted_table(summary)
    io.write_text(os.path.join(_WORKDIR.value, "summary.md"), table + "\n")
    print(table)


def entry():
    """`python -m posattn.experiments.permuted` and the console script `posattn-permuted` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
