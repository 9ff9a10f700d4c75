"""The names under which the image models `sow` what they compute on the way (the public contract of
`posattn.vision.models.features` and `attention_maps`; the package docstring lists them).

Everything goes into flax's "intermediates" collection, which `Module.init` leaves out by default, so
the variables of a model hold only its parameters (and batch statistics).
"""

INTERMEDIATES = "intermediates"
STEM = "stem"
KINDS = ("attention", "mlp", "conv")
_WEIGHTS = "weights"  # the attention weights of block i are sown as "block_{i:02d}/weights"


def block_feature(index: int, kind: str | None = None) -> str:
    """ "block_{index:02d}" (an attention map's name) or "block_{index:02d}/{kind}" (a feature map's);
    kind in KINDS: the residual stream after an attention or MLP branch, or a conv block's output."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown feature kind {kind!r}: use one of {KINDS}")
    return f"block_{index:02d}" if kind is None else f"block_{index:02d}/{kind}"


def attention_weights(index: int) -> str:
    """The name block `index` sows its attention weights under."""
    return f"{block_feature(index)}/{_WEIGHTS}"


def is_feature(name: str) -> bool:
    return name == STEM or name.rpartition("/")[2] in KINDS


def attention_block(name: str) -> str | None:
    """ "block_{i:02d}" for the name of block i's attention weights, None for any other name."""
    block, _, leaf = name.rpartition("/")
    return block if leaf == _WEIGHTS else None
