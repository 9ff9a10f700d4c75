"""Named ViT variants: "<family>/<patch size>", e.g. "Ti/16" = ViT-Ti with 16 x 16 patches.

Widths, depths, heads and MLP sizes of Ti, S and B are those of the ViT paper (Dosovitskiy et al. 2021)
and DeiT (Touvron et al. 2021). "test" is a tiny model for unit tests and "XS" is sized for the 8 x 8
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
}

# The variants the configs and papers use; any known family with any patch size also parses.
NAMED_VARIANTS = ("test/2", "XS/2", "Ti/4", "S/4", "Ti/16", "S/16", "B/16")


def parse_variant(variant: str) -> tuple[ViTShape, int]:
    """"Ti/16" -> (ViTShape of Ti, 16). Raises ConfigError for an unknown family or a bad patch size."""
    family, sep, patch = str(variant).partition("/")
    if not sep or family not in VIT_SHAPES or not patch.isdigit() or int(patch) < 1:
        raise ConfigError(
            f"unknown ViT variant {variant!r}: use '<family>/<patch size>' with family in "
            f"{sorted(VIT_SHAPES)}, e.g. one of {', '.join(NAMED_VARIANTS)}"
        )
    return VIT_SHAPES[family], int(patch)
