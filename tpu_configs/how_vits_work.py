r"""The models PK22's measurements compare, trained to convergence on the offline digits or Fashion-MNIST
(docs/how_vits_work.md).

  python -m posattn.experiments.train_images --config=tpu_configs/how_vits_work.py:vit_positional --workdir=DIR
  python -m posattn.experiments.train_images --config=tpu_configs/how_vits_work.py:resnet,fashion_mnist --workdir=DIR
  python -m posattn.experiments.how_vits_work --workdir=DIR          # trains the digits four, then measures them
  python -m posattn.experiments.how_vits_work --workdir=DIR --config.dataset=fashion_mnist

Argument: one model token, and `fashion_mnist` for that dataset (default: the digits):
  resnet          pre-activation ResNet, stages of two blocks, widths 16-32-64-128 (AlterNet "XS/0000")
  alternet        the same ResNet with its last three stages ending in a vanilla MSA block (PK22 Fig. 8)
  alternet_positional  the same AlterNet with positional attention (JSL22 Definition 3.2)
  vit_vanilla     ViT XS (width 64, depth 4, 4 heads), vanilla attention: patch 2 on the 16 x 16 digits
                  (an 8 x 8 grid), patch 4 on the 28 x 28 Fashion-MNIST images (7 x 7)
  vit_positional  the same ViT with positional attention

Every model is trained to convergence by the criterion of docs/image_results.md (the training loss
changes by less than 3% over the last epoch; logged every half epoch, so the last epoch holds two logs
and `posattn.papers.pk22.report.last_epoch_change` reads it), with a cosine schedule to 0.

Digits (hardware: one CPU, 2 cores): the 8 x 8 digits resized to 16 x 16, the smallest size at which
every frequency band of PK22's noise test holds a pixel frequency. Recipe [D] (the digits config's):
AdamW lr 1e-3, weight decay 0.05, warm-up then cosine, crop after 2 pixels of padding, no flip, label
smoothing 0.1, batch 64 (22.5 steps an epoch of 1,437 images): the CNNs 450 steps (20 epochs), the ViTs
1,350 (60 epochs). At 300 steps (the study before issue 35) the vanilla ViT stopped at 77.5% with its
loss still falling.

Fashion-MNIST (`fashion_mnist`; the IDX files, tpu_configs/fashion_mnist.py says where): the CPU recipe of
tpu_configs/fashion_mnist.py (batch 128, 469 steps an epoch, crop after 2 pixels and flip, half an epoch
of warm-up) for 4 epochs, the recipe whose ViT runs met the criterion there (docs/image_results.md).
AlterNet needs maps divisible by its window 4 and 28 x 28 images subsample to 7 x 7: it is not offered
on Fashion-MNIST.
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
DIGITS_STEPS = {"alternet": 450, "vit": 1350}  # by model.name: 20 and 60 epochs at batch 64
FASHION_EPOCHS, FASHION_TRAIN, FASHION_BATCH = 4, 60_000, 128


def get_config(arg=None):
    tokens = [t.strip() for t in (arg or "vit_positional").split(",") if t.strip()]
    fashion = "fashion_mnist" in tokens
    models = [t for t in tokens if t != "fashion_mnist"] or ["vit_positional"]
    if len(models) != 1 or models[0] not in MODELS:
        raise ValueError(
            f"unknown argument {arg!r}: give one model token among {', '.join(MODELS)}, "
            "and fashion_mnist for that dataset"
        )
    model = MODELS[models[0]]
    if fashion and model["name"] == "alternet" and model["variant"] != "XS/0000":
        raise ValueError(
            "AlterNet's windows of 4 do not tile the 7 x 7 maps of 28 x 28 images: "
            "no AlterNet on fashion_mnist"
        )
    here = os.path.dirname(__file__)
    # the dataset configs' fields, by path (a config file imports no posattn: tpu_configs/common.py)
    if fashion:
        c = runpy.run_path(os.path.join(here, "fashion_mnist.py"))["get_config"]()
        c.model.update(model)
        c.model.variant = model["variant"].replace("XS/2", "XS/4")
        c.model.width = 0  # the variant's widths
        steps_per_epoch = FASHION_TRAIN // FASHION_BATCH
        c.global_batch_size, c.total_steps = FASHION_BATCH, FASHION_EPOCHS * steps_per_epoch
        c.optimizer.warmup_steps = steps_per_epoch // 2
        c.log_every, c.checkpoint_every = steps_per_epoch // 2, 500
    else:
        c = runpy.run_path(os.path.join(here, "digits.py"))["get_config"]()
        c.image_size = 16
        c.model.update(model)
        c.global_batch_size = 64
        c.augment.crop_padding = 2
        c.total_steps = DIGITS_STEPS[model["name"]]
        c.optimizer.warmup_steps = 30
        c.log_every = 11  # half an epoch of 1,437 images at batch 64
        c.checkpoint_every = 0
    c.eval_every = 0
    c.keep_checkpoints = 1
    return c
