r"""Memory per device of ViT-L/16 and ViT-H/14 training on ImageNet (224 px, 1,000 classes, global batch
4,096, the ViT paper's) on a TPU v4-128 slice (64 chips of 32 GiB) and on 8 x H100 (80 GiB), lever by
lever; writes the table into docs/distributed.md (issue 48, item 7).

    python -m benchmarks.pod_memory          # a few minutes on 2 CPU cores (compiles only)

Each row adds one lever to the row above it, starting from plain data parallelism (the peer, measured in
the same run): the state sharded over fsdp (ZeRO-3), bfloat16 compute, rematerialised blocks, and
gradient accumulation over as many micro-batches as it takes to fit. The first row that fits 90% of a
device's memory is the recipe docs/distributed.md gives.

- **Train state per device** (parameters and Adam's two moments, float32): exact, `jax.eval_shape` of
  the run's initial state with the shardings of `posattn.vision.sharding` on a mesh of that many
  simulated CPU devices (the mesh's shape is all that decides it).
- **Gradients per device**: the parameters' bytes at the state's sharding (XLA reduce-scatters them to
  the parameters' shards).
- **Activations per device**: what the step keeps for its backward pass. Measured in float32 without
  remat by XLA's buffer assignment (`memory_analysis().temp_size_in_bytes`) of the real train step
  compiled for one CPU device at batches 8 and 16 and depths 2 and 4 of the model's width: the bytes per
  example per block and per example outside the blocks are those differences (what does not grow with
  the batch, gradients and workspace, drops out). The levers are then modelled, since the CPU cannot show
  them (it computes bfloat16 in float32, and its scheduler undoes remat outside a scan): bfloat16 halves
  the activations; a remat per block keeps each block's input (T x D) and, during the backward pass, one
  block's whole activations (Korthikanti et al. 2022); accumulation divides them by its micro-batches.
  An estimate to within tens of percent, which is what choosing a lever needs; fsdp's all-gathered
  weights of the block in flight (one block's parameters, under 2% of these models) are left out.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=64")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks.report import machine, update_section  # noqa: E402
from posattn.vision import checkpoint, optim, sharding, train_step  # noqa: E402
from posattn.vision import config as config_lib  # noqa: E402
from posattn.vision.data import arrays  # noqa: E402
from posattn.vision.models.variants import parse_variant  # noqa: E402
from posattn.vision.setup import resolve  # noqa: E402
from posattn.vision.state import init_state  # noqa: E402

DOC = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "distributed.md"
)
TITLE = "Memory per device of ViT-L/16 and ViT-H/14 on ImageNet (benchmarks/pod_memory.py)"
flags.DEFINE_string("docs", DOC, "the page to write the section into")
FLAGS = flags.FLAGS

GLOBAL_BATCH, IMAGE, CLASSES = 4096, 224, 1000
PLATFORMS = {  # name: (JAX devices, GiB of memory per device)
    "TPU v4-128": (64, 32),
    "8 x H100": (8, 80),
}
VARIANTS = ("L/16", "H/14")
FIT = 0.9  # of a device's memory, the rest for XLA's own buffers and fragmentation
MICRO = (8, 16)  # the batches compiled to measure activations (the CPU is linear from 8)
DEPTHS = (2, 4)


def config(variant: str, *, dtype="float32", remat="none", accumulate=1, mesh=(-1, 1, 1)):
    c = config_lib.base_config()
    c.dataset, c.image_size = "pod_memory", IMAGE
    c.model.variant, c.model.remat, c.compute_dtype = variant, remat, dtype
    # remat within nn.scan: XLA's CPU scheduler undoes a remat of the loop's blocks (docs/benchmarks.md,
    # "Memory levers"), so the scanned blocks are what the CPU can measure
    c.model.scan_layers = remat != "none"
    c.optimizer.accumulate_steps = accumulate
    c.global_batch_size = c.eval_batch_size = GLOBAL_BATCH
    c.mesh.data, c.mesh.fsdp, c.mesh.model = mesh
    return c


def fake_dataset():
    """Four images of ImageNet's shape: the programs' shapes are all that the memory depends on."""
    images = np.zeros((4, IMAGE, IMAGE, 3), np.uint8)
    labels = np.arange(4) % CLASSES
    return arrays.from_arrays(
        images,
        labels,
        images,
        labels,
        num_classes=CLASSES,
        name="pod_memory",
        mean=(0.5,) * 3,
        std=(0.25,) * 3,
    )


def abstract_state(c, batch_shards: int):
    setup = resolve(c, batch_shards, fake_dataset())
    tx = optim.make_optimizer(c.optimizer, train_step.step_hyperparameters(c))
    return setup, jax.eval_shape(lambda: init_state(setup.model, setup.image_shape, 0, tx))


def state_bytes(c, devices: int) -> tuple[int, int]:
    """(train state, parameters) bytes per device of `c` on a mesh of `devices` (exact)."""
    mesh = sharding.make_mesh(c.mesh, jax.devices()[:devices])
    _, shapes = abstract_state(c, sharding.batch_shards(mesh))
    placed = checkpoint.abstract_like(shapes, sharding.state_shardings(shapes, mesh))
    return sharding.bytes_per_device(placed), sharding.bytes_per_device(placed["params"])


def temp_bytes(variant: str, depth: int, micro: int) -> int:
    """XLA's temporary bytes of the float32 train step of `variant` cut to `depth` blocks, on one
    device at batch `micro` (compiled, not run)."""
    c = config(variant)
    c.model.depth, c.model.width = depth, parse_variant(variant)[0].width
    c.global_batch_size = c.eval_batch_size = micro
    setup, shapes = abstract_state(c, 1)
    hyper = jax.tree.map(np.asarray, train_step.step_hyperparameters(c))
    batch = {
        "image": jax.ShapeDtypeStruct((micro, IMAGE, IMAGE, 3), np.uint8),
        "label": jax.ShapeDtypeStruct((micro,), np.int32),
    }
    compiled = jax.jit(train_step.make_train_step(setup)).lower(shapes, batch, hyper).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def measured_activations(variant: str) -> tuple[float, float]:
    """(float32 bytes per example outside the blocks, per block), from `temp_bytes` at depths 2 and 4 and
    batches 8 and 16: the differences leave out what does not grow with the batch (gradients,
    workspace). Below a batch of 8 the CPU's buffer assignment is not linear in the batch."""
    t = {(d, b): temp_bytes(variant, d, b) for d in DEPTHS for b in MICRO}
    per_example = {d: (t[d, MICRO[1]] - t[d, MICRO[0]]) / (MICRO[1] - MICRO[0]) for d in DEPTHS}
    per_block = (per_example[DEPTHS[1]] - per_example[DEPTHS[0]]) / (DEPTHS[1] - DEPTHS[0])
    return per_example[DEPTHS[0]] - DEPTHS[0] * per_block, per_block


def activations_per_example(c, measured: tuple[float, float]) -> float:
    """Bytes kept per example by `c`'s step, from the float32 measurement: activations are stored in the
    compute dtype (bfloat16 halves them; the CPU cannot show it, it computes bfloat16 in float32); a
    remat per block keeps each block's input (T x D) and, during the backward pass, one block's whole
    activations (the model of Korthikanti et al. 2022, "Reducing activation recomputation")."""
    outside, per_block = measured
    shape, patch = parse_variant(c.model.variant)
    scale = 0.5 if c.compute_dtype == "bfloat16" else 1.0
    if c.model.remat == "none":
        return scale * (outside + shape.depth * per_block)
    tokens = (IMAGE // patch) ** 2
    return scale * (outside + shape.depth * tokens * shape.width * 4 + per_block)


def rows(variant: str, platform: str, measured: tuple[float, float]) -> list[dict]:
    devices, gib = PLATFORMS[platform]
    budget = FIT * gib * 2**30
    steps = [
        ("data parallel (the peer)", dict(mesh=(-1, 1, 1))),
        ("+ fsdp", dict(mesh=(1, -1, 1))),
        ("+ bfloat16 compute", dict(mesh=(1, -1, 1), dtype="bfloat16")),
        ("+ scan_layers, remat per block", dict(mesh=(1, -1, 1), dtype="bfloat16", remat="block")),
    ]
    out = []
    for name, kw in steps:
        c = config(variant, **kw)
        state, params = state_bytes(c, devices)
        micro = GLOBAL_BATCH // devices
        acts = micro * activations_per_example(c, measured)
        out.append(dict(lever=name, config=c, state=state, grads=params, acts=acts, micro=micro))
    last = out[-1]
    if (
        last["state"] + last["grads"] + last["acts"] > budget
    ):  # accumulate: the fewest micro-batches
        room = budget - last["state"] - last["grads"]
        k = next(
            k
            for k in (2**i for i in range(1, 13))
            if (GLOBAL_BATCH // devices) % k == 0 and last["acts"] / k <= room
        )
        c = config(variant, mesh=(1, -1, 1), dtype="bfloat16", remat="block", accumulate=k)
        out.append(
            dict(
                last,
                lever=f"+ accumulate {k} micro-batches",
                config=c,
                acts=last["acts"] / k,
                micro=last["micro"] // k,
            )
        )
    for r in out:
        r["total"] = r["state"] + r["grads"] + r["acts"]
        r["fits"] = r["total"] <= budget
    return out


def command(c) -> str:
    flags_ = [
        f"--config.model.variant={c.model.variant}",
        f"--config.mesh.data={c.mesh.data}",
        f"--config.mesh.fsdp={c.mesh.fsdp}",
        f"--config.compute_dtype={c.compute_dtype}",
        f"--config.model.remat={c.model.remat}",
        f"--config.model.scan_layers={c.model.scan_layers}",
        f"--config.optimizer.accumulate_steps={c.optimizer.accumulate_steps}",
        f"--config.global_batch_size={GLOBAL_BATCH}",
    ]
    # a file system every host mounts (or gs://BUCKET/runs/in1k: docs/distributed.md, Storage)
    return (
        "python -m posattn.experiments.train_images --config=tpu_configs/imagenet.py "
        "--workdir=/mnt/shared/runs/in1k " + " ".join(flags_)
    )


def main(_):
    gib = lambda b: f"{b / 2**30:,.2f}"
    lines = [
        f"Machine: {machine()}. Global batch {GLOBAL_BATCH}, 224 px, 1,000 classes; a device fits when the "
        f"total is at most {FIT:.0%} of its memory. Method: benchmarks/pod_memory.py's docstring.",
        "",
        "| model | platform | lever | mesh (data, fsdp, model) | images per device and micro-batch | "
        "train state (GiB) | gradients (GiB) | activations (GiB) | total (GiB) | fits |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    recipes, lines_measured = [], []
    for variant in VARIANTS:
        measured = measured_activations(variant)
        lines_measured.append(
            f"ViT-{variant}: {measured[1] / 2**20:,.1f} MiB per example per block, "
            f"{measured[0] / 2**20:,.1f} MiB outside the blocks (float32, XLA on the CPU)"
        )
        for platform, (devices, _) in PLATFORMS.items():
            table = rows(variant, platform, measured)
            for r in table:
                shape = sharding.mesh_shape(r["config"].mesh, devices)
                lines.append(
                    f"| ViT-{variant} | {platform} | {r['lever']} | {shape} | {r['micro']} | "
                    f"{gib(r['state'])} | {gib(r['grads'])} | {gib(r['acts'])} | {gib(r['total'])} | "
                    f"{'yes' if r['fits'] else 'no'} |"
                )
                print(lines[-1], flush=True)
            fit = next((r for r in table if r["fits"]), None)
            recipes.append(
                f"- ViT-{variant} on {platform}: "
                + (
                    "nothing here fits"
                    if fit is None
                    else f"{fit['lever'].removeprefix('+ ')} makes it fit ({gib(fit['total'])} GiB per "
                    f"device):\n\n  ```bash\n  {command(fit['config'])}\n  ```"
                )
            )
    notes = ["", "Measured activations (the step's temporaries that grow with the batch):", ""]
    notes += [f"- {m}" for m in lines_measured]
    update_section(TITLE, "\n".join(lines + notes + ["", *recipes]), FLAGS.docs)


if __name__ == "__main__":
    app.run(main)
