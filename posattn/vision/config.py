"""The configuration schema of the image regime, shared by every file in `tpu_configs/`.

A config file builds on `base_config()` and reads its argument with `parse_arg`: the argument is a
comma-separated list of tokens, e.g. `--config=tpu_configs/permuted_cifar100.py:resnet18,8,local`.
Tokens: an attention kind (`vanilla`, `positional`), a model name (`vit`, `resnet18`, `vgg16`), an
integer (the pixel-block size g of the permuted datasets) and `local`, which shrinks the run to a CPU
smoke test (`shrink_to_local`). Every field can still be overridden on the command line
(`--config.model.attention=vanilla`).

How a workdir's recorded config may change when the run resumes is `posattn.vision.resume`'s concern.
"""
import ml_collections

from posattn.errors import ConfigError
from posattn.vision.data import datasets
from posattn.vision.models import MODELS, alternet
from posattn.vision.models.attention import ATTENTIONS


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
    c.permute_block = 0
    c.permute_seed = 0

    c.augment = ml_collections.ConfigDict()
    c.augment.crop_padding = 4
    c.augment.flip = True
    c.augment.randaugment_layers = 0
    c.augment.randaugment_magnitude = 9
    c.augment.mixup_alpha = 0.0

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
    c.model.pos_shared = True
    c.model.pos_add = False
    c.model.pos_init_std = 1.0  # std of the initial P (see posattn.vision.models.vit)
    c.model.pool = "gap"
    c.model.dropout = 0.0

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

    c.label_smoothing = 0.1
    c.compute_dtype = "float32"
    c.log_every = 50
    c.eval_every = 500
    c.checkpoint_every = 500
    c.keep_checkpoints = 3
    return c


def check_schema(config) -> None:
    """ConfigError unless `config` has the sections and fields of `base_config()` (e.g. a theory config
    file given to an image binary), naming the missing ones."""
    def missing(c, base, prefix=""):
        for key, value in base.items():
            if key not in c:
                yield f"{prefix}{key}"
            elif isinstance(value, ml_collections.ConfigDict) and isinstance(c[key], ml_collections.ConfigDict):
                yield from missing(c[key], value, f"{prefix}{key}.")

    absent = list(missing(config, base_config()))
    if absent:
        shown = ", ".join(absent[:6]) + (f" and {len(absent) - 6} more" if len(absent) > 6 else "")
        raise ConfigError(f"the config has no {shown}: an image config builds on posattn.vision.config.base_config() "
                          "(e.g. tpu_configs/digits.py)")


def small_image_recipe(dataset: str, num_train: int, *, epochs: int = 200, batch: int = 512,
                       eval_batch: int = 1000) -> ml_collections.ConfigDict:
    """The recipe for the 32 x 32 datasets (JSL22 Figures 5 and 7): ViT-Ti/4-like, AdamW
    (lr 1e-3, weight decay 0.05), 5 epochs of warm-up then cosine decay, label smoothing 0.1, bf16
    compute, crop (pad 4) + flip + RandAugment(2, 9); configs change only what differs."""
    c = base_config()
    c.dataset = dataset
    c.model.variant = "Ti/4"
    c.global_batch_size = batch
    c.eval_batch_size = eval_batch
    c.total_steps = epochs * num_train // batch
    c.optimizer.lr = 1e-3
    c.optimizer.weight_decay = 0.05
    c.optimizer.warmup_steps = 5 * num_train // batch
    c.augment.crop_padding = 4
    c.augment.flip = True
    c.augment.randaugment_layers = 2
    c.augment.randaugment_magnitude = 9
    c.label_smoothing = 0.1
    c.compute_dtype = "bfloat16"
    c.log_every = 100
    c.eval_every = 10 * num_train // batch
    c.checkpoint_every = 1000
    return c


def recipe_config(dataset: str, arg: str | None, **recipe) -> ml_collections.ConfigDict:
    """A config file's `get_config(arg)` for a dataset trained with `small_image_recipe(dataset,
    **recipe)` unchanged; arg takes the attention, model and local tokens."""
    args = parse_arg(arg, allowed=("attention", "model", "local"))
    return apply_common_args(small_image_recipe(dataset, **recipe), args)


# Tokens that name a model (and, for the ViT, its attention) in one word.
ALIASES = {"vit_positional": {"model": "vit", "attention": "positional"},
           "vit_vanilla": {"model": "vit", "attention": "vanilla"},
           "resnet": {"model": "resnet18"}, "vgg": {"model": "vgg16"}}


def parse_arg(arg: str | None, *, allowed=("attention", "model", "block", "local")) -> dict:
    """Split a config argument such as "vanilla,local" into {"attention": "vanilla", "local": True}.

    Tokens: an attention kind, a model name or an alias of `ALIASES` (vit_positional, vit_vanilla, resnet,
    vgg), an integer (block), `local` (a CPU smoke run) and `accel` (a config's accelerator-sized run).
    """
    out = {"local": False}
    for token in [t.strip() for t in (arg or "").split(",") if t.strip()]:
        if token in ALIASES and all(kind in allowed for kind in ALIASES[token]):
            out.update(ALIASES[token])
            continue
        if token in ("local", "accel"):
            kind, value = token, True
        elif token in ATTENTIONS:
            kind, value = "attention", token
        elif token in MODELS:
            kind, value = "model", token
        elif token.isdigit():
            kind, value = "block", int(token)
        else:
            kind = None
        if kind not in allowed:
            raise ConfigError(
                f"unknown config argument {token!r}: expected a comma-separated list of "
                f"{', '.join(allowed)} tokens (e.g. 'vanilla,local')"
            )
        out[kind] = value
    return out


def apply_common_args(c: ml_collections.ConfigDict, args: dict) -> ml_collections.ConfigDict:
    """Apply the attention and model tokens of a parsed argument; `local` last, via `shrink_to_local`."""
    if "attention" in args:
        c.model.attention = args["attention"]
    if "model" in args:
        c.model.name = args["model"]
        if args["model"] == "alternet":  # the ViT variant of the base config names no AlterNet
            c.model.variant = alternet.DEFAULT_VARIANT
    if args.get("local"):
        shrink_to_local(c)
    return c


def shrink_to_local(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A CPU smoke run of the same recipe: a tiny model, a few steps, small batches (divisible by 8),
    images of 16 x 16 pixels (the digits keep their 8 x 8), cut into as many permuted blocks per side."""
    c.model.variant = "test/2" if c.model.name == "vit" else c.model.variant
    c.model.patch_size = 0
    if c.dataset != "digits":
        if c.get("permute_block"):
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
