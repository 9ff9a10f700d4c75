r"""CIFAR-100, ViT-Ti/4-like with positional (default) or vanilla attention: JSL22 Figure 7.

Command (data prepared once with `tfds build cifar100 --file_format=array_record --data_dir=$TFDS_DATA_DIR`):

  python -m posattn.experiments.train_images --config=tpu_configs/cifar100.py --workdir=$WORKDIR
  python -m posattn.experiments.train_images --config=tpu_configs/cifar100.py:vanilla --workdir=$WORKDIR
  python -m posattn.experiments.train_images --config=tpu_configs/cifar100.py:quick --workdir=/tmp/smoke  # CPU

Hardware, wall-clock and recipe: those of tpu_configs/cifar10.py (the same recipe on the same image
size and training-set size; only the dataset and its 100 classes differ).

Paper (JSL22 Figure 7, median of 10 seeds): vanilla 68.00%, positional 67.95% test accuracy.
"""

import os
import runpy
import types

# the shared helpers, by path: a config file imports no posattn (tpu_configs/common.py says why)
common = types.SimpleNamespace(
    **runpy.run_path(os.path.join(os.path.dirname(__file__), "common.py"))
)


def get_config(arg=None):
    return common.recipe_config("cifar100", arg, num_train=50_000)
