r"""Training throughput of vanilla vs positional attention in ViTs of the same shape (JSL22 Definition 3.2; docs/decisions.md, Models).

    python -m benchmarks.vit_throughput                      # writes its section of docs/benchmarks.md
    python -m benchmarks.vit_throughput --batch_cifar=512 --batch_imagenet=256 --steps=20 \
        --dtype=bfloat16                                     # on a GPU

Shapes: CIFAR ViT-Ti/4 (32 x 32 images, 64 tokens, 10 classes) and ImageNet ViT-Ti/16 (224 x 224, 196
tokens, 1000 classes): depth 12, width 192, 3 heads, MLP 768. One training step = forward, backward and
the AdamW update of `posattn.vision.optim`, jitted with the state donated, on a fixed random batch.
The two variants' compiled steps run alternately (vanilla, positional, vanilla, ...), each step timed
to `block_until_ready`, and the median is reported: on a shared machine a load change then hits both
variants alike instead of biasing the ratio. Peak memory: XLA's buffer assignment for the compiled step
(arguments + outputs + temporaries - aliased donations). FLOPs per step are XLA's cost analysis;
model-FLOPs utilisation (bf16 runs) needs a peak FLOP rate, known for the accelerators in
`PEAK_TFLOPS`.
"""
import functools
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import app, flags

from benchmarks.report import machine, update_section
from posattn.vision import losses, models, optim

flags.DEFINE_integer("batch_cifar", 32, "Batch of the CIFAR ViT-Ti/4 shape.")
flags.DEFINE_integer("batch_imagenet", 4, "Batch of the ImageNet ViT-Ti/16 shape.")
flags.DEFINE_integer("steps", 8, "Timed steps per variant (after one warm-up step).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype.")
flags.DEFINE_integer("flops_batch", 256, "Batch at which XLA's FLOP ratio is also given (no run).")
flags.DEFINE_bool("write", True, "Write the section of docs/benchmarks.md.")
FLAGS = flags.FLAGS

SHAPES = {  # name -> (variant, image side, classes, batch flag)
    "CIFAR ViT-Ti/4": ("Ti/4", 32, 10, "batch_cifar"),
    "ImageNet ViT-Ti/16": ("Ti/16", 224, 1000, "batch_imagenet"),
}
# Dense bf16 peak TFLOP/s of the accelerators whose device_kind names them.
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "TPU v4": 275.0, "TPU v5": 197.0}


def make_step(variant: str, attention: str, side: int, classes: int, batch: int, dtype):
    """(compiled step, state, batch): a jitted AdamW training step of one ViT on random data."""
    cfg = ml_collections.ConfigDict({"name": "vit", "variant": variant, "attention": attention})
    model = models.create_model(cfg, num_classes=classes, image_size=side, channels=3, dtype=dtype)
    opt_cfg = ml_collections.ConfigDict({"lr": 1e-3, "weight_decay": 0.05, "warmup_steps": 10, "b1": 0.9,
                                         "b2": 0.999, "grad_clip": 1.0})
    tx = optim.make_optimizer(opt_cfg, optim.hyperparameters(opt_cfg, total_steps=1000))
    key_x, key_y, key_p = jax.random.split(jax.random.key(0), 3)
    images = jax.random.normal(key_x, (batch, side, side, 3), jnp.float32)
    labels = jax.nn.one_hot(jax.random.randint(key_y, (batch,), 0, classes), classes)
    params = jax.jit(lambda: model.init(key_p, images[:1])["params"])()
    state = (params, jax.jit(tx.init)(params))

    def step(state, images, labels):
        params, opt_state = state

        loss_fn = functools.partial(losses.classification_loss, model)  # the image trainer's loss
        (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, {}, images, labels, None, True)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    t0 = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=(0,)).lower(state, images, labels).compile()
    return compiled, state, (images, labels), time.perf_counter() - t0


def training_flops(variant: str, attention: str, side: int, classes: int, batch: int) -> float:
    """XLA's FLOP count of forward + backward at `batch`, from the lowered step (nothing runs)."""
    cfg = ml_collections.ConfigDict({"name": "vit", "variant": variant, "attention": attention})
    model = models.create_model(cfg, num_classes=classes, image_size=side, channels=3)
    images = jax.ShapeDtypeStruct((batch, side, side, 3), jnp.float32)
    labels = jax.ShapeDtypeStruct((batch, classes), jnp.float32)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, side, side, 3)))["params"])

    def loss_fn(p, x, y):
        return optax.softmax_cross_entropy(model.apply({"params": p}, x, train=True), y).mean()

    cost = jax.jit(jax.grad(loss_fn)).lower(params, images, labels).cost_analysis()
    return float((cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"])


def _peak_bytes(compiled) -> float:
    """XLA's buffer assignment for the step: arguments + outputs + temporaries - donated aliases. Unlike
    a device's running peak (which one process cannot reset between the two variants), it is per
    variant and the same on every backend."""
    m = compiled.memory_analysis()
    return float(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                 - m.alias_size_in_bytes)


def _flops(compiled) -> float:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost.get("flops", float("nan")))


def measure(name: str, batch: int, dtype) -> dict:
    """Both variants of one shape, their steps interleaved; per variant the median step time."""
    variant, side, classes, _ = SHAPES[name]
    runs = {}
    for attention in ("vanilla", "positional"):
        compiled, state, data, compile_s = make_step(variant, attention, side, classes, batch, dtype)
        state, loss = compiled(state, *data)  # warm-up
        jax.block_until_ready(loss)
        runs[attention] = {"compiled": compiled, "state": state, "data": data, "times": [],
                           "compile_s": compile_s, "flops": _flops(compiled)}
        runs[attention]["peak"] = _peak_bytes(compiled)
    for _ in range(FLAGS.steps):
        for r in runs.values():
            t0 = time.perf_counter()
            r["state"], loss = r["compiled"](r["state"], *r["data"])
            jax.block_until_ready(loss)
            r["times"].append(time.perf_counter() - t0)
    out = {}
    for attention, r in runs.items():
        step_s = float(np.median(r["times"]))
        out[attention] = {"step_ms": 1e3 * step_s, "images_per_s": batch / step_s, "peak_mb": r["peak"] / 2**20,
                          "gflops": r["flops"] / 1e9,
                          "compile_s": r["compile_s"], "mfu": _mfu(r["flops"], step_s, dtype)}
    return out


def _mfu(flops: float, step_s: float, dtype):
    """Model-FLOPs utilisation against the dense bf16 peak, so only for bf16 runs."""
    kind = jax.devices()[0].device_kind
    if dtype != jnp.bfloat16:
        return None
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in kind), None)
    return None if peak is None else flops / step_s / (peak * 1e12)


def main(argv):
    del argv
    dtype = jnp.dtype(FLAGS.dtype)
    rows, ratios = [], []
    for name in SHAPES:
        batch = getattr(FLAGS, SHAPES[name][3])
        r = measure(name, batch, dtype)
        v, p = r["vanilla"], r["positional"]
        ratio = p["images_per_s"] / v["images_per_s"]
        variant, side, classes, _ = SHAPES[name]
        big = [training_flops(variant, a, side, classes, FLAGS.flops_batch) for a in ("vanilla", "positional")]
        ratios.append(f"{name}: {ratio:.2f}x measured, {v['gflops'] / p['gflops']:.2f}x by XLA's FLOP count "
                      f"of the measured step, {big[0] / big[1]:.2f}x by the FLOP count at batch "
                      f"{FLAGS.flops_batch}")
        for attention, m in r.items():
            mfu = "n/a" if m["mfu"] is None else f"{100 * m['mfu']:.1f}%"
            row = (f"| {name} | {batch} | {attention} | {m['images_per_s']:.1f} | {m['step_ms']:.1f} | "
                   f"{m['peak_mb']:.0f} | {m['gflops']:.1f} | {mfu} |")
            print(row, flush=True)
            rows.append(row)
        print(ratios[-1], flush=True)
    body = "\n".join([
        f"Training step (forward, backward, AdamW) of ViTs with the same shape, {FLAGS.dtype}, median of "
        f"{FLAGS.steps} interleaved steps per variant after one warm-up. Machine: {machine()}.", "",
        f"Command: `python -m benchmarks.vit_throughput --batch_cifar={FLAGS.batch_cifar} "
        f"--batch_imagenet={FLAGS.batch_imagenet} --steps={FLAGS.steps} --dtype={FLAGS.dtype} "
        f"--flops_batch={FLAGS.flops_batch}`", "",
        "| shape | batch | attention | images/s | step (ms) | peak memory, XLA (MiB) | GFLOP/step | MFU |",
        "|---|---|---|---|---|---|---|---|", *rows, "",
        "Throughput ratio positional / vanilla: " + "; ".join(ratios) + "."])
    if FLAGS.write:
        update_section("Image regime: ViT training throughput, vanilla vs positional attention, "
                       f"{FLAGS.dtype} (benchmarks/vit_throughput.py)", body)


if __name__ == "__main__":
    app.run(main)
