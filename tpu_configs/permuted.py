r"""Permuted pixels, JSL22 Figure 5: ViT vs CNNs on images whose g x g pixel blocks are shuffled by one
fixed random permutation; the sweep of `experiments.permuted` over models, block sizes g and seeds.

Command (from any directory: the binaries find tpu_configs/ in the checkout or the installed package,
`posattn.cli.find_config_file`):

  python -m posattn.experiments.permuted --workdir=/tmp/permuted-digits            # digits, g = 2, 4, 8
  python -m posattn.experiments.permuted --config=tpu_configs/permuted.py:quick --workdir=/tmp/smoke
  python -m posattn.experiments.permuted --config=tpu_configs/permuted.py:fashion_mnist --workdir=DIR
  python -m posattn.experiments.permuted --config=tpu_configs/permuted.py:cifar100 --workdir=DIR \
      --config.data_dir=$TFDS_DATA_DIR

The argument is the dataset (digits by default, fashion_mnist, cifar100), optionally with `quick`; each
cell is a train_images run of that dataset's config file (tpu_configs/digits.py, fashion_mnist.py,
permuted_cifar100.py). Hardware and time: digits, one CPU, minutes a cell (27 cells by default: the
CNNs dominate); fashion_mnist, a 2-core CPU, under 10 minutes a cell (fashion_mnist.py); cifar100, one
TPU v4-8 slice or A100/H100 per cell, 40 minutes (VGG) to 4 hours (ViT) a cell (permuted_cifar100.py);
`:quick`, seconds a cell. Expected result (cifar100, the paper's Figure 5): the ViT is flat in g (63.5-63.7%)
while ResNet falls from 79.9% (g = 32) to 57.3% (g = 2) and VGG from 76.2% to 46.7%; summary.md sets
ours beside them.
"""

import ml_collections

BLOCKS = {"digits": (2, 4, 8), "fashion_mnist": (2, 4, 7, 14, 28), "cifar100": (2, 4, 8, 16, 32)}


def get_config(arg=None):
    dataset = arg or "digits"
    if dataset not in BLOCKS:
        raise ValueError(f"unknown dataset {dataset!r}: use one of {', '.join(BLOCKS)}")
    return ml_collections.ConfigDict({"dataset": dataset, "block_sizes": BLOCKS[dataset]})
