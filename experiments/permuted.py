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
models, seeds, cnn_seeds, permutations, permutation_per_seed (each seed its own permutation), validation_examples, data_dir, vit_steps, cnn_steps, cnn_batch
and quick, each overridable as
`--config.FIELD=VALUE`; `:quick` shrinks every cell to a smoke run.

digits: tpu_configs/digits.py (ViT XS/2, 16 patches of 2 x 2; g = 8 is the unpermuted image), with no
random crop (docs/decisions.md, Recipes: the committed digits runs were made without it). fashion_mnist:
tpu_configs/fashion_mnist.py's CPU settings (ViT XS with patch 7, so that g = 7 and 14 move whole
patches; ResNet-18 and VGG-16 at width 8; g = 28 unpermuted). cifar100: the paper's protocol,
tpu_configs/permuted_cifar100.py (ViT-Ti/4 body with patch 2, ResNet-18, VGG-16; g = 32 unpermuted).
Every (model, g, seed, permutation) is one train_images run in WORKDIR/MODEL-gG-seedS (-permP for
permutations after the first; resumable, and the sweep's models, block sizes and seeds may change on a
resume); WORKDIR gets summary.json (`accuracy[model][g]`: mean, std, median, quartiles, values over
seeds and permutations, in %, of the test set, or of the validation split where the cells read no test
image; `drop_contrast[cnn][g]`: the CNN's drop minus the ViT's with its intervals and verdict),
summary.md beside the paper's numbers, and permuted.png (Figure 5 style; unpermuted baselines dashed).
"""

from posattn import cli
from posattn.papers.jsl22 import permuted

cli.define_config("tpu_configs/permuted.py", permuted.SCHEMA, "The dataset and the sweep")
cli.define_workdir("Output directory.")
cli.define_distributed_flags()  # one process per host of a cluster


def main(config, workdir):
    permuted.run(config, workdir, claim=cli.claim)


def entry():
    """`python -m posattn.experiments.permuted` and the console script `posattn-permuted` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
