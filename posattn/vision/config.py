"""The configuration schema of the image regime: every field, its default and its type.

A file in `tpu_configs/` states only the fields it changes, in plain ml_collections (it imports no
posattn, so reading a config never imports JAX or the models; tpu_configs/common.py); `SCHEMA` is what
the binaries merge it onto (`posattn.configs.load_config`: a field the schema lacks is refused), and its
smoke run, the `quick` token (`--config=tpu_configs/digits.py:quick`), is `shrink_to_local`. Every field
can still be overridden on the command line (`--config.model.attention=vanilla`).

A run recorded before a field existed is read back with that field at the value it was trained with
(`SCHEMA.complete`: the schema's default, or `FORMER_DEFAULTS`'); how a workdir's recorded config may
change when the run resumes is `posattn.vision.resume`'s concern.
"""

import ml_collections

from posattn import configs
from posattn.errors import ConfigError
from posattn.vision.data import datasets

AUTO_CROP = -1  # augment.crop_padding's "scaled to the image" (`setup.resolve`)
AUTO_WORKERS = -1  # input.workers' "as the split needs" (`setup.Setup.input_workers`)
MAX_AUTO_WORKERS = 16


def base_config() -> ml_collections.ConfigDict:
    """Every field the image stack reads, with its default."""
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.dataset = "digits"
    c.data_dir = ml_collections.FieldReference(None, field_type=str)  # tfds data directory
    c.idx_dir = ml_collections.FieldReference(None, field_type=str)  # IDX files of fashion_mnist
    c.image_size = 0  # 0: the dataset's own side (a dataset of varying image sizes must set one)
    # per-channel statistics on the [0, 1] scale that normalise the inputs; empty: the dataset's own
    # (known constants, else computed from the training split); a run records those it used
    c.channel_mean = ()
    c.channel_std = ()
    # training examples held out as the validation split on which recipes are chosen (a fixed draw,
    # the same for every seed: posattn.vision.data.split.validation_indices); 0 holds out none
    c.validation_examples = 0
    c.evaluate_test = True  # False: the run never reads the test split (a recipe search)
    c.permute_block = 0
    c.permute_seed = 0
    # the workdir of a finished image run whose parameters start this one (posattn.vision.warm_start:
    # LWLC23's pre-trained initial model); "": a fresh initialisation
    c.init_from = ""

    c.augment = ml_collections.ConfigDict()
    # AUTO_CROP (-1): padding of 1/8 of the image side, rounded (CIFAR's 4 px of 32); flip None: a flip
    # where the dataset declares mirror images keep their labels (datasets.FLIP_PRESERVES_LABEL), else
    # none. An explicit value wins; `setup.resolve` resolves both once and the run's log records them.
    c.augment.crop_padding = AUTO_CROP
    c.augment.flip = ml_collections.FieldReference(None, field_type=bool)
    c.augment.randaugment_layers = 0
    c.augment.randaugment_magnitude = 9
    c.augment.mixup_alpha = 0.0
    c.augment.cutmix_alpha = 0.0  # with mixup on too, one of the two per batch (augment.mix_batch)
    # ImageNet's training crop (issue 49): each image's Inception-style random-resized crop (area 5-100%
    # of the image, aspect 3/4-4/3: big_vision's) drawn from its full-resolution original where it is
    # read (posattn.vision.data.inception_crop), in place of the padded crop; evaluation keeps
    # resize-then-centre-crop
    c.augment.inception_crop = False

    # The input pipeline (posattn.vision.data.pipeline, device_prefetch): worker processes that read and
    # decode the training batches (AUTO_WORKERS, -1: none for a split held in memory, else one per
    # core but one, at most MAX_AUTO_WORKERS), and global batches put on the devices ahead of the step
    # (0: none). Neither changes the batches.
    c.input = ml_collections.ConfigDict()
    c.input.workers = AUTO_WORKERS
    c.input.prefetch = 2

    c.model = ml_collections.ConfigDict()
    c.model.name = "vit"
    c.model.variant = "Ti/4"
    c.model.patch_size = 0
    # A ViT of one's own shape: each non-zero value replaces the variant's (0 keeps it); width is also
    # the channels of ResNet-18's and VGG-16's first stage (0: the published 64).
    c.model.width = 0
    c.model.depth = 0
    c.model.num_heads = 0
    c.model.mlp_dim = 0
    c.model.attention = "positional"
    # the kind's own knobs, "name=value,..." (posattn.vision.models.attention.parse_options); "" none
    c.model.attention_options = ""
    c.model.pos_shared = True
    c.model.pos_add = False
    c.model.pos_init_std = (
        0.02  # std of the initial P: ViT's, DeiT's and timm's (posattn.vision.models.vit)
    )
    c.model.pool = "gap"
    c.model.dropout = 0.0
    # Memory levers (issue 48 item 4; ViT only, posattn.vision.models.vit): remat "none" keeps every
    # block's activations for the backward pass, "block" recomputes each block's (jax.checkpoint), or a
    # jax.checkpoint_policies name (vit.REMAT_POLICIES) saves what that policy saves; scan_layers runs
    # the blocks as one nn.scan, their parameters stacked under "blocks" with a leading depth axis.
    c.model.remat = "none"
    c.model.scan_layers = False

    # The device mesh (posattn.vision.sharding): the batch runs over data x fsdp; fsdp also shards
    # every weight and its optimizer state (ZeRO-3), model the ViT's heads and MLP (Megatron); their
    # product is the device count, -1 the devices the others leave. All on data: data parallelism.
    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1
    c.mesh.fsdp = 1
    c.mesh.model = 1

    c.global_batch_size = 128
    c.eval_batch_size = 256
    c.total_steps = 1000

    c.optimizer = ml_collections.ConfigDict()
    c.optimizer.lr = 1e-3
    c.optimizer.weight_decay = 0.05
    c.optimizer.warmup_steps = 100
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.999
    c.optimizer.grad_clip = 1.0
    # Memory levers (issue 48 item 4; posattn.vision.train_step, optim): the step's gradient is the mean
    # over accumulate_steps micro-batches of global_batch_size / accumulate_steps images, run one after
    # another (one optimizer update per step); mu_dtype is the dtype of Adam's first moment
    # ("bfloat16" halves its bytes).
    c.optimizer.accumulate_steps = 1
    c.optimizer.mu_dtype = "float32"

    c.label_smoothing = 0.1
    c.compute_dtype = "float32"
    c.log_every = 50
    c.eval_every = 500
    c.checkpoint_every = 500
    c.keep_checkpoints = 3
    # "A,B": a jax.profiler trace of steps A to B in WORKDIR/profile (TensorBoard's profile tab); "" none
    c.profile_steps = ""
    return c


# The value a run recorded before a field existed was trained with, where the field's default has
# changed since it joined the schema (`configs.Schema.complete`; every other field joined with a default
# that keeps the former behaviour): P started as N(0, 1) until model.pos_init_std joined at 1.0; its
# default is 0.02 since.
FORMER_DEFAULTS = {"model.pos_init_std": 1.0}


def check_schema(config) -> None:
    """ConfigError unless `config` has the sections and fields of `base_config()` (e.g. a theory config
    file given to an image binary), naming the missing ones."""

    def missing(c, base, prefix=""):
        for key, value in base.items():
            if key not in c:
                yield f"{prefix}{key}"
            elif isinstance(value, ml_collections.ConfigDict) and isinstance(
                c[key], ml_collections.ConfigDict
            ):
                yield from missing(c[key], value, f"{prefix}{key}.")

    absent = list(missing(config, base_config()))
    if absent:
        shown = ", ".join(absent[:6]) + (f" and {len(absent) - 6} more" if len(absent) > 6 else "")
        raise ConfigError(
            f"the config has no {shown}: an image config builds on posattn.vision.config.base_config() "
            "(e.g. tpu_configs/digits.py)"
        )


def shrink_to_local(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A CPU smoke run of the same recipe: a tiny model, a few steps, small batches (divisible by 8),
    images of 16 x 16 pixels (the digits keep their 8 x 8), cut into as many permuted blocks per side."""
    c.model.variant = "test/2" if c.model.name == "vit" else c.model.variant
    c.model.patch_size = 0
    if c.dataset != "digits":
        if c.permute_block:
            side = c.image_size or datasets.image_shape(c.dataset)[0]
            c.permute_block = max(1, c.permute_block * 16 // side)
        c.image_size = 16
    c.augment.randaugment_layers = min(c.augment.randaugment_layers, 1)
    c.global_batch_size = 16
    c.eval_batch_size = 16
    c.total_steps = 4
    c.optimizer.warmup_steps = 1
    c.log_every = 2
    c.eval_every = 0
    c.checkpoint_every = 2
    c.keep_checkpoints = 2
    return c


SCHEMA = configs.Schema(
    "an image config (posattn.vision.config.base_config)",
    lambda fields: base_config(),
    shrink_to_local,
    former_defaults=FORMER_DEFAULTS,
)
