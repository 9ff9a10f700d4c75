r"""Vanilla vs positional attention over seeds, JSL22 Figures 6 and 7.

  python -m posattn.experiments.compare_attention --config=tpu_configs/digits.py --config.seeds=10 \
      --workdir=/tmp/compare-digits --config.total_steps=500 --config.optimizer.warmup_steps=50 \
      --config.eval_every=0 --config.checkpoint_every=0
  python -m posattn.experiments.compare_attention --config=tpu_configs/fashion_mnist.py --config.seeds=3 \
      --workdir=/tmp/compare-fashion                                   # offline, ~1 CPU-hour
  python -m posattn.experiments.compare_attention --config=tpu_configs/cifar10.py --config.seeds=10 \
      --workdir=$WORKDIR/cifar10 --config.data_dir=$TFDS_DATA_DIR     # also cifar100.py, svhn.py
  python -m posattn.experiments.compare_attention --config=tpu_configs/imagenet.py --config.seeds=1 \
      --workdir=$WORKDIR/imagenet --config.data_dir=$TFDS_DATA_DIR

Each (attention, seed) is one train_images run of the ViT config with `model.attention` and `seed` set,
in WORKDIR/ATTENTION-seedS (resumable); the seeds of an attention kind train in one vmapped program
(`posattn.vision.seeds`, the same numbers to float tolerance) where its programs fit the devices' memory,
else one after another, and the log says which ran. WORKDIR gets summary.json (test accuracy per
attention, or the validation accuracy of a config that reads no test image: median, quartiles, IQR, mean,
values, in %), compare.png (box plots, Figure 7 style) and
summary.md, the table of medians and IQRs beside the paper's numbers, and the gap positional - vanilla
(difference of the means, its standard error, difference of the medians, and with 2+ seeds its 95%
Welch and bootstrap intervals; summary.json "gap", in points) with Figure 7's verdict on it
(summary.json "verdict": both intervals inside [-1, +1] is "reproduced", the criterion of
docs/image_results.md; None with one seed).
"""

from posattn import cli
from posattn.papers.jsl22 import attention_comparison

cli.define_config(
    "tpu_configs/digits.py",
    attention_comparison.SCHEMA,
    "A ViT config file (tpu_configs/), with seeds and vmap_seeds",
)
cli.define_workdir("Output directory.")
cli.define_distributed_flags()  # one process per host of a cluster


def main(config, workdir):
    attention_comparison.run(config, workdir, claim=cli.claim)


def entry():
    """`python -m posattn.experiments.compare_attention` and the console script `posattn-compare-attention`
    (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
