"""How many heads a timm ViT checkpoint has: not in its state dict, and a wrong count gives wrong
logits silently, so `posattn.vision.timm_import.load` reads it where it is known (`heads_of`): the
.safetensors metadata, a Hugging Face hub config.json beside the file, or the timm model name
(`VIT_HEADS`, timm's registry, where the head dimension is not always 64).
"""

import json
import os

from posattn.errors import ConfigError

# timm's registered ViTs by head count, the names of timm/models/vision_transformer.py and deit.py with
# their num_heads (read from timm's source at commit aa4b5850, 2026-08; its test_vit* left out)
VIT_HEADS = {  # num_heads -> timm's registered ViT names
    3: (
        "deit_tiny_distilled_patch16_224 deit_tiny_patch16_224 vit_tiny_patch16_224 vit_tiny_patch16_384"
    ).split(),
    4: (
        "vit_dpwee_patch16_reg1_gap_256 vit_dwee_patch16_reg1_gap_256 vit_pwee_patch16_reg1_gap_256 "
        "vit_wee_patch16_reg1_gap_256 vit_xsmall_patch16_clip_224"
    ).split(),
    5: (
        "vit_dlittle_patch16_reg1_gap_256 vit_little_patch16_reg1_gap_256 vit_little_patch16_reg4_gap_256"
    ).split(),
    6: (
        "deit3_small_patch16_224 deit3_small_patch16_384 deit_small_distilled_patch16_224 "
        "deit_small_patch16_224 flexivit_small vit_small_patch14_dinov2 vit_small_patch14_reg4_dinov2 "
        "vit_small_patch16_18x2_224 vit_small_patch16_224 vit_small_patch16_36x1_224 vit_small_patch16_384 "
        "vit_small_patch32_224 vit_small_patch32_384 vit_small_patch8_224"
    ).split(),
    8: (
        "aimv2_large_patch14_224 aimv2_large_patch14_336 aimv2_large_patch14_448 deit3_medium_patch16_224 "
        "vit_medium_patch16_clip_224 vit_medium_patch16_gap_240 vit_medium_patch16_gap_256 "
        "vit_medium_patch16_gap_384 vit_medium_patch16_reg1_gap_256 vit_medium_patch16_reg4_gap_256 "
        "vit_medium_patch32_clip_224 vit_mediumd_patch16_reg4_gap_256 vit_mediumd_patch16_reg4_gap_384"
    ).split(),
    10: (
        "vit_betwixt_patch16_gap_256 vit_betwixt_patch16_reg1_gap_256 vit_betwixt_patch16_reg4_gap_256 "
        "vit_betwixt_patch16_reg4_gap_384 vit_betwixt_patch32_clip_224"
    ).split(),
    12: (
        "aimv2_huge_patch14_224 aimv2_huge_patch14_336 aimv2_huge_patch14_448 beit3_base_patch16_224 "
        "deit3_base_patch16_224 deit3_base_patch16_384 deit_base_distilled_patch16_224 "
        "deit_base_distilled_patch16_384 deit_base_patch16_224 deit_base_patch16_384 flexivit_base "
        "vit_base_patch14_dinov2 vit_base_patch14_reg1_tipsv2 vit_base_patch14_reg4_dinov2 "
        "vit_base_patch16_18x2_224 vit_base_patch16_224 vit_base_patch16_224_miil vit_base_patch16_384 "
        "vit_base_patch16_clip_224 vit_base_patch16_clip_384 vit_base_patch16_clip_quickgelu_224 "
        "vit_base_patch16_reg4_gap_256 vit_base_patch16_rpn_224 vit_base_patch16_siglip_224 "
        "vit_base_patch16_siglip_256 vit_base_patch16_siglip_384 vit_base_patch16_siglip_512 "
        "vit_base_patch16_siglip_gap_224 vit_base_patch16_siglip_gap_256 vit_base_patch16_siglip_gap_384 "
        "vit_base_patch16_siglip_gap_512 vit_base_patch16_xp_224 vit_base_patch32_224 vit_base_patch32_384 "
        "vit_base_patch32_clip_224 vit_base_patch32_clip_256 vit_base_patch32_clip_384 "
        "vit_base_patch32_clip_448 vit_base_patch32_clip_quickgelu_224 vit_base_patch32_siglip_256 "
        "vit_base_patch32_siglip_gap_256 vit_base_patch8_224"
    ).split(),
    13: (
        "vit_so150m2_patch16_reg1_gap_256 vit_so150m2_patch16_reg1_gap_384 vit_so150m2_patch16_reg1_gap_448"
    ).split(),
    14: (
        "vit_base_patch16_plus_240 vit_base_patch16_plus_clip_240 vit_base_patch32_plus_256 "
        "vit_so150m_patch16_reg4_gap_256 vit_so150m_patch16_reg4_gap_384 vit_so150m_patch16_reg4_map_256"
    ).split(),
    16: (
        "aimv2_1b_patch14_224 aimv2_1b_patch14_336 aimv2_1b_patch14_448 beit3_giant_patch14_224 "
        "beit3_giant_patch14_336 beit3_large_patch16_224 deit3_huge_patch14_224 deit3_large_patch16_224 "
        "deit3_large_patch16_384 eva_large_patch14_196 eva_large_patch14_336 flexivit_large "
        "vit_base_patch16_gap_224 vit_giant_patch14_224 vit_giant_patch14_clip_224 vit_giant_patch16_gap_224 "
        "vit_giantopt_patch16_siglip_256 vit_giantopt_patch16_siglip_384 vit_giantopt_patch16_siglip_gap_256 "
        "vit_giantopt_patch16_siglip_gap_384 vit_gigantic_patch14_224 vit_gigantic_patch14_clip_224 "
        "vit_gigantic_patch14_clip_378 vit_gigantic_patch14_clip_quickgelu_224 vit_huge_patch14_224 "
        "vit_huge_patch14_clip_224 vit_huge_patch14_clip_336 vit_huge_patch14_clip_378 "
        "vit_huge_patch14_clip_quickgelu_224 vit_huge_patch14_clip_quickgelu_378 vit_huge_patch14_gap_224 "
        "vit_huge_patch14_xp_224 vit_huge_patch16_gap_448 vit_intern300m_patch14_448 vit_large_patch14_224 "
        "vit_large_patch14_clip_224 vit_large_patch14_clip_336 vit_large_patch14_clip_quickgelu_224 "
        "vit_large_patch14_clip_quickgelu_336 vit_large_patch14_dinov2 vit_large_patch14_reg1_tipsv2 "
        "vit_large_patch14_reg4_dinov2 vit_large_patch14_xp_224 vit_large_patch16_224 vit_large_patch16_384 "
        "vit_large_patch16_siglip_256 vit_large_patch16_siglip_384 vit_large_patch16_siglip_512 "
        "vit_large_patch16_siglip_gap_256 vit_large_patch16_siglip_gap_384 vit_large_patch16_siglip_gap_512 "
        "vit_large_patch32_224 vit_large_patch32_384 vit_so400m_patch14_reg1_tipsv2 "
        "vit_so400m_patch14_siglip_224 vit_so400m_patch14_siglip_378 vit_so400m_patch14_siglip_384 "
        "vit_so400m_patch14_siglip_gap_224 vit_so400m_patch14_siglip_gap_378 "
        "vit_so400m_patch14_siglip_gap_384 vit_so400m_patch14_siglip_gap_448 "
        "vit_so400m_patch14_siglip_gap_896 vit_so400m_patch16_siglip_256 vit_so400m_patch16_siglip_384 "
        "vit_so400m_patch16_siglip_512 vit_so400m_patch16_siglip_gap_256 vit_so400m_patch16_siglip_gap_384 "
        "vit_so400m_patch16_siglip_gap_512"
    ).split(),
    24: (
        "aimv2_3b_patch14_224 aimv2_3b_patch14_336 aimv2_3b_patch14_448 vit_giant_patch14_dinov2 "
        "vit_giant_patch14_reg1_tipsv2 vit_giant_patch14_reg4_dinov2"
    ).split(),
}
HEADS_BY_NAME = {name: heads for heads, names in VIT_HEADS.items() for name in names}


def heads_of_name(name: str) -> int | None:
    """num_heads of a timm ViT name (a hub id "timm/NAME.TAG" or "NAME.TAG" as well), None if unknown."""
    arch = name.removeprefix("hf-hub:").removeprefix("hf_hub:").rsplit("/", 1)[-1].split(".", 1)[0]
    return HEADS_BY_NAME.get(arch)


def heads_of(path: str, model_name: str | None = None) -> dict[str, int]:
    """{where it was read: num_heads} of a ViT checkpoint file: `model_name`, the file's safetensors
    metadata ("num_heads", else "architecture") and a timm config.json beside it ("model_args"'s
    "num_heads", else "architecture"); names that are not timm ViTs `VIT_HEADS` knows give nothing
    (ConfigError for a `model_name` that is not)."""
    found = {}
    if model_name is not None:
        heads = heads_of_name(model_name)
        if heads is None:
            raise ConfigError(
                f"model_name={model_name!r} is not a timm ViT this knows (e.g. "
                "'vit_small_patch16_224'): give its num_heads instead"
            )
        found[f"model_name={model_name!r}"] = heads
    sources = []
    if path.endswith(".safetensors"):
        from safetensors import safe_open

        with safe_open(path, "np") as f:
            sources.append((f"the metadata of {path}", f.metadata() or {}))
    config_path = os.path.join(os.path.dirname(path), "config.json")
    if os.path.exists(config_path):
        with open(config_path) as f:
            config = json.load(f)
        if isinstance(config, dict) and "architecture" in config:  # timm's (transformers' has none)
            sources.append((config_path, {**config, **(config.get("model_args") or {})}))
    for where, meta in sources:
        if meta.get("num_heads") is not None:
            found[f"{where} (num_heads)"] = int(meta["num_heads"])
        elif heads_of_name(str(meta.get("architecture", ""))) is not None:
            arch = str(meta["architecture"])
            found[f"{where} (architecture {arch!r})"] = heads_of_name(arch)
    return found
