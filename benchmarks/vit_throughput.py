r"""Training throughput of vanilla vs positional attention in ViTs of the same shape (JSL22 Definition 3.2; docs/decisions.md, Models), and timm's ViT of the same shape beside them.

    python -m benchmarks.vit_throughput                      # writes its section of docs/benchmarks.md
    python -m benchmarks.vit_throughput --dtype=bfloat16 --batch_cifar=512 --batch_imagenet=256 \
        --steps=20                                           # on an accelerator (issue 17, item 6)

Shapes: CIFAR ViT-Ti/4 (32 x 32 images, 64 tokens, 10 classes), ImageNet ViT-Ti/16 and ViT-S/16
(224 x 224, 196 tokens, 1000 classes); Ti: depth 12, width 192, 3 heads, MLP 768; S: width 384, 6 heads,
MLP 1536. One training step = forward, backward and the AdamW update of `posattn.vision.optim`, jitted
with the state donated, on a fixed random batch. The two variants' compiled steps run alternately
(vanilla, positional, vanilla, ...), each step timed to `block_until_ready`, and the median is reported:
on a shared machine a load change then hits both variants alike instead of biasing the ratio. Peak
memory: XLA's buffer assignment for the compiled step (arguments + outputs + temporaries - aliased
donations).

FLOPs: the analytic count of `posattn.vision.models.flops` (matmul FLOPs; one training step = 3
forward passes, forward + backward, the usual convention of MFU), with XLA's cost analysis of the
compiled step beside it as a check (XLA also counts elementwise work and the optimiser). Model-FLOPs
utilisation = analytic FLOPs / median step time / the dense bf16 peak of the device (`posattn.vision.utilisation.PEAK_TFLOPS_*`),
so only for bf16 runs on a device listed there.

The peer (`--peer=timm`, the default): `timm.models.vision_transformer.VisionTransformer` of the same
shape (no class token, average pooling after the final LayerNorm, as ours), trained with
`torch.optim.AdamW` (same lr, weight decay and gradient clipping at norm 1 as ours; fused on CUDA),
under `torch.autocast(..., dtype=torch.bfloat16)` in bf16 runs, the model wrapped in `torch.compile`,
on the same device as JAX (CUDA when torch sees it, else the CPU). Its images/s is the median of the
same number of timed steps after three warm-up steps; the first step (which compiles) is reported
apart. If `torch.compile` fails, the peer runs eager and the output says so. torch and timm are the
benchmark-only `bench` extra (`pip install -e ".[bench]"`); without them the peer's columns say "not
installed", and where torch would run on another platform than JAX (a CPU-only torch beside a GPU JAX,
or the reverse) "not comparable". With the peer on, JAX allocates GPU memory as it needs it instead of taking 75% of it at
start (XLA_PYTHON_CLIENT_PREALLOCATE=false), so that both frameworks fit on one card.

Goals (issue 17): positional attention at least 1.25x vanilla's images/s at the same shape; our vanilla
ViT at least as fast as timm + torch.compile; ViT-S/16 at 40% MFU or more. The section written says
met or missed for each, from the measured figures.
"""

import concurrent.futures
import functools
import os
import statistics
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import app, flags

from benchmarks import profile
from benchmarks.report import machine, update_section
from posattn.vision import losses, models, optim, utilisation
from posattn.vision.models import flops as vit_flops

flags.DEFINE_integer("batch_cifar", 32, "Batch of the CIFAR ViT-Ti/4 shape.")
flags.DEFINE_integer("batch_imagenet", 4, "Batch of the ImageNet ViT-Ti/16 and ViT-S/16 shapes.")
flags.DEFINE_integer("steps", 8, "Timed steps per variant (after the warm-up).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype.")
flags.DEFINE_integer("flops_batch", 256, "Batch at which XLA's FLOP ratio is also given (no run).")
flags.DEFINE_enum(
    "peer", "timm", ["timm", "none"], "Also time timm's ViT of the same shape (torch.compile)."
)
flags.DEFINE_list(
    "shapes", ["CIFAR ViT-Ti/4", "ImageNet ViT-Ti/16", "ImageNet ViT-S/16"], "Shapes to time."
)
flags.DEFINE_enum(
    "fused_attention",
    "none",
    ["none", "xla", "cudnn"],
    "Also time the vanilla ViT with `jax.nn.dot_product_attention` of this implementation "
    "(cudnn: the fused kernel of an NVIDIA GPU).",
)
flags.DEFINE_string(
    "profile_dir",
    "",
    "If set, trace the steps of the goals' MFU shape there and summarise "
    "the busiest operations of each variant in the section.",
)
flags.DEFINE_bool("write", True, "Write the section of docs/benchmarks.md.")
FLAGS = flags.FLAGS

SHAPES = {  # name -> (variant, image side, classes, batch flag)
    "CIFAR ViT-Ti/4": ("Ti/4", 32, 10, "batch_cifar"),
    "ImageNet ViT-Ti/16": ("Ti/16", 224, 1000, "batch_imagenet"),
    "ImageNet ViT-S/16": ("S/16", 224, 1000, "batch_imagenet"),
}
# Issue 17's goals.
GOAL_POSITIONAL_SPEEDUP = 1.25
GOAL_VANILLA_OVER_TIMM = 1.0
GOAL_MFU_SHAPE, GOAL_MFU = "ImageNet ViT-S/16", 0.40
# Steps traced per variant by --profile_dir.
PROFILE_CALLS = 3
# Untimed steps of the timm peer, the first of which compiles.
TIMM_WARMUP = 3
# The optimiser of both frameworks (ours: `posattn.vision.optim`).
OPT = {
    "lr": 1e-3,
    "weight_decay": 0.05,
    "warmup_steps": 10,
    "b1": 0.9,
    "b2": 0.999,
    "grad_clip": 1.0,
}

try:
    import timm.models.vision_transformer as timm_vit
    import torch
except ImportError:  # the bench extra is not installed
    torch = timm_vit = None


def make_model(
    variant: str, attention: str, side: int, classes: int, dtype=jnp.float32, options: str = ""
):
    cfg = ml_collections.ConfigDict(
        {"name": "vit", "variant": variant, "attention": attention, "attention_options": options}
    )
    return models.create_model(cfg, num_classes=classes, image_size=side, channels=3, dtype=dtype)


def variants() -> dict[str, tuple[str, str]]:
    """label -> (attention kind, its options) of the models timed at each shape."""
    out = {"vanilla": ("vanilla", ""), "positional": ("positional", "")}
    if FLAGS.fused_attention != "none":
        out[f"vanilla, {FLAGS.fused_attention}"] = (
            "vanilla",
            f"implementation='{FLAGS.fused_attention}'",
        )
    return out


def lower_step(
    variant: str, attention: str, side: int, classes: int, batch: int, dtype, options: str = ""
):
    """(lowered step, state, batch): a jitted AdamW training step of one ViT on random data, traced and
    lowered but not compiled (`make_step` compiles it; `measure` compiles the variants side by side)."""
    model = make_model(variant, attention, side, classes, dtype, options)
    opt_cfg = ml_collections.ConfigDict(OPT)
    tx = optim.make_optimizer(opt_cfg, optim.hyperparameters(opt_cfg, total_steps=1000))
    key_x, key_y, key_p = jax.random.split(jax.random.key(0), 3)
    images = jax.random.normal(key_x, (batch, side, side, 3), jnp.float32)
    labels = jax.nn.one_hot(jax.random.randint(key_y, (batch,), 0, classes), classes)
    params = jax.jit(lambda: model.init(key_p, images[:1])["params"])()
    state = (params, jax.jit(tx.init)(params))

    def step(state, images, labels):
        params, opt_state = state

        loss_fn = functools.partial(losses.classification_loss, model)  # the image trainer's loss
        (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, {}, images, labels, None, True
        )
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    return jax.jit(step, donate_argnums=(0,)).lower(state, images, labels), state, (images, labels)


def _compile_timed(lowered):
    t0 = time.perf_counter()
    compiled = lowered.compile()
    return compiled, time.perf_counter() - t0


def make_step(
    variant: str, attention: str, side: int, classes: int, batch: int, dtype, options: str = ""
):
    """(compiled step, state, batch, compile seconds): `lower_step`'s step, compiled."""
    lowered, state, data = lower_step(variant, attention, side, classes, batch, dtype, options)
    compiled, compile_s = _compile_timed(lowered)
    return compiled, state, data, compile_s


def xla_training_flops(variant: str, attention: str, side: int, classes: int, batch: int) -> float:
    """XLA's FLOP count of forward + backward at `batch`, from the lowered step (nothing runs)."""
    model = make_model(variant, attention, side, classes)
    images = jax.ShapeDtypeStruct((batch, side, side, 3), jnp.float32)
    labels = jax.ShapeDtypeStruct((batch, classes), jnp.float32)
    params = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros((1, side, side, 3)))["params"]
    )

    def loss_fn(p, x, y):
        return optax.softmax_cross_entropy(model.apply({"params": p}, x, train=True), y).mean()

    cost = jax.jit(jax.grad(loss_fn)).lower(params, images, labels).cost_analysis()
    if (
        cost is None
    ):  # a backend without a cost model before compiling (a GPU under jax 0.11): no check
        return float("nan")
    return float((cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"])


def _peak_bytes(compiled) -> float:
    """XLA's buffer assignment for the step: arguments + outputs + temporaries - donated aliases. Unlike
    a device's running peak (which one process cannot reset between the two variants), it is per
    variant and the same on every backend."""
    m = compiled.memory_analysis()
    return float(
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        + m.temp_size_in_bytes
        - m.alias_size_in_bytes
    )


def _flops(compiled) -> float:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return float(cost.get("flops", float("nan")))


def measure(name: str, batch: int, dtype, profile_dir: str = "") -> tuple[dict, list[str]]:
    """Every variant of one shape, their steps interleaved: per variant the median step time; with
    `profile_dir`, also the busiest operations of each variant's step (`benchmarks.profile`).

    The variants are traced one after another, then compiled side by side in threads (XLA compiles
    without the GIL), so a many-core host compiles them in about the time of one."""
    variant, side, classes, _ = SHAPES[name]

    def not_timed(label, e):  # a fused kernel the device lacks: say so, time the others
        if label in ("vanilla", "positional"):
            raise e
        print(
            f"{name}, {label}: not timed ({type(e).__name__}: {str(e).splitlines()[0][:200]})",
            flush=True,
        )

    lowered = {}
    for label, (attention, options) in variants().items():
        try:
            lowered[label] = lower_step(variant, attention, side, classes, batch, dtype, options)
        except Exception as e:  # noqa: BLE001 - see not_timed
            not_timed(label, e)
    with concurrent.futures.ThreadPoolExecutor(len(lowered)) as pool:
        futures = {label: pool.submit(_compile_timed, low[0]) for label, low in lowered.items()}
    runs = {}
    for label, future in futures.items():
        _, state, data = lowered[label]
        try:
            compiled, compile_s = future.result()
            state, loss = compiled(state, *data)  # warm-up
            jax.block_until_ready(loss)
        except Exception as e:  # noqa: BLE001 - see not_timed
            not_timed(label, e)
            continue
        runs[label] = {
            "compiled": compiled,
            "state": state,
            "data": data,
            "times": [],
            "compile_s": compile_s,
            "flops": _flops(compiled),
            "peak": _peak_bytes(compiled),
        }
    del lowered
    for _ in range(FLAGS.steps):
        for r in runs.values():
            t0 = time.perf_counter()
            r["state"], loss = r["compiled"](r["state"], *r["data"])
            jax.block_until_ready(loss)
            r["times"].append(time.perf_counter() - t0)
    out = {}
    for label, r in runs.items():
        step_s = float(np.median(r["times"]))
        analytic = vit_flops.training_flops(
            make_model(variant, variants()[label][0], side, classes), batch
        )
        out[label] = {
            "step_ms": 1e3 * step_s,
            "images_per_s": batch / step_s,
            "peak_mb": r["peak"] / 2**20,
            "gflops": analytic / 1e9,
            "xla_gflops": r["flops"] / 1e9,
            "compile_s": r["compile_s"],
            "mfu": utilisation.mfu(analytic, step_s, jax.devices()[:1], dtype),
        }
    profiled = []
    if profile_dir:
        profiled.append(
            f"Profile of {name} at batch {batch} (`jax.profiler`, {PROFILE_CALLS} steps; per step):"
        )
        for label, r in runs.items():

            def step(r=r):
                r["state"], loss = r["compiled"](r["state"], *r["data"])
                return loss

            try:
                path = profile.trace(
                    step, PROFILE_CALLS, os.path.join(profile_dir, label.replace(", ", "_"))
                )
                profiled += [f"{label}:", *profile.summary_lines(path, PROFILE_CALLS)]
            except Exception as e:  # noqa: BLE001 - a profiler the device lacks must not lose the timings
                profiled.append(
                    f"{label}: no profile ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
                )
    return out, profiled


def timm_model(variant: str, side: int, classes: int):
    """timm's ViT of our vanilla ViT's shape: no class token, the final LayerNorm on every token, then
    average pooling (fc_norm=False keeps the norm before the pooling, as ours)."""
    shape, patch = models.parse_variant(variant)
    return timm_vit.VisionTransformer(
        img_size=side,
        patch_size=patch,
        num_classes=classes,
        global_pool="avg",
        class_token=False,
        fc_norm=False,
        embed_dim=shape.width,
        depth=shape.depth,
        num_heads=shape.num_heads,
        mlp_ratio=shape.mlp_dim / shape.width,
    )


def measure_timm(name: str, batch: int, dtype) -> dict:
    """timm's ViT of the shape, AdamW under bf16 autocast (bf16 runs), `torch.compile`d: median step
    time of `--steps` steps after `TIMM_WARMUP` untimed ones; eager (flagged) where compiling fails."""
    variant, side, classes, _ = SHAPES[name]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = timm_model(variant, side, classes).to(device)
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=OPT["lr"],
        betas=(OPT["b1"], OPT["b2"]),
        weight_decay=OPT["weight_decay"],
        fused=device.type == "cuda",
    )
    images = torch.randn(batch, 3, side, side, device=device)
    labels = torch.randint(0, classes, (batch,), device=device)
    autocast = dtype == jnp.bfloat16

    def step(forward):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(forward(images), labels)
        loss.backward()
        # (F821: ruff reads the `del` at the end as undefining them; `step` is never called after it)
        torch.nn.utils.clip_grad_norm_(model.parameters(), OPT["grad_clip"])  # noqa: F821
        opt.step()  # noqa: F821
        opt.zero_grad(set_to_none=True)  # noqa: F821
        return loss

    def timed(forward) -> float:
        t0 = time.perf_counter()
        step(forward)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    mode, error = "torch.compile", None
    try:
        forward = torch.compile(model)
        first_s = timed(forward)
    except Exception as e:  # noqa: BLE001 - any compiler failure: say so and time eager instead
        mode, error, forward = (
            "eager (torch.compile failed)",
            f"{type(e).__name__}: {str(e)[:200]}",
            model,
        )
        first_s = timed(forward)
    for _ in range(TIMM_WARMUP - 1):  # the backward pass and the optimiser settle after the first
        timed(forward)
    times = [timed(forward) for _ in range(FLAGS.steps)]
    step_s = statistics.median(times)
    out = {
        "images_per_s": batch / step_s,
        "step_ms": 1e3 * step_s,
        "first_step_s": first_s,
        "mode": mode,
        "error": error,
        "device": str(device),
        "range_ms": (1e3 * min(times), 1e3 * max(times)),
    }
    del model, opt, forward
    if device.type == "cuda":
        torch.cuda.empty_cache()  # leave the card to JAX for the next shape
    return out


def _verdict(value, goal: float, fmt, missing: str = "not measured") -> str:
    if value is None:
        return missing
    return f"{fmt(value)}: {'met' if value >= goal else 'missed'}"


def goals(results: dict) -> list[str]:
    """Issue 17's goals, each with the measured figure and met or missed."""
    times, percent = (lambda v: f"{v:.2f}x"), (lambda v: f"{100 * v:.1f}%")
    ips = {
        name: {k: m["images_per_s"] if m else None for k, m in r.items()}
        for name, r in results.items()
    }
    pos = "; ".join(
        f"{name} {_verdict(s['positional'] / s['vanilla'], GOAL_POSITIONAL_SPEEDUP, times)}"
        for name, s in ips.items()
    )
    fused = lambda s: "".join(
        f" ({label}: {_verdict(s['timm'] and s[label] / s['timm'], GOAL_VANILLA_OVER_TIMM, times)})"
        for label in s
        if label.startswith("vanilla, ")
    )
    peer = "; ".join(
        f"{name} {_verdict(s['timm'] and s['vanilla'] / s['timm'], GOAL_VANILLA_OVER_TIMM, times)}"
        f"{fused(s)}"
        for name, s in ips.items()
    )
    r = results.get(GOAL_MFU_SHAPE)
    mfu = "; ".join(
        f"{a} {_verdict(r[a]['mfu'], GOAL_MFU, percent, 'n/a') if r else 'not measured'}"
        for a in ("vanilla", "positional")
    )
    if r and r["vanilla"]["mfu"] is None:
        mfu += " (MFU needs a bfloat16 run on a device of utilisation.PEAK_TFLOPS_*: not measured)"
    return [
        f"- positional attention at least {GOAL_POSITIONAL_SPEEDUP}x vanilla's images/s: {pos}.",
        f"- our vanilla ViT at least as fast as timm + torch.compile (ours / timm): {peer}.",
        f"- {GOAL_MFU_SHAPE} at {100 * GOAL_MFU:.0f}% MFU or more: {mfu}.",
    ]


def _peer_line() -> str:
    if FLAGS.peer == "none":
        return "timm peer: off (--peer=none)."
    if torch is None:
        return 'timm peer: not installed (pip install -e ".[bench]").'
    import timm

    return f"timm peer: timm {timm.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads."


def _peer_missing() -> str | None:
    """Why the timm peer is not timed (its columns' text), or None when it is: it must be installed and
    run on the platform JAX runs on, else "ours / timm" would compare two devices."""
    if FLAGS.peer == "none":
        return "off"
    if torch is None:
        return "not installed"
    torch_on = "gpu" if torch.cuda.is_available() else "cpu"
    if jax.default_backend() != torch_on:
        return f"not comparable (JAX on {jax.default_backend()}, torch on {torch_on})"
    return None


def section_body(rows, ratios, peer_notes, goal_lines, profile) -> str:
    return "\n".join(
        [
            f"Training step (forward, backward, AdamW) of ViTs with the same shape, {FLAGS.dtype}, median of "
            f"{FLAGS.steps} interleaved steps per variant after one warm-up. Machine: {machine()}. "
            f"{_peer_line()}",
            "",
            f"Command: `python -m benchmarks.vit_throughput --batch_cifar={FLAGS.batch_cifar} "
            f"--batch_imagenet={FLAGS.batch_imagenet} --steps={FLAGS.steps} --dtype={FLAGS.dtype} "
            f"--flops_batch={FLAGS.flops_batch} --peer={FLAGS.peer} --fused_attention={FLAGS.fused_attention}"
            + (" --profile_dir=DIR" if FLAGS.profile_dir else "")
            + "`",
            "",
            "GFLOP/step: the analytic matmul count of `posattn.vision.models.flops` (3 forward passes), "
            "which MFU divides by; XLA's count of the compiled step (elementwise work and the optimiser "
            'included) beside it as a check. "vanilla, cudnn": the vanilla ViT with its attention through '
            "`jax.nn.dot_product_attention(implementation='cudnn')` (the model's "
            "`attention_options=\"implementation='cudnn'\"`).",
            "",
            "| shape | batch | attention | images/s | step (ms) | peak memory, XLA (MiB) | GFLOP/step | "
            "GFLOP/step, XLA | MFU | timm + torch.compile images/s | ours / timm |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "Throughput ratio positional / vanilla: " + "; ".join(ratios) + ".",
            "",
            *([f"timm peer: {'; '.join(peer_notes)}.", ""] if peer_notes else []),
            "Goals (issue 17), from the figures above:",
            *goal_lines,
            *(["", *profile] if profile else []),
        ]
    )


def main(argv):
    del argv
    if FLAGS.peer == "timm" and torch is not None:
        # Before JAX takes the device: allocate as needed, so that torch finds memory on the same card.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    for name in FLAGS.shapes:
        if name not in SHAPES:
            raise app.UsageError(f"--shapes: unknown shape {name!r} (known: {', '.join(SHAPES)})")
    dtype = jnp.dtype(FLAGS.dtype)
    print(_peer_line(), flush=True)
    peer_missing = _peer_missing()
    rows, ratios, results, peer_notes, profiled = [], [], {}, [], []
    # the goals' MFU shape is profiled (else the last one timed)
    profile_at = GOAL_MFU_SHAPE if GOAL_MFU_SHAPE in FLAGS.shapes else FLAGS.shapes[-1]
    title = (
        "Image regime: ViT training throughput, vanilla vs positional attention, "
        f"{FLAGS.dtype} (benchmarks/vit_throughput.py)"
    )
    for name in FLAGS.shapes:
        batch = getattr(FLAGS, SHAPES[name][3])
        profile_here = FLAGS.profile_dir if name == profile_at else ""
        t0 = time.perf_counter()
        r, shape_profile = measure(name, batch, dtype, profile_here)
        profiled += shape_profile
        # where a shape's seconds go, for sizing a device run's time budget
        print(
            f"{name}: ours in {time.perf_counter() - t0:.0f} s (compile "
            + ", ".join(f"{label} {m['compile_s']:.0f} s" for label, m in r.items())
            + ")",
            flush=True,
        )
        t0 = time.perf_counter()
        r["timm"] = None if peer_missing else measure_timm(name, batch, dtype)
        print(f"{name}: timm in {time.perf_counter() - t0:.0f} s", flush=True)
        results[name] = r
        v, p, t = r["vanilla"], r["positional"], r["timm"]
        ratio = p["images_per_s"] / v["images_per_s"]
        variant, side, classes, _ = SHAPES[name]
        big = [
            xla_training_flops(variant, a, side, classes, FLAGS.flops_batch)
            for a in ("vanilla", "positional")
        ]
        ratios.append(
            f"{name}: {ratio:.2f}x measured, {v['gflops'] / p['gflops']:.2f}x by the analytic FLOP "
            f"count, {v['xla_gflops'] / p['xla_gflops']:.2f}x by XLA's FLOP count of the measured "
            f"step, {big[0] / big[1]:.2f}x by XLA's count at batch {FLAGS.flops_batch}"
        )
        if t:
            peer_notes.append(
                f"{name}: timm {t['mode']} on {t['device']}, first step {t['first_step_s']:.1f} s, "
                f"timed steps {t['range_ms'][0]:.1f}-{t['range_ms'][1]:.1f} ms"
                + (f" ({t['error']})" if t["error"] else "")
            )
            print(peer_notes[-1], flush=True)
        for label, m in r.items():
            if label == "timm":
                continue
            mfu = "n/a" if m["mfu"] is None else f"{100 * m['mfu']:.1f}%"
            timm_ips = peer_missing or f"{t['images_per_s']:.1f}"
            vs_timm = (
                f"{m['images_per_s'] / t['images_per_s']:.2f}x"
                if t and label != "positional"
                else ""
            )
            row = (
                f"| {name} | {batch} | {label} | {m['images_per_s']:.1f} | {m['step_ms']:.1f} | "
                f"{m['peak_mb']:.0f} | {m['gflops']:.1f} | {m['xla_gflops']:.1f} | {mfu} | {timm_ips} | "
                f"{vs_timm} |"
            )
            print(row, flush=True)
            rows.append(row)
        print(ratios[-1], flush=True)
        if FLAGS.write:  # after every shape: a run stopped by a time limit keeps what it measured
            update_section(title, section_body(rows, ratios, peer_notes, goals(results), profiled))
    print("\n".join(goals(results) + profiled), flush=True)


if __name__ == "__main__":
    app.run(main)
