"""Named ViT variants: "<family>/<patch size>", e.g. "Ti/16" = ViT-Ti with 16 x 16 patches; any field
of a variant's shape can be overridden (`override_shape`), so a ViT of one's own width, depth, heads
and MLP size needs no new family.

Widths, depths, heads and MLP sizes of Ti, S, B, L and H are those of the ViT paper (Dosovitskiy et al.
2021) and DeiT (Touvron et al. 2021), g that of Zhai et al. 2022 ("Scaling Vision Transformers"). "test" is a tiny model for unit tests and "XS" is sized for the 8 x 8
digits, where it reaches >= 95% test accuracy in a couple of minutes on a 2-core CPU.
"""

import dataclasses

from posattn.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ViTShape:
    """Shape of a ViT encoder: token width D, number of blocks, heads per block, MLP hidden size."""

    width: int
    depth: int
    num_heads: int
    mlp_dim: int


VIT_SHAPES = {
    "test": ViTShape(width=32, depth=2, num_heads=2, mlp_dim=64),
    "XS": ViTShape(width=64, depth=4, num_heads=4, mlp_dim=128),
    "Ti": ViTShape(width=192, depth=12, num_heads=3, mlp_dim=768),
    "S": ViTShape(width=384, depth=12, num_heads=6, mlp_dim=1536),
    "B": ViTShape(width=768, depth=12, num_heads=12, mlp_dim=3072),
    "L": ViTShape(width=1024, depth=24, num_heads=16, mlp_dim=4096),
    "H": ViTShape(width=1280, depth=32, num_heads=16, mlp_dim=5120),
    "g": ViTShape(width=1408, depth=40, num_heads=16, mlp_dim=6144),
}

# The variants the configs and papers use; any known family with any patch size also parses.
NAMED_VARIANTS = ("test/2", "XS/2", "Ti/4", "S/4", "Ti/16", "S/16", "B/16", "L/16", "H/14", "g/14")


def parse_variant(variant: str) -> tuple[ViTShape, int]:
    """ "Ti/16" -> (ViTShape of Ti, 16). Raises ConfigError for an unknown family or a bad patch size."""
    family, sep, patch = str(variant).partition("/")
    if not sep or family not in VIT_SHAPES or not patch.isdigit() or int(patch) < 1:
        raise ConfigError(
            f"unknown ViT variant {variant!r}: use '<family>/<patch size>' with family in "
            f"{sorted(VIT_SHAPES)}, e.g. one of {', '.join(NAMED_VARIANTS)}"
        )
    return VIT_SHAPES[family], int(patch)


SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(ViTShape))


def override_shape(shape: ViTShape, **given: int) -> ViTShape:
    """`shape` with every field of `given` (width, depth, num_heads, mlp_dim) that is not 0 replaced:
    0 keeps the variant's value, as `model.patch_size = 0` keeps its patch. A negative or non-integer
    value is a ConfigError; whether the result is a valid ViT (heads dividing the width) is the ViT's
    own check."""
    for name, value in given.items():
        if name not in SHAPE_FIELDS:
            raise ConfigError(f"unknown ViT shape field {name!r}: use {', '.join(SHAPE_FIELDS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"model.{name} must be an integer >= 0 (0 = the variant's), got {value!r}"
            )
    return dataclasses.replace(shape, **{name: value for name, value in given.items() if value})
