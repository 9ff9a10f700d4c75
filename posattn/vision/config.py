"""The configuration schema of the image regime, shared by every file in `tpu_configs/`.

A config file builds on `base_config()` and reads its argument with `parse_arg`: the argument is a
comma-separated list of tokens, e.g. `--config=tpu_configs/permuted_cifar100.py:resnet18,8,local`.
Tokens: an attention kind (`vanilla`, `positional`), a model name (`vit`, `resnet18`, `vgg16`), an
integer (the pixel-block size g of the permuted datasets) and `local`, which shrinks the run to a CPU
smoke test (`shrink_to_local`). Every field can still be overridden on the command line
(`--config.model.attention=vanilla`).

A workdir records the config of its run in config.json (`record`); a run started on it again must be
the same run (`check_resume`), apart from the fields in `RESUMABLE`.
"""
import json
import math

import ml_collections
from etils import epath

from posattn.errors import ConfigError

ATTENTIONS = ("vanilla", "positional")
MODELS = ("vit", "resnet18", "vgg16")


def base_config() -> ml_collections.ConfigDict:
    """Every field the image stack reads, with its default."""
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.dataset = "digits"
    c.data_dir = ml_collections.FieldReference(None, field_type=str)
    c.image_size = 0
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


def small_image_recipe(dataset: str, num_train: int, *, epochs: int = 200, batch: int = 512,
                       eval_batch: int = 1000) -> ml_collections.ConfigDict:
    """SPEC 2.2's recipe [D] for the 32 x 32 datasets (JSL22 Figures 5 and 7): ViT-Ti/4-like, AdamW
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


def parse_arg(arg: str | None, *, allowed=("attention", "model", "block", "local")) -> dict:
    """Split a config argument such as "vanilla,local" into {"attention": "vanilla", "local": True}."""
    out = {"local": False}
    for token in [t.strip() for t in (arg or "").split(",") if t.strip()]:
        if token == "local":
            kind, value = "local", True
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
    if args.get("local"):
        shrink_to_local(c)
    return c


def shrink_to_local(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A CPU smoke run of the same recipe: a tiny model, a few steps, small batches (divisible by 8)."""
    c.model.variant = "test/2" if c.model.name == "vit" else c.model.variant
    c.model.patch_size = 0
    if c.dataset != "digits":
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


# ---------------------------------------------------------------------------------- resuming a workdir

def _clipping_stays_on_or_off(old, new) -> bool:
    # clip_by_global_norm is a stage of the optimizer only when grad_clip > 0: switching it on or off
    # changes the structure of the optimizer state that the checkpoint holds
    on = lambda v: isinstance(v, (int, float)) and v > 0
    return on(old) == on(new)


# The fields that may change when a run resumes from a workdir, with the condition on (old, new) where
# there is one. They steer the loop and its outputs, or say where the same data lies; none changes what
# a step computes from the state and the batch, except the learning-rate knobs, which a NonFiniteLoss
# stop tells the user to change to get past a divergence. A changed total_steps stretches the cosine
# schedule from the resumed step on; it must still reach the checkpoint's step (`check_resume`).
# eval_batch_size may change since every test example counts once whatever the batch.
RESUMABLE = {"total_steps", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
             "eval_batch_size", "data_dir", "optimizer.lr", "optimizer.grad_clip"}
RESUME_CONDITIONS = {"optimizer.grad_clip": _clipping_stays_on_or_off}
_ABSENT = "(absent)"


def record(config) -> dict:
    """The config as the JSON object a workdir's config.json holds."""
    return json.loads(config.to_json_best_effort())


def read_record(workdir) -> dict | None:
    """The config a workdir's config.json records, None if it has none."""
    path = epath.Path(workdir) / "config.json"
    return json.loads(path.read_text()) if path.exists() else None


def _flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _same(a, b) -> bool:
    # NaN is a value a config can hold (a diverging learning rate) and compares unequal to itself
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def differing_fields(old: dict, new: dict) -> dict:
    """{dotted field: (old value, new value)} of the fields where two config records differ.

    A field present in only one record differs, with "(absent)" for the missing value.
    """
    a, b = _flatten(old), _flatten(new)
    return {k: (a.get(k, _ABSENT), b.get(k, _ABSENT)) for k in sorted(a.keys() | b.keys())
            if not (k in a and k in b and _same(a[k], b[k]))}


def check_resume(stored: dict | None, config, checkpoint_step: int | None, workdir) -> list[str]:
    """Raise ConfigError unless `config` may continue the run recorded in `workdir`; list the changes.

    `stored` is the workdir's config.json (None if it has none), `checkpoint_step` the step of its latest
    checkpoint (None if it has none). total_steps must not lie below the checkpoint's step, and every field
    must be as stored except those `RESUMABLE` allows to change: total_steps, log_every, eval_every,
    checkpoint_every, keep_checkpoints, eval_batch_size, data_dir, optimizer.lr and optimizer.grad_clip
    (not switched on or off). Returns the allowed changes made, as "field old -> new", for the resume
    message.
    """
    if checkpoint_step is not None and checkpoint_step > config.total_steps:
        raise ConfigError(f"{workdir} holds a checkpoint at step {checkpoint_step}, beyond "
                          f"total_steps={config.total_steps}: resume with --config.total_steps="
                          f"{checkpoint_step} or more, or use a new --workdir")
    diffs = {} if stored is None else differing_fields(stored, record(config))
    changes = {k: f"{k} {old!r} -> {new!r}" for k, (old, new) in diffs.items()}
    refused = [changes[k] for k, (old, new) in diffs.items()
               if k not in RESUMABLE or (k in RESUME_CONDITIONS and not RESUME_CONDITIONS[k](old, new))]
    if refused:
        raise ConfigError(f"{workdir} holds a run with another config ({'; '.join(refused)}): rerun with "
                          "the values of its config.json to resume it, or use a new --workdir")
    return list(changes.values())
