r"""What each memory lever of the image trainer does to the compiled train step: XLA's memory analysis
(`jax.jit(step).lower(...).compile().memory_analysis()`) of `train_step.make_train_step` for one ViT,
with each lever on and off. Compile only: nothing runs, the state is `jax.eval_shape`'s.

    python -m benchmarks.memory_levers                  # ViT-B/16, 224 px, batch 64; writes its section
    python -m benchmarks.memory_levers --variant=Ti/16  # another shape (the section says which)

The levers (issue 48 item 4): model.remat ("block" or a `jax.checkpoint_policies` name),
model.scan_layers, optimizer.accumulate_steps and optimizer.mu_dtype. The step is the trainer's own
(augmentation, loss, AdamW with clipping), jitted as `posattn.vision.train` jits it (the state donated),
on one device of this machine, float32, for 1,000 classes. "temp" is what the step allocates beyond
its arguments and outputs (the activations kept for the backward pass, gradients, workspace); "peak"
is arguments + outputs - donated aliases + temp, the device memory the step needs while it runs.
"""

import time

import jax
import ml_collections
import numpy as np
from absl import app, flags

from benchmarks.report import machine, update_section
from posattn.vision import config as config_lib
from posattn.vision import optim, train_step
from posattn.vision.data import arrays
from posattn.vision.setup import resolve
from posattn.vision.state import init_state

flags.DEFINE_string("variant", "B/16", "ViT variant.")
flags.DEFINE_integer("side", 224, "Image side in pixels.")
flags.DEFINE_integer("batch", 64, "Global batch of the step.")
flags.DEFINE_integer("classes", 1000, "Classes of the head.")
flags.DEFINE_bool("write", True, "Write the section of docs/benchmarks.md.")
FLAGS = flags.FLAGS

# (row label, config overrides "section.field": value); the first row is today's default
LEVERS = [
    ("none (default)", {}),
    ("remat=block", {"model.remat": "block"}),
    (
        "remat=dots_with_no_batch_dims_saveable",
        {"model.remat": "dots_with_no_batch_dims_saveable"},
    ),
    ("scan_layers", {"model.scan_layers": True}),
    ("scan_layers + remat=block", {"model.scan_layers": True, "model.remat": "block"}),
    (
        "scan_layers + remat=dots_with_no_batch_dims_saveable",
        {"model.scan_layers": True, "model.remat": "dots_with_no_batch_dims_saveable"},
    ),
    ("accumulate_steps=4", {"optimizer.accumulate_steps": 4}),
    ("mu_dtype=bfloat16", {"optimizer.mu_dtype": "bfloat16"}),
    (
        "all: scan_layers + remat=block + accumulate_steps=4 + mu_dtype=bfloat16",
        {
            "model.scan_layers": True,
            "model.remat": "block",
            "optimizer.accumulate_steps": 4,
            "optimizer.mu_dtype": "bfloat16",
        },
    ),
]
MIB = 2**20


def bench_dataset(side: int, classes: int):
    """Two random images per split: the step needs the dataset's shape and classes, not its data."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, side, side, 3), dtype=np.uint8)
    labels = np.arange(2) % classes
    stats = dict(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    return arrays.from_arrays(
        images, labels, images, labels, num_classes=classes, name="bench", **stats
    )


def bench_config(overrides: dict) -> ml_collections.ConfigDict:
    c = config_lib.base_config()
    c.dataset, c.model.variant, c.global_batch_size = "bench", FLAGS.variant, FLAGS.batch
    for key, value in overrides.items():
        section, field = key.split(".")
        c[section][field] = value
    return c


def analyse(overrides: dict, dataset) -> dict:
    """The memory analysis of the compiled step of the config with `overrides`, in bytes, and the
    optimizer state's bytes."""
    c = bench_config(overrides)
    setup = resolve(c, 1, dataset)
    hyper = train_step.step_hyperparameters(c)
    tx = optim.make_optimizer(c.optimizer, hyper)
    state = jax.eval_shape(lambda: init_state(setup.model, setup.image_shape, c.seed, tx))
    batch = {
        "image": jax.ShapeDtypeStruct((c.global_batch_size, *setup.image_shape), np.uint8),
        "label": jax.ShapeDtypeStruct((c.global_batch_size,), np.int32),
    }
    t0 = time.perf_counter()
    step = jax.jit(train_step.make_train_step(setup), donate_argnums=(0,))
    m = step.lower(state, batch, hyper).compile().memory_analysis()
    nbytes = lambda tree: sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))
    return {
        "temp": m.temp_size_in_bytes,
        "arguments": m.argument_size_in_bytes,
        "outputs": m.output_size_in_bytes,
        "aliased": m.alias_size_in_bytes,
        "peak": m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes,
        "opt_state": nbytes(state["opt_state"]),
        "params": nbytes(state["params"]),
        "compile_s": time.perf_counter() - t0,
    }


def row(label: str, r: dict, base: dict) -> str:
    mib = lambda b: f"{b / MIB:,.0f}"
    return (
        f"| {label} | {mib(r['temp'])} | {r['temp'] / base['temp']:.2f} | {mib(r['opt_state'])} | "
        f"{mib(r['arguments'])} | {mib(r['outputs'])} | {mib(r['aliased'])} | {mib(r['peak'])} | "
        f"{r['peak'] / base['peak']:.2f} |"
    )


def section_body(rows: list[str], params_bytes: int, note: list[str]) -> str:
    command = "python -m benchmarks.memory_levers" + (
        ""
        if (FLAGS.variant, FLAGS.side, FLAGS.batch) == ("B/16", 224, 64)
        else f" --variant={FLAGS.variant} --side={FLAGS.side} --batch={FLAGS.batch}"
    )
    return "\n".join(
        [
            f"XLA's memory analysis of the compiled train step (`train_step.make_train_step`, jitted "
            f"with the state donated; compiled, not run) of ViT-{FLAGS.variant} (positional "
            f"attention) at {FLAGS.side} px, batch {FLAGS.batch}, {FLAGS.classes} classes, float32, "
            f"on one device, with each memory lever of issue 48 on. The parameters take "
            f"{params_bytes / MIB:,.0f} MiB. Sizes in MiB; temp: what the step allocates beyond its "
            "arguments "
            "and outputs (activations kept for the backward pass, gradients, workspace); peak: "
            "arguments + outputs - aliased (donated) + temp; x: against the default. Machine: "
            f"{machine()}.",
            "",
            f"Command: `{command}`",
            "",
            "| levers | temp | x | opt state | arguments | outputs | aliased | peak | x |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            *note,
        ]
    )


def notes(r: dict) -> list[str]:
    """What the table shows that its rows do not say, from the results by row label."""
    base, out = r["none (default)"], []
    if jax.default_backend() == "cpu" and r["remat=block"]["temp"] >= base["temp"]:
        out.append(
            "A remat of the loop's blocks leaves the temp as it is here: the compiled step holds the "
            "recomputation (more dot products) but none of the optimisation barriers that "
            "`jax.checkpoint` lowers, so XLA's CPU scheduler may recompute early and keep the "
            "recomputed activations as long as the saved ones. Inside the scan's loop the "
            "recomputation cannot move, and there remat takes effect on the CPU too. On GPU and TPU "
            "the loop's remat is expected to act as well (not measured here)."
        )
    scan = r["scan_layers"]
    if scan["temp"] > base["temp"]:
        out.append(
            f"scan_layers alone needs more temp here ({scan['temp'] / base['temp']:.2f} x the "
            "default's); it is meant to go with a remat, as MaxText's scan_layers goes with its "
            "remat_policy."
        )
    mu = r["mu_dtype=bfloat16"]
    out.append(
        f"mu_dtype=bfloat16 cuts the optimizer state by "
        f"{(base['opt_state'] - mu['opt_state']) / MIB:,.0f} MiB (half of mu's float32 bytes), and the step's peak by "
        f"{(base['peak'] - mu['peak']) / MIB:,.0f} MiB (its temp changes by "
        f"{(mu['temp'] - base['temp']) / MIB:+,.0f} MiB). accumulate_steps=4 keeps a quarter of the "
        "batch's activations at a time, plus one gradient-sized accumulator."
    )
    return [line for text in out for line in ("", text)]


def main(_):
    dataset = bench_dataset(FLAGS.side, FLAGS.classes)
    results, rows = [], []
    for label, overrides in LEVERS:
        results.append(analyse(overrides, dataset))
        rows.append(row(label, results[-1], results[0]))
        print(rows[-1], f"(compiled in {results[-1]['compile_s']:.0f} s)", flush=True)
    note = notes(dict(zip([label for label, _ in LEVERS], results)))
    if FLAGS.write:
        update_section(
            "Memory levers: XLA's memory analysis of the ViT train step (benchmarks/memory_levers.py)",
            section_body(rows, results[0]["params"], note),
        )


if __name__ == "__main__":
    app.run(main)
