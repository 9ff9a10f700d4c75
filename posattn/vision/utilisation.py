"""How a run uses its devices: model-FLOPs utilisation (MFU) against the device's peak, and the device
memory in use, for the trainer's log lines and `benchmarks/`.

MFU = the model's matmul FLOPs per step (`models.flops.training_flops`, PaLM's convention) / the step's
seconds / (the dense bfloat16 peak of one device x the devices). It is given for bfloat16 runs only, on
the devices whose peak is known (`PEAK_TFLOPS_TPU`, `PEAK_TFLOPS_GPU`): a float32 run's matmuls do not
run at that peak, and a CPU has no published one.
"""

import jax
import jax.numpy as jnp

from posattn.vision.models import flops
from posattn.vision.models.vit import ViT

# Dense bf16 peak TFLOP/s by device_kind. A TPU's kind is matched whole ("TPU v5" is v5p, "TPU v5 lite"
# v5e); a GPU's by the first name in this order that it contains, so that an H100 PCIe card is not
# given the SXM card's peak. A card without a peak here (H100 NVL) gets no MFU rather than another's.
PEAK_TFLOPS_TPU = {"TPU v4": 275.0, "TPU v5 lite": 197.0, "TPU v5": 459.0, "TPU v6 lite": 918.0}
PEAK_TFLOPS_GPU = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", None),
    ("H100", 989.0),
    ("H200", 989.0),
    ("A100", 312.0),
)


def peak_flops(device_kind: str) -> float | None:
    """Dense bfloat16 peak FLOP/s of one device of `device_kind` (`jax.Device.device_kind`), None if
    not known."""
    peak = PEAK_TFLOPS_TPU.get(
        device_kind, next((v for k, v in PEAK_TFLOPS_GPU if k in device_kind), None)
    )
    return None if peak is None else peak * 1e12


def mfu(step_flops: float, step_seconds: float, devices, dtype) -> float | None:
    """Model-FLOPs utilisation of a step of `step_flops` taking `step_seconds` on `devices`; None for a
    non-bfloat16 `dtype` or a device without a known peak (module docstring)."""
    devices = list(devices)
    peak = peak_flops(devices[0].device_kind)
    if dtype != jnp.bfloat16 or peak is None or not step_seconds > 0:
        return None
    return step_flops / step_seconds / (peak * len(devices))


def training_step_flops(model, global_batch_size: int) -> float | None:
    """Matmul FLOPs of one training step of `model` on a global batch, None for a model without an
    analytic count (only the ViT has one, `models.flops`)."""
    if not isinstance(model, ViT) or model.attention not in flops.ATTENTION_KINDS:
        return None
    return flops.training_flops(model, global_batch_size)


def memory_in_use(devices) -> int | None:
    """The most bytes in use on any of this process's `devices`, as the backend reports them
    (`jax.Device.memory_stats`); None where it reports none (a CPU)."""
    used = []
    for device in devices:
        if device.process_index != jax.process_index():
            continue
        stats = device.memory_stats() or {}
        if "bytes_in_use" in stats:
            used.append(stats["bytes_in_use"])
    return max(used) if used else None
