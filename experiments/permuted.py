r"""Permuted pixels, JSL22 Figure 5: ViT vs CNNs on images whose g x g pixel blocks are shuffled
by one fixed random permutation (the same for train and test, and for every seed).

  python -m experiments.permuted --dataset=digits --block_sizes=2,4,8 --models=vit,resnet,vgg \
      --seeds=3 --cnn_seeds=3 --vit_steps=500 --cnn_steps=80 --cnn_batch=32 \
      --workdir=/tmp/permuted-digits
  python -m experiments.permuted --dataset=fashion_mnist --block_sizes=7,14,28 --models=vit,resnet \
      --seeds=2 --workdir=/tmp/permuted-fashion
  python -m experiments.permuted --dataset=cifar100 --block_sizes=2,4,8,16,32 \
      --models=vit,resnet,vgg --seeds=3 --workdir=$WORKDIR --data_dir=$TFDS_DATA_DIR

digits: tpu_configs/digits.py (ViT XS/2, 16 patches of 2 x 2; g = 8 is the unpermuted image), with no
random crop (docs/decisions.md, Recipes: the committed digits runs were made without it). fashion_mnist:
tpu_configs/fashion_mnist.py's CPU settings (ViT XS with patch 7, so that g = 7 and 14 move whole
patches; ResNet-18 and VGG-16 at width 8; g = 28 unpermuted). cifar100: the paper's protocol,
tpu_configs/permuted_cifar100.py (ViT-Ti/4 body with patch 2, ResNet-18, VGG-16; g = 32 unpermuted).
Every (model, g, seed) is one train_images run in WORKDIR/MODEL-gG-seedS (resumable); WORKDIR gets
summary.json (`accuracy[model][g]`: mean, std, median, quartiles, values over seeds, in %),
summary.md beside the paper's numbers, and permuted.png (Figure 5 style; unpermuted baselines dashed).
"""
import os

import jax
from absl import flags, logging

from posattn import cli, ownership
from posattn.errors import ConfigError
from posattn.papers.jsl22 import published

DATASETS = {  # dataset -> (config file, image side, paper numbers of Figure 5 or None)
    "digits": ("tpu_configs/digits.py", 8, None),
    "fashion_mnist": ("tpu_configs/fashion_mnist.py", 28, None),
    "cifar100": ("tpu_configs/permuted_cifar100.py", 32, published.PERMUTED_ACCURACY["cifar100"]),
}
MODELS = {"vit": "vit", "resnet": "resnet18", "resnet18": "resnet18", "vgg": "vgg16", "vgg16": "vgg16"}

_DATASET = flags.DEFINE_enum("dataset", "digits", list(DATASETS), "Dataset.")
_BLOCKS = flags.DEFINE_string("block_sizes", "2,4,8", "Pixel-block sizes g (g = image side: unpermuted).")
_MODELS = flags.DEFINE_string("models", "vit,resnet,vgg", "Comma-separated: vit, resnet, vgg.")
_SEEDS = flags.DEFINE_integer("seeds", 3, "Seeds 0..N-1 per (model, g).")
_CNN_SEEDS = flags.DEFINE_integer("cnn_seeds", 0, "Seeds of the CNNs if fewer (0 = --seeds).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")
_INITIALIZE_DISTRIBUTED = cli.define_distributed_flags()  # one process per host of a cluster
_DATA_DIR = flags.DEFINE_string("data_dir", None, "tfds data directory (cifar100, fashion_mnist from tfds).")
_VIT_STEPS = flags.DEFINE_integer("vit_steps", 0, "Training steps of the ViT (0 = the config's).")
_CNN_STEPS = flags.DEFINE_integer("cnn_steps", 0, "Training steps of the CNNs (0 = the config's).")
_CNN_BATCH = flags.DEFINE_integer("cnn_batch", 0, "Batch size of the CNNs (0 = the config's).")
_LOCAL = flags.DEFINE_bool("local", False, "Smoke run: every cell shrunk by the configs' `local` token "
                           "(test/2 ViT, batch 16, a few steps).")


def main(argv):
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    from posattn import io
    from posattn.plots import vision as plots
    from posattn.vision import setup, sweep

    if not _WORKDIR.value:
        raise ConfigError("--workdir=DIR is required")
    dataset = _DATASET.value
    _, side, paper = DATASETS[dataset]
    blocks = cli.int_list(_BLOCKS.value, "block_sizes")
    if any(side % g for g in blocks):
        raise ConfigError(f"--block_sizes={_BLOCKS.value}: every g must divide the image side {side}")
    names = [m.strip() for m in _MODELS.value.split(",") if m.strip()]
    if not names or any(m not in MODELS for m in names):
        raise ConfigError(f"--models={_MODELS.value!r}: use a comma-separated list of vit, resnet, vgg")
    if _SEEDS.value < 1 or _CNN_SEEDS.value < 0:
        raise ConfigError(f"--seeds={_SEEDS.value} must be at least 1 and --cnn_seeds >= 0")
    if not flags.FLAGS["verbosity"].present:  # quiet library logs (orbax, tfds)
        logging.set_verbosity(logging.ERROR)
    _INITIALIZE_DISTRIBUTED()  # before any computation (docs/distributed.md)
    models = list(dict.fromkeys(MODELS[m] for m in names))
    seeds = {m: _SEEDS.value if m == "vit" else (_CNN_SEEDS.value or _SEEDS.value) for m in models}
    steps = {"vit": _VIT_STEPS.value, "cnn": _CNN_STEPS.value}
    configs = {(m, g, s): sweep.permuted_cell_config(
        dataset, DATASETS[dataset][0], m, g, s, local=_LOCAL.value, data_dir=_DATA_DIR.value,
        steps=steps["vit" if m == "vit" else "cnn"], batch=0 if m == "vit" else _CNN_BATCH.value)
        for m in models for g in blocks for s in range(seeds[m])}
    for c in configs.values():  # all validated up front
        setup.resolve(c, jax.device_count())  # every cell's batch divides by this run's devices

    # its own (its cells resume), writable and locked, before any training
    ownership.claim(_WORKDIR.value, "permuted", {name: flags.FLAGS[name].value for name in (
        "dataset", "block_sizes", "models", "seeds", "cnn_seeds", "data_dir", "vit_steps", "cnn_steps",
        "cnn_batch", "local")}, resumes=True)
    acc = {m: {} for m in models}
    for (m, g, s), c in configs.items():
        out = sweep.run_cell(c, os.path.join(_WORKDIR.value, f"{m}-g{g}-seed{s}"))
        acc[m].setdefault(g, []).append(out["test_accuracy"])
    summary = {
        "dataset": dataset, "image_side": side, "unpermuted_g": side, "seeds": seeds,
        "steps": {m: configs[(m, blocks[0], 0)].total_steps for m in models},
        "batch": {m: configs[(m, blocks[0], 0)].global_batch_size for m in models},
        "accuracy": {m: {str(g): sweep.spread(v) for g, v in per.items()} for m, per in acc.items()},
        "paper": {m: {str(g): v for g, v in per.items()} for m, per in (paper or {}).items()},
    }
    io.write_json(os.path.join(_WORKDIR.value, "summary.json"), summary)
    plots.permuted_figure(summary).savefig(os.path.join(_WORKDIR.value, "permuted.png"), dpi=120)
    table = sweep.permuted_table(summary)
    io.write_text(os.path.join(_WORKDIR.value, "summary.md"), table + "\n")
    print(table)


if __name__ == "__main__":
    cli.run(main)
