r"""The offline benchmark: scikit-learn's 8 x 8 handwritten digits, a small ViT with patch 2 (docs/decisions.md, Recipes).

Command (no data to prepare; runs on a laptop CPU):

  python -m experiments.train_images --config=tpu_configs/digits.py --workdir=/tmp/digits
  python -m experiments.train_images --config=tpu_configs/digits.py --workdir=/tmp/digits-vanilla \
      --config.model.attention=vanilla
  python -m experiments.train_images --config=tpu_configs/digits.py:resnet18 --workdir=/tmp/digits-resnet

Hardware: one CPU (2 cores are enough). Expected wall-clock: one to two minutes for the ViT (XS/2:
width 64, depth 4, 4 heads, 16 tokens), a few minutes for ResNet-18 (11M parameters, ~1 s a step on 2
cores). Expected test accuracy (360 held-out images): >= 95% for both attention kinds and for ResNet-18
(measured numbers in docs/image_regime.md). The paper has no digits experiment; this config exists to
check the whole stack end to end offline.

Recipe (docs/decisions.md, Recipes): batch 128, 1500 steps (about 130 epochs of the 1,437 training images), AdamW (lr 1e-3,
weight decay 0.05), 100 warm-up steps then cosine decay, random crop after 1 pixel of zero padding, no
flip (digits are not mirror-symmetric), label smoothing 0.1. The `resnet18` (or `vgg16`) argument keeps
the recipe but trains for 200 steps (about 18 epochs), enough for a CNN on 8 x 8 digits; with
`--config.model.name=resnet18` instead, the CNN trains for the ViT's 1500 steps.
"""
from posattn.vision import config as cfg_lib


def get_config(arg=None):
    args = cfg_lib.parse_arg(arg, allowed=("attention", "model", "local"))
    c = cfg_lib.base_config()
    c.dataset = "digits"
    c.model.variant = "XS/2"
    c.global_batch_size = 128
    c.eval_batch_size = 128
    c.total_steps = 1500
    c.optimizer.lr = 1e-3
    c.optimizer.weight_decay = 0.05
    c.optimizer.warmup_steps = 100
    c.augment.crop_padding = 1
    c.augment.flip = False
    c.label_smoothing = 0.1
    c.log_every = 100
    c.eval_every = 500
    c.checkpoint_every = 500
    if args.get("model", "vit") != "vit":
        c.total_steps, c.optimizer.warmup_steps = 200, 20
        c.log_every, c.eval_every, c.checkpoint_every = 20, 100, 100
    return cfg_lib.apply_common_args(c, args)
