r"""Vanilla vs positional attention over seeds, JSL22 Figures 6 and 7.

  python -m posattn.experiments.compare_attention --config=tpu_configs/digits.py --seeds=10 \
      --workdir=/tmp/compare-digits --config.total_steps=500 --config.optimizer.warmup_steps=50 \
      --config.eval_every=0 --config.checkpoint_every=0
  python -m posattn.experiments.compare_attention --config=tpu_configs/fashion_mnist.py --seeds=3 \
      --workdir=/tmp/compare-fashion                                   # offline, ~1 CPU-hour
  python -m posattn.experiments.compare_attention --config=tpu_configs/cifar10.py --seeds=10 \
      --workdir=$WORKDIR/cifar10 --config.data_dir=$TFDS_DATA_DIR     # also cifar100.py, svhn.py
  python -m posattn.experiments.compare_attention --config=tpu_configs/imagenet.py --seeds=1 \
      --workdir=$WORKDIR/imagenet --config.data_dir=$TFDS_DATA_DIR

Each (attention, seed) is one train_images run of the ViT config with `model.attention` and `seed` set,
in WORKDIR/ATTENTION-seedS (resumable); the seeds of an attention kind train in one vmapped program
(`posattn.vision.seeds`, the same numbers to float tolerance) where its programs fit the devices' memory,
else one after another, and the log says which ran. WORKDIR gets summary.json (test accuracy per
attention, or the validation accuracy of a config that reads no test image: median, quartiles, IQR, mean,
values, in %), compare.png (box plots, Figure 7 style) and
summary.md, the table of medians and IQRs beside the paper's numbers, and the gap positional - vanilla
(difference of the means, its standard error, difference of the medians; summary.json "gap", in points).
"""

import os

import jax
from absl import flags, logging

from posattn import cli
from posattn.errors import ConfigError
from posattn.papers.jsl22 import published
from posattn.vision import config as config_lib

ATTENTIONS = ("vanilla", "positional")
# The paper's numbers (Figures 6 and 7), each beside the config file that runs its dataset here.
CONFIG_FILES = {
    "cifar10": "tpu_configs/cifar10.py",
    "cifar100": "tpu_configs/cifar100.py",
    "svhn_cropped": "tpu_configs/svhn.py",
    "imagenet2012": "tpu_configs/imagenet.py",
}
PAPER = {
    name: {**ref, "config": CONFIG_FILES[name]}
    for name, ref in published.ATTENTION_ACCURACY.items()
}

_CONFIG = cli.define_config(
    "tpu_configs/digits.py", config_lib.SCHEMA, "A ViT config file (tpu_configs/)"
)
_SEEDS = flags.DEFINE_integer("seeds", 10, "Seeds 0..N-1 per attention kind.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")
_VMAP_SEEDS = flags.DEFINE_bool(
    "vmap_seeds",
    True,
    "Train the seeds of an attention kind in one vmapped "
    "program where they fit in memory (else, or with --novmap_seeds, one after "
    "another).",
)
_INITIALIZE_DISTRIBUTED = cli.define_distributed_flags()  # one process per host of a cluster


def main(argv):
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    if not _WORKDIR.value:
        raise ConfigError("--workdir=DIR is required")
    if _SEEDS.value < 1:
        raise ConfigError(f"--seeds={_SEEDS.value} must be at least 1")
    if not flags.FLAGS["verbosity"].present:  # quiet library logs (orbax, tfds)
        logging.set_verbosity(logging.ERROR)
    from posattn import io
    from posattn.plots import vision as plots
    from posattn.vision import setup, sweep

    _INITIALIZE_DISTRIBUTED()  # before any computation (docs/distributed.md)

    configs = sweep.attention_cell_configs(_CONFIG.value, _SEEDS.value, ATTENTIONS)
    # every cell's batch divides by this run's devices; the cells differ only in attention and seed, so
    # they evaluate the same splits (the test set's, unless the config reads no test image)
    splits = [setup.resolve(c, jax.device_count()) for c in configs.values()][-1].eval_splits
    # its own (its cells resume), writable and locked, before any training
    cli.claim(
        _WORKDIR.value,
        "compare_attention",
        {"config": _CONFIG.value, "seeds": _SEEDS.value},
        resumes=True,
    )
    base = _CONFIG.value
    runs = {}
    for (
        attention
    ) in ATTENTIONS:  # its seeds in one vmapped program where they fit (sweep.run_seeds)
        cells = [
            (c, os.path.join(_WORKDIR.value, f"{a}-seed{seed}"))
            for (a, seed), c in configs.items()
            if a == attention
        ]
        runs[attention] = sweep.run_seeds(*zip(*cells), vmap=_VMAP_SEEDS.value)
    acc = {
        split: {a: [s[f"{split}_accuracy"] for s in runs[a]] for a in ATTENTIONS}
        for split in splits
    }
    split = splits[-1]
    summary = {
        "dataset": base.dataset,
        "variant": base.model.variant,
        "patch_size": base.model.patch_size,
        "steps": base.total_steps,
        "batch": base.global_batch_size,
        "seeds": _SEEDS.value,
        "split": split,
        "accuracy": {a: sweep.spread(v) for a, v in acc[split].items()},
        "paper": PAPER,
        "gap": sweep.gap(acc[split]["vanilla"], acc[split]["positional"]),
        **(
            {"validation": {a: sweep.spread(v) for a, v in acc["validation"].items()}}
            if split != "validation" and "validation" in acc
            else {}
        ),
    }
    io.write_json(os.path.join(_WORKDIR.value, "summary.json"), summary)
    plots.compare_figure(summary).savefig(os.path.join(_WORKDIR.value, "compare.png"), dpi=120)
    table = sweep.compare_table(summary)
    io.write_text(os.path.join(_WORKDIR.value, "summary.md"), table + "\n")
    print(table)


def entry():
    """`python -m posattn.experiments.compare_attention` and the console script `posattn-compare-attention`
    (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
