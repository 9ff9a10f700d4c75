r"""ImageNet-1k, ViT-Ti/16 at 224 px, DeiT-style, positional (default) or vanilla attention: JSL22 Fig. 6.

Command (ImageNet must be downloaded by hand into the tfds manual dir first, then
`tfds build imagenet2012 --file_format=array_record --data_dir=$TFDS_DATA_DIR`); run the same command on
every host of the slice:

  python -m posattn.experiments.train_images --config=tpu_configs/imagenet.py --workdir=gs://BUCKET/run
  python -m posattn.experiments.train_images --config=tpu_configs/imagenet.py:vanilla --workdir=gs://BUCKET/run
  python -m posattn.experiments.train_images --config=tpu_configs/imagenet.py:quick --workdir=/tmp/smoke  # CPU

Hardware: a TPU v4-32 pod slice (4 hosts; `jax.distributed` is initialised from the TPU environment).
Expected wall-clock: about 4-6 hours (an estimate scaled from big_vision's published ViT-S/16 timing;
host-side JPEG decoding and resizing may dominate; not measured here). Evaluation uses the validation
split (ImageNet's test labels are not public).

Recipe (docs/decisions.md, Recipes: the DeiT-Ti recipe within the fields of this stack): ViT-Ti/16 (depth 12, width 192, 3 heads,
MLP 768), 300 epochs at batch 1024, AdamW (lr 1e-3 = 5e-4 x 1024/512, weight decay 0.05), 5 epochs of
warm-up then cosine decay, random crop + flip, RandAugment(2, 9), mixup 0.8, label smoothing 0.1,
bfloat16 compute. (DeiT also uses CutMix, random erasing, repeated augmentation and stochastic depth,
which this stack does not implement.) The crops are not DeiT's: every image, train and eval, is read
resized (shorter side to 224) and centre-cropped to 224 x 224; training then takes a random 224 x 224
window of it zero-padded by 16 pixels, where DeiT trains on RandomResizedCrop(224) (scale 0.08-1) and
evaluates on resize-256 then centre-crop-224, so the eval images here show more of the scene.

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
                "crop_padding": 16,
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
