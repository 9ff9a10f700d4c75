r"""CIFAR-10, ViT-Ti/4-like with positional (default) or vanilla attention: JSL22 Figure 7.

Command (data prepared once with `tfds build cifar10 --file_format=array_record --data_dir=$TFDS_DATA_DIR`):

  python -m posattn.experiments.train_images --config=tpu_configs/cifar10.py --workdir=$WORKDIR
  python -m posattn.experiments.train_images --config=tpu_configs/cifar10.py:vanilla --workdir=$WORKDIR
  python -m posattn.experiments.train_images --config=tpu_configs/cifar10.py:quick --workdir=/tmp/smoke  # CPU

Hardware: one TPU v4-8 slice (the same command runs on every host of a larger slice) or one A100/H100
GPU. Expected wall-clock: about 1 hour on either (an estimate from the FLOP count, ~2.2 GFLOP per
training image, 10M training images; not measured here).

Recipe (docs/decisions.md, Recipes): depth 12, width 192, 3 heads, MLP 768, patch 4 (64 tokens), global average
pooling, AdamW (lr 1e-3, weight decay 0.05), 5 epochs of linear warm-up then cosine decay, 200 epochs
at batch 512, random crop (pad 4) + flip + RandAugment(2, 9), label smoothing 0.1.

Paper (JSL22 Figure 7, median of 10 seeds): vanilla 90.23%, positional 90.54% test accuracy.
"""

import os
import runpy
import types

# the shared helpers, by path: a config file imports no posattn (tpu_configs/common.py says why)
common = types.SimpleNamespace(
    **runpy.run_path(os.path.join(os.path.dirname(__file__), "common.py"))
)


def get_config(arg=None):
    return common.recipe_config("cifar10", arg, num_train=50_000)
