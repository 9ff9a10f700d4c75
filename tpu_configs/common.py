"""What the image config files share, in plain ml_collections and the standard library.

A config file imports nothing of posattn (big_vision's rule): reading one never imports JAX, the models
or the datasets, and a file can be read, diffed and loaded anywhere. So a config file states only the
fields it changes; the binary merges them onto the library's schema, which owns every field, its
default and its type (`posattn.vision.config.SCHEMA`, merged by `posattn.cli.load_config`), refuses a
field the schema lacks and validates the values (unknown dataset, model or attention: one line, exit 2).
The smoke-run token `quick` (`FILE:quick`, `FILE:vanilla,quick`) never reaches a file: the loader
applies the binary's own smoke settings. A config file loads this one by path:

    common = types.SimpleNamespace(**runpy.run_path(os.path.join(os.path.dirname(__file__), "common.py")))
"""

import ml_collections

MODELS = ("vit", "resnet18", "vgg16", "alternet")
ALTERNET_VARIANT = (
    "XS/0111"  # the `alternet` token's (posattn.vision.models.alternet.DEFAULT_VARIANT, tested)
)
# Tokens that name a model (and, for the ViT, its attention) in one word.
ALIASES = {
    "vit_positional": {"model": "vit", "attention": "positional"},
    "vit_vanilla": {"model": "vit", "attention": "vanilla"},
    "resnet": {"model": "resnet18"},
    "vgg": {"model": "vgg16"},
}


def parse_arg(arg: str | None, allowed=("attention", "model")) -> dict:
    """Split a config argument such as "resnet18,8" into {"model": "resnet18", "block": 8}.

    Tokens: a model of `MODELS` or an alias of `ALIASES`, an integer (the pixel-block size g of the
    permuted datasets), `accel` (a config's accelerator-sized run), and any other word an attention kind
    (the library checks it against its registry, so a new kind needs no line here). ValueError for a
    token of a kind the file does not take.
    """
    out = {}
    for token in [t.strip() for t in (arg or "").split(",") if t.strip()]:
        if token in ALIASES and all(kind in allowed for kind in ALIASES[token]):
            out.update(ALIASES[token])
            continue
        kind, value = (
            ("accel", True)
            if token == "accel"
            else ("model", token)
            if token in MODELS
            else (("block", int(token)) if token.isdigit() else ("attention", token))
        )
        if kind not in allowed:
            raise ValueError(
                f"unknown config argument {token!r}: this file takes {', '.join(allowed)} tokens "
                "and `quick` (e.g. 'vanilla,quick')"
            )
        out[kind] = value
    return out


def model_fields(args: dict) -> ml_collections.ConfigDict:
    """The `model` section that the attention and model tokens of a parsed argument set."""
    model = ml_collections.ConfigDict()
    if "attention" in args:
        model.attention = args["attention"]
    if "model" in args:
        model.name = args["model"]
        if model.name == "alternet":  # a ViT variant names no AlterNet
            model.variant = ALTERNET_VARIANT
    return model


def small_image_recipe(
    dataset: str, num_train: int, *, epochs: int = 200, batch: int = 512, eval_batch: int = 1000
) -> ml_collections.ConfigDict:
    """The recipe for the 32 x 32 datasets (JSL22 Figures 5 and 7): ViT-Ti/4-like, AdamW (lr 1e-3, weight
    decay 0.05), 5 epochs of warm-up then cosine decay, label smoothing 0.1, bf16 compute, crop (pad 4) +
    flip + RandAugment(2, 9); configs change only what differs."""
    return ml_collections.ConfigDict(
        {
            "dataset": dataset,
            "model": {"variant": "Ti/4"},
            "global_batch_size": batch,
            "eval_batch_size": eval_batch,
            "total_steps": epochs * num_train // batch,
            "optimizer": {"lr": 1e-3, "weight_decay": 0.05, "warmup_steps": 5 * num_train // batch},
            "augment": {
                "crop_padding": 4,
                "flip": True,
                "randaugment_layers": 2,
                "randaugment_magnitude": 9,
            },
            "label_smoothing": 0.1,
            "compute_dtype": "bfloat16",
            "log_every": 100,
            "eval_every": 10 * num_train // batch,
            "checkpoint_every": 1000,
        }
    )


def recipe_config(dataset: str, arg: str | None, **recipe) -> ml_collections.ConfigDict:
    """A config file's `get_config(arg)` for a dataset trained with `small_image_recipe(dataset, **recipe)`
    unchanged; arg takes the attention and model tokens."""
    c = small_image_recipe(dataset, **recipe)
    c.model.update(model_fields(parse_arg(arg)))
    return c
