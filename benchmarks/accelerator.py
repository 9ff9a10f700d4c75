r"""Every accelerator figure of issue 37 in one command: the benchmarks as subprocesses, each under its
share of one time budget, each writing its own section of docs/benchmarks.md (titled with the device).

    python -m benchmarks.accelerator                 # on one GPU: about 9 minutes, compile included
    python -m benchmarks.accelerator --tiny          # the same sections at toy sizes (a CPU check)

Run from the checkout's root (the parts are `python -m benchmarks.*` and `experiments.train_images`).
On a machine where the package is not installed, put the checkout on PYTHONPATH; Fashion-MNIST is read
from $POSATTN_FASHION_MNIST_DIR (or `apt-get install dataset-fashion-mnist`).

Sections, in this order (the cheapest first, so that a slow compile late costs the least):
1. `benchmarks.theory_step --cases=n50k,n1m`: the GD step of Eq. (T) on (E) at N = 50,000 and
   1,000,000 (D = 10, d = 100): ours, a plain PyTorch step on the same device, one GEMV over X.
2. `benchmarks.vit_throughput`, bfloat16: CIFAR ViT-Ti/4 at batch 512, ImageNet ViT-Ti/16 and ViT-S/16
   at batch 256, vanilla and positional attention, the vanilla ViT through cuDNN's fused attention
   (`--fused_attention=cudnn`), timm + `torch.compile` beside them, MFU, and a `jax.profiler` summary
   of the ViT-S/16 steps.
3. `benchmarks.sweep --max_seeds=4096`: seeds per second as a sweep grows, 1 to 4,096 seeds per call,
   compiled without XLA's GEMM autotuning (`PART_ENV`).
4. Fashion-MNIST, each attention kind: `train_images` with `tpu_configs/fashion_mnist.py:vit_KIND,accel`
   (ViT-Ti/4, batch 512, bfloat16) for `--fashion_epochs` epochs: test accuracy and wall time.
Then a section of its own: each part's exit status and seconds, so a part cut by the budget is seen.

A part gets the budget left when it starts, at most its own cap (`CAPS`); a part stopped by its time
limit keeps what it wrote (the benchmarks write their section after every shape, problem or size).
The logs of all parts go to --out/accelerator.log.
"""

import json
import os
import shutil
import subprocess
import sys
import time

from absl import app, flags

flags.DEFINE_bool(
    "tiny", False, "Toy sizes, to check every part end to end on a CPU in a few minutes."
)
flags.DEFINE_integer("budget_s", 580, "Seconds for all parts together.")
flags.DEFINE_string(
    "out", "/tmp/posattn_accelerator", "Where the log, traces and training runs go."
)
flags.DEFINE_integer("fashion_epochs", 10, "Epochs of each Fashion-MNIST training (batch 512).")
flags.DEFINE_list(
    "parts", ["theory", "vit", "sweep", "fashion"], "The parts to run, in this order."
)
FLAGS = flags.FLAGS

# Seconds a part may take at most (its share of the budget when the others run as expected).
CAPS = {"theory": 60, "vit": 330, "sweep": 80, "fashion": 150}
# The sweep part runs without XLA's GEMM autotuning, as the H100 figures of docs/benchmarks.md were
# measured. It was tried against the 16-seed program's 68 s compile on the H200 (4 s on a CPU) and is
# not its cause: each size still compiled for 40-60 s on the H100 (docs/accelerator.md).
PART_ENV = {"sweep": {"XLA_FLAGS": "--xla_gpu_autotune_level=0"}}
FASHION_TRAIN = 60_000
FASHION_BATCH = 512


def part_commands(part: str, tiny: bool) -> list[list[str]]:
    """The command lines of one part."""
    py = [sys.executable, "-m"]
    if part == "theory":
        sizes = (
            ["--cases=n50k", "--rounds=1", "--chunk=2"]
            if tiny
            else ["--cases=n50k,n1m", "--rounds=5"]
        )
        return [py + ["benchmarks.theory_step", *sizes]]
    if part == "vit":
        sizes = (
            ["--shapes=CIFAR ViT-Ti/4", "--batch_cifar=4", "--steps=2", "--dtype=bfloat16"]
            if tiny
            else [
                "--batch_cifar=512",
                "--batch_imagenet=256",
                "--steps=20",
                "--dtype=bfloat16",
                # the goals' shape first: a part cut by its time limit loses the least
                "--shapes=ImageNet ViT-S/16,CIFAR ViT-Ti/4,ImageNet ViT-Ti/16",
            ]
        )
        return [
            py
            + [
                "benchmarks.vit_throughput",
                *sizes,
                "--fused_attention=cudnn",
                f"--profile_dir={os.path.join(FLAGS.out, 'profile')}",
            ]
        ]
    if part == "sweep":
        # 1, 16, 256, 4,096 seeds, ours alone: a GPU compiles each size of the vmapped sweep anew (40-60 s)
        sizes = (
            ["--max_seeds=4", "--N=32", "--steps=20", "--n_test=32"]
            if tiny
            else ["--max_seeds=4096", "--growth=16", "--plain=false"]
        )
        return [py + ["benchmarks.sweep", *sizes, "--max_call_s=30"]]
    if part == "fashion":
        steps = 4 if tiny else FLAGS.fashion_epochs * FASHION_TRAIN // FASHION_BATCH
        # tiny: the CPU-sized ViT, whose evaluation of the 10,000 test images takes seconds on a CPU
        return [
            py
            + [
                "experiments.train_images",
                f"--config=tpu_configs/fashion_mnist.py:vit_{kind}{'' if tiny else ',accel'}",
                f"--workdir={fashion_workdir(kind)}",
                f"--config.total_steps={steps}",
                f"--config.optimizer.warmup_steps={max(1, steps // 10)}",
                "--config.eval_every=0",
                f"--config.checkpoint_every={steps}",
            ]
            + (["--config.global_batch_size=16", "--config.eval_batch_size=1000"] if tiny else [])
            for kind in ("positional", "vanilla")
        ]
    raise app.UsageError(f"--parts: unknown part {part!r} (known: {', '.join(CAPS)})")


def fashion_workdir(kind: str) -> str:
    return os.path.join(FLAGS.out, "fashion", kind)


def run_part(part: str, deadline: float, log) -> dict:
    """Run one part's commands under the budget left (at most its cap); its status and seconds."""
    t0 = time.monotonic()
    status = "ok"
    commands = part_commands(part, FLAGS.tiny)
    for i, command in enumerate(commands):
        # each command of a part an equal share of what the part has left
        left = min(
            (CAPS[part] - (time.monotonic() - t0)) / (len(commands) - i),
            deadline - time.monotonic(),
        )
        if left < 5:
            status = "not run: no time left"
            break
        log.write(f"\n$ {' '.join(command)}   # limit {left:.0f} s\n")
        log.flush()
        try:
            done = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=left,
                env={**os.environ, **PART_ENV.get(part, {})},
            )
        except subprocess.TimeoutExpired:
            status = f"stopped at its time limit ({left:.0f} s)"
            break
        if done.returncode:
            status = f"failed (exit {done.returncode}; see the log)"
            break
    return {"status": status, "seconds": time.monotonic() - t0}


def fashion_rows() -> list[str]:
    rows = []
    for kind in ("positional", "vanilla"):
        path = os.path.join(fashion_workdir(kind), "summary.json")
        if not os.path.exists(path):
            rows.append(f"| {kind} | not finished | | | | |")
            continue
        with open(path) as f:
            s = json.load(f)
        rows.append(
            f"| {kind} | {s['steps']} | {s['steps'] * FASHION_BATCH / FASHION_TRAIN:.1f} | "
            f"{100 * s['test_accuracy']:.2f}% | {s['seconds']:.0f} | {s['images_per_second']:.0f} |"
        )
    return rows


def main(argv):
    del argv
    # Both frameworks share one card: JAX allocates as it needs instead of taking 75% at start.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax  # after the environment is set, as the parts' own processes are

    from benchmarks.report import machine, update_section

    if os.path.exists(FLAGS.out):  # the traces and training runs of this command only
        shutil.rmtree(FLAGS.out)
    os.makedirs(FLAGS.out)
    deadline = time.monotonic() + FLAGS.budget_s
    results = {}
    with open(os.path.join(FLAGS.out, "accelerator.log"), "w") as log:
        for part in FLAGS.parts:
            results[part] = run_part(part, deadline, log)
            print(
                f"{part}: {results[part]['status']} in {results[part]['seconds']:.0f} s", flush=True
            )
    if "fashion" in FLAGS.parts:
        steps = part_commands("fashion", FLAGS.tiny)[0]
        update_section(
            "Image regime: Fashion-MNIST trainings on one device (benchmarks/accelerator.py)",
            "\n".join(
                [
                    "`train_images` with `tpu_configs/fashion_mnist.py:vit_KIND,accel` (ViT-Ti/4, patch 4, bfloat16, "
                    "RandAugment, AdamW, batch 512) shortened to the steps below, warm-up a tenth of them, one "
                    f"evaluation at the end. Machine: {machine()}.",
                    "",
                    f"Command (per kind): `{' '.join(steps[2:]).replace(FLAGS.out, 'OUT')}`",
                    "",
                    "| attention | steps | epochs | test accuracy | seconds (train_images' own, compile included) | "
                    "images/s |",
                    "|---|---|---|---|---|---|",
                    *fashion_rows(),
                ]
            ),
        )
    rows = [f"| {part} | {r['status']} | {r['seconds']:.0f} |" for part, r in results.items()]
    env = "; ".join(
        f"{part}: {' '.join(f'{k}={v}' for k, v in e.items())}"
        for part, e in PART_ENV.items()
        if part in FLAGS.parts
    )
    update_section(
        "Accelerator run: its parts (benchmarks/accelerator.py)",
        "\n".join(
            [
                f"Command: `python -m benchmarks.accelerator{' --tiny' if FLAGS.tiny else ''} --budget_s={FLAGS.budget_s} "
                f"--fashion_epochs={FLAGS.fashion_epochs}`; jax {jax.__version__}. Machine: {machine()}."
                + (f" Environment of a part: {env}." if env else ""),
                "",
                "| part | status | seconds |",
                "|---|---|---|",
                *rows,
            ]
        ),
    )
    print("\n".join(rows))


if __name__ == "__main__":
    app.run(main)
