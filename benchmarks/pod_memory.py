r"""Memory per device of ViT-L/16 and ViT-H/14 training on ImageNet (224 px, 1,000 classes, global batch
4,096, the ViT paper's) on a TPU v4-128 slice (64 chips of 32 GiB) and on 8 x H100 (80 GiB), lever by
lever; writes the table into docs/distributed.md (issue 48, item 7).

    python -m benchmarks.pod_memory          # about 5 minutes on 2 CPU cores

Each row adds one lever to the row above it, starting from plain data parallelism (the peer, measured in
the same run): the state sharded over fsdp (ZeRO-3), bfloat16 compute, rematerialised blocks, and
gradient accumulation over as many micro-batches as it takes to fit. The first row that fits 90% of a
device's memory is the recipe docs/distributed.md gives.

- **Train state per device** (parameters and Adam's two moments, float32): exact, `jax.eval_shape` of
  the run's initial state with the shardings of `posattn.vision.sharding` on a mesh of that many
  simulated CPU devices (the mesh's shape is all that decides it).
- **Gradients per device**: the parameters' bytes at the state's sharding (XLA reduce-scatters them to
  the parameters' shards).
- **Activations per device**: what the step keeps for its backward pass, measured by XLA's buffer
  assignment (`memory_analysis().temp_size_in_bytes`) of the real train step compiled for one CPU device
  at micro-batches of 2 and 4 and depths 1 and 2 of the model's width: the bytes per example per block
  and per example outside the blocks are those differences, scaled to the model's depth and the
  micro-batch on a device. CPU's buffer assignment and fusions differ from a TPU's or a GPU's: an
  estimate to within tens of percent, which is what choosing a lever needs; fsdp's all-gathered weights
  of the block in flight (one block's parameters, under 2% of these models) are left out.
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
MICRO = (2, 4)  # the micro-batches compiled to measure activations


def config(variant: str, *, dtype="float32", remat="none", accumulate=1, mesh=(-1, 1, 1)):
    c = config_lib.base_config()
    c.dataset, c.image_size = "pod_memory", IMAGE
    c.model.variant, c.model.remat, c.compute_dtype = variant, remat, dtype
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


def temp_bytes(c, depth: int, micro: int) -> int:
    """XLA's temporary bytes of the train step of `c` at `depth` blocks on one device, batch `micro`."""
    width = parse_variant(c.model.variant)[0]
    c = config(c.model.variant, dtype=c.compute_dtype, remat=c.model.remat)
    c.model.depth, c.model.width = depth, width.width
    c.global_batch_size = c.eval_batch_size = micro
    setup, shapes = abstract_state(c, 1)
    hyper = jax.tree.map(np.asarray, train_step.step_hyperparameters(c))
    batch = {
        "image": jax.ShapeDtypeStruct((micro, IMAGE, IMAGE, 3), np.uint8),
        "label": jax.ShapeDtypeStruct((micro,), np.int32),
    }
    compiled = jax.jit(train_step.make_train_step(setup)).lower(shapes, batch, hyper).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def activation_model(c) -> tuple[float, float]:
    """(bytes per example outside the blocks, bytes per example per block) of `c`'s dtype and remat."""
    t = {(d, b): temp_bytes(c, d, b) for d in (1, 2) for b in MICRO}
    per_example = {d: (t[d, MICRO[1]] - t[d, MICRO[0]]) / (MICRO[1] - MICRO[0]) for d in (1, 2)}
    per_block = per_example[2] - per_example[1]
    return per_example[1] - per_block, per_block


def rows(variant: str, platform: str) -> list[dict]:
    devices, gib = PLATFORMS[platform]
    depth = parse_variant(variant)[0].depth
    budget = FIT * gib * 2**30
    steps = [
        ("data parallel (the peer)", dict(mesh=(-1, 1, 1))),
        ("+ fsdp", dict(mesh=(1, -1, 1))),
        ("+ bfloat16 compute", dict(mesh=(1, -1, 1), dtype="bfloat16")),
        ("+ remat per block", dict(mesh=(1, -1, 1), dtype="bfloat16", remat="block")),
    ]
    out, cache = [], {}
    for name, kw in steps:
        c = config(variant, **kw)
        state, params = state_bytes(c, devices)
        key = (c.compute_dtype, c.model.remat)
        if key not in cache:
            cache[key] = activation_model(c)
        outside, per_block = cache[key]
        per_example = outside + depth * per_block
        micro = GLOBAL_BATCH // devices
        acts = micro * per_example
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


def command(c, platform: str) -> str:
    flags_ = [
        f"--config.model.variant={c.model.variant}",
        f"--config.mesh.data={c.mesh.data}",
        f"--config.mesh.fsdp={c.mesh.fsdp}",
        f"--config.compute_dtype={c.compute_dtype}",
        f"--config.model.remat={c.model.remat}",
        f"--config.optimizer.accumulate_steps={c.optimizer.accumulate_steps}",
        f"--config.global_batch_size={GLOBAL_BATCH}",
    ]
    workdir = "gs://BUCKET/runs/in1k" if platform.startswith("TPU") else "/shared/runs/in1k"
    return (
        "python -m posattn.experiments.train_images --config=tpu_configs/imagenet.py "
        f"--workdir={workdir} " + " ".join(flags_)
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
    recipes = []
    for variant in VARIANTS:
        for platform, (devices, _) in PLATFORMS.items():
            table = rows(variant, platform)
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
                    f"device):\n\n  ```bash\n  {command(fit['config'], platform)}\n  ```"
                )
            )
    update_section(TITLE, "\n".join(lines + ["", *recipes]), FLAGS.docs)


if __name__ == "__main__":
    app.run(main)
