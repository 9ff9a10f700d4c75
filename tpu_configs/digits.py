r"""The offline benchmark: scikit-learn's 8 x 8 handwritten digits, a small ViT with patch 2 (docs/decisions.md, Recipes).

Command (no data to prepare; runs on a laptop CPU):

  python -m posattn.experiments.train_images --config=tpu_configs/digits.py --workdir=/tmp/digits
  python -m posattn.experiments.train_images --config=tpu_configs/digits.py --workdir=/tmp/digits-vanilla \
      --config.model.attention=vanilla
  python -m posattn.experiments.train_images --config=tpu_configs/digits.py:resnet18 --workdir=/tmp/digits-resnet

Hardware: one CPU (2 cores are enough). Expected wall-clock: one to two minutes for the ViT (XS/2:
width 64, depth 4, 4 heads, 16 tokens), a few minutes for ResNet-18 (11M parameters, ~1 s a step on 2
cores). Expected test accuracy (360 held-out images): >= 95% for both attention kinds and for ResNet-18
(measured numbers in docs/image_regime.md). The paper has no digits experiment; this config exists to
check the whole stack end to end offline.

Recipe (docs/decisions.md, Recipes): batch 128, 1500 steps (about 130 epochs of the 1,437 training images), AdamW (lr 1e-3,
weight decay 0.05), 100 warm-up steps then cosine decay, random crop after 1 pixel of zero padding, no
flip (digits are not mirror-symmetric), label smoothing 0.1; P starts at N(0, 1), where the other
configs take the field's N(0, 0.02^2) (measured on a validation split: docs/decisions.md, Models). The `resnet18` (or `vgg16`) argument keeps
the recipe but trains for 200 steps (about 18 epochs), enough for a CNN on 8 x 8 digits; with
`--config.model.name=resnet18` instead, the CNN trains for the ViT's 1500 steps.
"""

import os
import runpy
import types

import ml_collections

# the shared helpers, by path: a config file imports no posattn (tpu_configs/common.py says why)
common = types.SimpleNamespace(
    **runpy.run_path(os.path.join(os.path.dirname(__file__), "common.py"))
)


def get_config(arg=None):
    args = common.parse_arg(arg)
    c = ml_collections.ConfigDict(
        {
            # P ~ N(0, 1), not the field's N(0, 0.02^2): on these 1,437 images the small start loses 1.4
            # (positional) and 6.7 (vanilla) validation points at this length (docs/decisions.md, Models)
            "dataset": "digits",
            "model": {"variant": "XS/2", "pos_init_std": 1.0, **common.model_fields(args)},
            "global_batch_size": 128,
            "eval_batch_size": 128,
            "total_steps": 1500,
            "optimizer": {"lr": 1e-3, "weight_decay": 0.05, "warmup_steps": 100},
            "augment": {"crop_padding": 1, "flip": False},
            "label_smoothing": 0.1,
            "log_every": 100,
            "eval_every": 500,
            "checkpoint_every": 500,
        }
    )
    if args.get("model", "vit") != "vit":
        c.total_steps, c.optimizer.warmup_steps = 200, 20
        c.log_every, c.eval_every, c.checkpoint_every = 20, 100, 100
    return c
