r"""Permuted CIFAR-100: ViT (patch 2), ResNet-18 or VGG-16 on images whose g x g pixel blocks are shuffled
by one fixed random permutation (the same for train and test): JSL22 Figure 5.

The argument is `[MODEL,]G[,quick]` with MODEL in vit (default), resnet18, vgg16 and G the block size
(default 2; 32 = one block = unpermuted). The sweep of Figure 5:

  for m in vit resnet18 vgg16; do for g in 2 4 8 16 32; do
    python -m posattn.experiments.train_images --config=tpu_configs/permuted_cifar100.py:$m,$g \
      --workdir=$WORKDIR/$m-g$g
  done; done
  python -m posattn.experiments.train_images --config=tpu_configs/permuted_cifar100.py:resnet18,4,quick \
      --workdir=/tmp/smoke  # CPU smoke run

Hardware: one TPU v4-8 slice or one A100/H100 GPU per run. Expected wall-clock: ViT with patch 2 (256
tokens) about 4 hours, ResNet-18 about 1 hour, VGG-16 about 40 minutes (estimates from FLOP counts; not
measured here).

Recipe (docs/decisions.md, Recipes): 200 epochs at batch 512, AdamW (lr 1e-3 for the ViT, 2e-3 for the CNNs, weight decay 0.05),
warm-up then cosine decay, label smoothing 0.1, and the augmentation of the other CIFAR configs
(random crop after 4 pixels of padding, flip, RandAugment(2, 9)): the paper's unpermuted CNNs (ResNet
79.9%, VGG 76.2%) are augmented-training numbers. Each training image is
augmented as a natural image and then block-permuted (`setup.Setup.training_inputs`), so every g sees the
permuted images of the same augmented distribution.

Paper (JSL22 Figure 5, test accuracy %, g = 2 / 4 / 8 / 16 / 32):
  ResNet 57.3 / 66.2 / 73.2 / 78.4 / 79.9;  VGG 46.7 / 57.0 / 66.6 / 72.9 / 76.2;
  ViT 63.6 / 63.6 / 63.7 / 63.6 / 63.5.
"""

import os
import runpy
import types

# the shared helpers, by path: a config file imports no posattn (tpu_configs/common.py says why)
common = types.SimpleNamespace(
    **runpy.run_path(os.path.join(os.path.dirname(__file__), "common.py"))
)


def get_config(arg=None):
    args = common.parse_arg(arg, allowed=("attention", "model", "block"))
    c = common.small_image_recipe("cifar100", num_train=50_000)
    c.permute_block = args.get("block", 2)
    c.permute_seed = 0
    c.model.update(common.model_fields({"model": "vit", **args}))
    c.model.patch_size = 2
    c.optimizer.lr = 1e-3 if c.model.name == "vit" else 2e-3
    return c
