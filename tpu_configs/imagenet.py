r"""ImageNet-1k, ViT-Ti/16 at 224 px, DeiT-style, positional (default) or vanilla attention: JSL22 Fig. 6.

Command (ImageNet must be downloaded by hand into the tfds manual dir first, then
`tfds build imagenet2012 --file_format=array_record --data_dir=$TFDS_DATA_DIR`); run the same command on
every host of the slice:

  python -m posattn.experiments.train_images --config=tpu_configs/imagenet.py --workdir=gs://BUCKET/run
  python -m posattn.experiments.train_images --config=tpu_configs/imagenet.py:vanilla --workdir=gs://BUCKET/run
  python -m posattn.experiments.train_images --config=tpu_configs/imagenet.py:quick --workdir=/tmp/smoke  # CPU

Hardware: a TPU v4-32 pod slice (4 hosts; `jax.distributed` is initialised from the TPU environment).
Expected wall-clock: about 4-6 hours (an estimate scaled from big_vision's published ViT-S/16 timing;
whether a host's cores decode fast enough is measured per core in docs/benchmarks.md, "Input pipeline"). Evaluation uses the validation
split (ImageNet's test labels are not public).

Recipe (docs/decisions.md, Recipes: the DeiT-Ti recipe within the fields of this stack): ViT-Ti/16 (depth 12, width 192, 3 heads,
MLP 768), 300 epochs at batch 1024, AdamW (lr 1e-3 = 5e-4 x 1024/512, weight decay 0.05), 5 epochs of
warm-up then cosine decay, random crop + flip, RandAugment(2, 9), mixup 0.8, label smoothing 0.1,
bfloat16 compute. (DeiT also uses CutMix, random erasing, repeated augmentation and stochastic depth,
which this stack does not implement.) Training crops are Inception-style random-resized crops of the
full-resolution image where it is decoded (`augment.inception_crop`: area 5-100%, aspect 3/4-4/3, as
big_vision's; DeiT's RandomResizedCrop takes area 8-100%), then flip, RandAugment and mixup on device.
Evaluation reads each image resized (shorter side to 224) and centre-cropped to 224 x 224, where DeiT
resizes to 256 before its centre crop of 224, so the eval images here show more of the scene. The
images are decoded by worker processes (`input.workers`, one per core but one; docs/benchmarks.md,
"Input pipeline", gives the decode rate per core and what a host needs).

Paper (JSL22 Figure 6): vanilla 71.9%, positional 68.9% top-1 (final training loss about 3.5 vs 3.9).
"""

import os
import runpy
import types

import ml_collections

# the shared helpers, by path: a config file imports no posattn (tpu_configs/common.py says why)
common = types.SimpleNamespace(
    **runpy.run_path(os.path.join(os.path.dirname(__file__), "common.py"))
)

NUM_TRAIN, EPOCHS, BATCH = 1_281_167, 300, 1024


def get_config(arg=None):
    return ml_collections.ConfigDict(
        {
            "dataset": "imagenet2012",
            "image_size": 224,
            "model": {"variant": "Ti/16", **common.model_fields(common.parse_arg(arg))},
            "global_batch_size": BATCH,
            "eval_batch_size": 1024,
            "total_steps": EPOCHS * NUM_TRAIN // BATCH,
            "optimizer": {"lr": 1e-3, "weight_decay": 0.05, "warmup_steps": 5 * NUM_TRAIN // BATCH},
            "augment": {
                "inception_crop": True,
                "flip": True,
                "randaugment_layers": 2,
                "randaugment_magnitude": 9,
                "mixup_alpha": 0.8,
            },
            "label_smoothing": 0.1,
            "compute_dtype": "bfloat16",
            "log_every": 500,
            "eval_every": 10 * NUM_TRAIN // BATCH,
            "checkpoint_every": 2000,
        }
    )
