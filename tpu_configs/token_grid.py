r"""LWLC23's deeper-ViT experiment on real images, offline: 3 x 3 grids of the 8 x 8 digits
(`posattn.vision.data.token_grid`, dataset "digit_grid/R", R = 5..9 label-relevant slots of 9), a ViT
with one token per slot (docs/decisions.md, "Composite grids (LWLC23's deeper ViT)").

Command (no data to prepare; `experiments.token_grid` runs it for every R and both attention kinds):

  python -m posattn.experiments.train_images --config=tpu_configs/token_grid.py --workdir=/tmp/grid7
  python -m posattn.experiments.train_images --config=tpu_configs/token_grid.py:vanilla --workdir=/tmp/grid5 \
      --config.dataset=digit_grid/5

Hardware: one CPU (2 cores are enough). Expected wall-clock: 20-50 s a run (compile included); the 10
runs of `experiments.token_grid` took 306 s of CPU time (201.6 s wall). Measured test accuracy (2,000 test
grids): 0.9905 (vanilla) and 0.9855 (positional) at R = 5, 1.00 from R = 7 for both
(docs/shallow_vit_results.md). Paper (LWLC23,
a pre-trained ViT on CIFAR-10 grids): 0.837 .. 0.985 for R = 5 .. 9.

Model: XS/8 (width 64, depth 4, 4 heads, MLP 128): 8 x 8 patches of the 24 x 24 grid are its 9 slots,
so a token is one digit. Recipe: the digits recipe (tpu_configs/digits.py: AdamW lr 1e-3, weight decay
0.05, label smoothing 0.1, batch 128) for 300 steps (about 75 epochs of the 500 train grids; in the
default run every cell's training accuracy over steps 101-200 is >= 0.999, and its training loss ends at
0.1985, the floor label smoothing sets), 50 warm-up steps, and no augmentation: a crop would move pixels
across slots (a token would no longer be one digit) and digits are not mirror-symmetric. The paper
starts from a pre-trained ViT; this trains from scratch.

`fashion` (experiments.token_grid's; it sets the experiment's grid section, which train_images refuses):
the grids of Fashion-MNIST items ("fashion_grid/R": T-shirt/top against shirt, 2,000 train and 2,000 test
grids; the IDX files of tpu_configs/fashion_mnist.py), ViT XS/28 (a 28 x 28 item is one token), the same
recipe, every R, both attention kinds, both starts (from scratch; from the same ViT pre-trained 940 steps,
2 epochs, on single Fashion-MNIST items of all 10 classes), 5 seeds: 110 runs.

  python -m posattn.experiments.token_grid --config=tpu_configs/token_grid.py:fashion --workdir=DIR
  python -m posattn.experiments.train_images --config=tpu_configs/token_grid.py --workdir=DIR \
      --config.dataset=fashion_grid/5 --config.model.variant=XS/28         # one cell, from scratch

Measured (2026-11-26, the shared 2-core machine at load averages 11-17, other sessions' runs beside
it): the whole experiment 4,918 s (82 min) wall, a cell 21-81 s (median 32 s), a pre-training run 20-83
s. Test accuracy (mean of 5 seeds) 0.865-0.895 at R = 5 rising to 0.997-0.999 at R = 9, the
pre-trained start 0.025-0.029 above the scratch one at R = 5 (docs/shallow_vit_results.md, "Deeper ViT
on token grids"). Criterion of "accuracy rises with alpha_*", fixed before the run:
`posattn.papers.lwlc23.grid_report`.
"""

import os
import runpy
import types

import ml_collections

# the shared helpers, by path: a config file imports no posattn (tpu_configs/common.py says why)
common = types.SimpleNamespace(
    **runpy.run_path(os.path.join(os.path.dirname(__file__), "common.py"))
)


FASHION_PRETRAIN_STEPS = 940  # 2 epochs of Fashion-MNIST's 60,000 items at batch 128


def get_config(arg=None):
    tokens = [t.strip() for t in (arg or "").split(",") if t.strip()]
    fashion = "fashion" in tokens
    args = common.parse_arg(",".join(t for t in tokens if t != "fashion"), allowed=("attention",))
    c = ml_collections.ConfigDict(
        {
            "schema": "token_grid",  # (its fields alone fit an image config: train_images would run them)
            "dataset": "digit_grid/7",
            "model": {"variant": "XS/8", **common.model_fields(args)},
            "global_batch_size": 128,
            "eval_batch_size": 500,
            "total_steps": 300,
            "optimizer": {"lr": 1e-3, "weight_decay": 0.05, "warmup_steps": 50},
            "augment": {"crop_padding": 0, "flip": False},
            "label_smoothing": 0.1,
            "log_every": 100,
            "eval_every": 0,
            "checkpoint_every": 0,
            "keep_checkpoints": 1,
            # `:quick` keeps one token per slot: the grid at its native size, a slot's side as the patch
            "smoke": {"image_size": 0, "model": {"variant": "test/8"}, "eval_batch_size": 500},
        }
    )
    if (
        fashion
    ):  # experiments.token_grid's section: a train_images run of a cell sets the two fields above
        c.dataset, c.model.variant, c.smoke.model.variant = "fashion_grid/7", "XS/28", "test/28"
        c.grid = ml_collections.ConfigDict(
            {
                "family": "fashion_grid",
                "starts": "scratch,pretrained",
                "seeds": (0, 1, 2, 3, 4),
                "pretrain_steps": FASHION_PRETRAIN_STEPS,
            }
        )
    return c
