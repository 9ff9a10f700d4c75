r"""The four models PK22's measurements compare, trained on the offline digits (docs/how_vits_work.md).

  python -m posattn.experiments.train_images --config=tpu_configs/how_vits_work.py:vit_positional --workdir=DIR
  python -m posattn.experiments.how_vits_work --workdir=DIR          # trains all four, then measures them

Argument: one model token:
  resnet          pre-activation ResNet, stages of two blocks, widths 16-32-64-128 (AlterNet "XS/0000")
  alternet        the same ResNet with its last three stages ending in a vanilla MSA block (PK22 Fig. 8)
  alternet_positional  the same AlterNet with positional attention (JSL22 Definition 3.2)
  vit_vanilla     ViT XS/2 (width 64, depth 4, 4 heads) on the 8 x 8 grid of 2 x 2 patches, vanilla
  vit_positional  the same ViT with positional attention

Hardware: one CPU. Images are the 8 x 8 digits resized to 16 x 16, the smallest size at which every
frequency band of PK22's noise test (0.1 pi .. 0.9 pi, half-width 0.2) holds a pixel frequency. Recipe
[D] (the digits config's, at batch 64 and 300 steps, ~13 epochs, so four models train in minutes on 2
cores): AdamW lr 1e-3, weight decay 0.05, 30 warm-up steps then cosine, crop after 2 pixels of
padding (1 pixel at 8 x 8), no flip, label smoothing 0.1. Measured test accuracy (360 test digits,
docs/how_vits_work.md): ResNet 99.2%, AlterNet 98.6%, positional ViT 88.9%, vanilla ViT 77.5%; training
takes 46-90 s a model on 2 quiet cores, two models at a time (ResNet 90 s, AlterNet 80, vanilla ViT
75, positional ViT 46).
ResNet-18 is too slow for this budget on 2 cores (~1 s a step); a ResNet-18 run can still be
measured with `--runs`.
"""
import os
import runpy

MODELS = {
    "resnet": dict(name="alternet", variant="XS/0000", attention="vanilla"),
    "alternet": dict(name="alternet", variant="XS/0111", attention="vanilla"),
    "alternet_positional": dict(name="alternet", variant="XS/0111", attention="positional"),
    "vit_vanilla": dict(name="vit", variant="XS/2", attention="vanilla"),
    "vit_positional": dict(name="vit", variant="XS/2", attention="positional"),
}


def get_config(arg=None):
    model = (arg or "vit_positional").strip()
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}: give one model token among {', '.join(MODELS)}")
    # the digits config's fields, by path (a config file imports no posattn: tpu_configs/common.py)
    c = runpy.run_path(os.path.join(os.path.dirname(__file__), "digits.py"))["get_config"]()
    c.image_size = 16
    c.model.update(MODELS[model])
    c.global_batch_size = 64
    c.augment.crop_padding = 2
    c.total_steps = 300
    c.optimizer.warmup_steps = 30
    c.log_every = 50
    c.eval_every = 0
    c.checkpoint_every = 0
    c.keep_checkpoints = 1
    return c
