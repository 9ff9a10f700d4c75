"""Make the timm fixture of tests/vision/test_timm_import.py: a tiny timm ViT and ResNet with random
weights, an input batch and timm's own logits on it, so that the importer (posattn.vision.timm_import)
is checked against timm's forward with no torch and no download in the test environment.

Run once, in an environment with the `[bench]` extra (torch, timm; made with timm 1.0.31: timm 0.9.2's
ResNet has no `channels` argument) and safetensors; it does not import posattn:
    python benchmarks/timm_fixture.py  # writes tests/vision/fixtures/timm_{vit,resnet}.safetensors, timm_forward.npz

Every tensor is redrawn (weights ~ N(0, 1 / fan_in), norm scales 1 + N(0, 0.2^2), biases and running
means N(0, 0.2^2), running variances U(0.5, 2)) so that each one reaches the logits and a mapping slip
shows; the ViT's P is a 2-D sin-cos embedding of the patch grid (MoCo v3) plus noise, so that its
similarity falls with distance on the grid (a property the tests read back after the import).
"""

import math
import pathlib

import numpy as np
import torch
from safetensors.torch import save_file
from timm.models.resnet import BasicBlock, ResNet
from timm.models.vision_transformer import VisionTransformer

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "vision" / "fixtures"
CLASSES = 5


def sincos_2d(side: int, width: int) -> torch.Tensor:
    """(side * side, width) 2-D sin-cos embedding of a side x side grid, rows row-major (MoCo v3)."""
    y, x = torch.meshgrid(
        torch.arange(side, dtype=torch.float32),
        torch.arange(side, dtype=torch.float32),
        indexing="ij",
    )
    omega = 1.0 / 10000 ** (torch.arange(width // 4, dtype=torch.float32) / (width // 4))
    out_y, out_x = y.reshape(-1, 1) * omega, x.reshape(-1, 1) * omega
    return torch.cat([out_x.sin(), out_x.cos(), out_y.sin(), out_y.cos()], dim=1)


@torch.no_grad()
def redraw(model: torch.nn.Module, generator: torch.Generator) -> None:
    for name, t in model.state_dict().items():
        if not t.is_floating_point():
            continue
        noise = torch.randn(t.shape, generator=generator)
        if name.endswith("running_var"):
            t.copy_(0.5 + 1.5 * torch.rand(t.shape, generator=generator))
        elif t.ndim >= 2 and name.endswith("weight"):
            t.copy_(noise / math.sqrt(t[0].numel()))
        elif name.endswith("weight"):  # a norm's scale
            t.copy_(1 + 0.2 * noise)
        else:  # biases, running means, class token
            t.copy_(0.2 * noise)


def main():
    generator = torch.Generator().manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    vit = VisionTransformer(
        img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, num_classes=CLASSES
    )
    # the stem of timm's ResNet is 64 channels wide (stem_type ''), and posattn's first stage as wide as its
    # stem: the later stages are kept narrow to keep the fixture small
    resnet = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=CLASSES, channels=(64, 8, 8, 8))
    forward = {}
    for name, model, side in (("vit", vit, 16), ("resnet", resnet, 32)):
        redraw(model, generator)
        if name == "vit":
            with torch.no_grad():
                model.pos_embed[0, 1:] = sincos_2d(4, 32) + 0.1 * torch.randn(
                    (16, 32), generator=generator
                )
        model.eval()
        images = torch.randn((4, 3, side, side), generator=generator)
        with torch.no_grad():
            logits = model(images)
        # the ViT's head count in the file's metadata, where posattn.vision.timm_import.load reads it (a
        # state dict does not hold it, and the fixture's ViT is no registered timm name)
        metadata = {"num_heads": str(model.blocks[0].attn.num_heads)} if name == "vit" else None
        tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(tensors, OUT / f"timm_{name}.safetensors", metadata=metadata)
        forward[f"{name}_images_BxHxWxC"] = images.permute(0, 2, 3, 1).numpy()
        forward[f"{name}_logits_BxK"] = logits.numpy()
    np.savez_compressed(OUT / "timm_forward.npz", **forward)
    print(
        f"wrote {OUT}: "
        + ", ".join(f"{p.name} {p.stat().st_size // 1024} KiB" for p in sorted(OUT.iterdir()))
    )


if __name__ == "__main__":
    main()
