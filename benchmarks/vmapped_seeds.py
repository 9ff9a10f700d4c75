r"""Images per second of N seeds of an image config trained in one vmapped program
(`posattn.vision.seeds.train_seeds`, what `experiments.compare_attention` runs) against the same N seeds
trained one after another (`posattn.vision.train.train`, the peer), in the same run.

    python -m benchmarks.vmapped_seeds                   # digits' ViT XS/2, batch 128; writes its section
    python -m benchmarks.vmapped_seeds --config=tpu_configs/fashion_mnist.py        # ViT XS/4, 28 x 28
    python -m benchmarks.vmapped_seeds --config=tpu_configs/digits.py:quick --seeds=1,2 --steps=6 \
        --docs=/tmp/benchmarks.md                        # a smoke run of the script itself

Method: for each N of --seeds, seeds 0..N-1 of --config for --steps steps, evaluated and saved only at
the end, in fresh workdirs: first the vmapped run, then the N separate runs. Each is timed by its own
summary.json: images per second over the steps after the first (which compiles), evaluations and
checkpoints excluded. The vmapped summary counts one seed's images, so its program's throughput is N
times it; the separate runs' is their images over their timed seconds, summed over the N runs. The wall
seconds of each way (compiling, evaluating and saving included) stand beside. The CPU has one device
per core (`posattn.compile_options.use_cpu_cores`, as the binaries), the batch split over them in both ways.
"""

import os
import tempfile
import time

from absl import app, flags, logging

from benchmarks.report import DOCS, machine, update_section
from posattn import cli, compile_options
from posattn.vision import config as config_lib
from posattn.vision import seeds as seeds_lib
from posattn.vision import train

TITLE = "Image regime: seeds in one vmapped program vs separate runs (benchmarks/vmapped_seeds.py)"
flags.DEFINE_string(
    "config", "tpu_configs/digits.py", "the image config file[:argument] of every seed"
)
flags.DEFINE_list("seeds", ["1", "4", "8"], "numbers of seeds N")
flags.DEFINE_integer("steps", 100, "training steps of every run")
flags.DEFINE_string("docs", None, "the page to write the section into (default docs/benchmarks.md)")
FLAGS = flags.FLAGS


def configs(n: int) -> list:
    path, _, arg = FLAGS.config.partition(":")
    out = []
    for seed in range(n):
        c = cli.load_config(path, arg or None, config_lib.SCHEMA)
        c.seed, c.total_steps, c.eval_every, c.checkpoint_every = seed, FLAGS.steps, 0, 0
        c.log_every = FLAGS.steps
        c.optimizer.warmup_steps = min(c.optimizer.warmup_steps, max(FLAGS.steps // 10, 1))
        out.append(c)
    return out


def measure(n: int, root: str) -> dict:
    """{"vmapped": (images/s, wall s), "separate": (images/s, wall s)} of N seeds."""
    cs = configs(n)
    batch = cs[0].global_batch_size
    t0 = time.perf_counter()
    summaries = seeds_lib.train_seeds(
        cs, [os.path.join(root, f"vmapped{n}-seed{s}") for s in range(n)]
    )
    vmapped = (n * summaries[0]["images_per_second"], time.perf_counter() - t0)
    t0, images, seconds = time.perf_counter(), 0, 0.0
    for s, c in enumerate(cs):
        summary = train.train_and_evaluate(c, os.path.join(root, f"separate{n}-seed{s}"))
        timed = (summary["steps_this_run"] - 1) * batch  # the images of the steps after the first
        images, seconds = images + timed, seconds + timed / summary["images_per_second"]
    return {"vmapped": vmapped, "separate": (images / seconds, time.perf_counter() - t0)}


def section_body(rows: list[str], example) -> str:
    m = example.model
    shape = f"ViT {m.variant}" + (f" (patch {m.patch_size})" if m.patch_size else "")
    return "\n".join(
        [
            f"{example.dataset}, {shape}, batch {example.global_batch_size}, {FLAGS.steps} steps per seed, "
            f"evaluated and saved at the end only. Images per second over the steps after the first, evaluations "
            f"and checkpoints excluded (the vmapped program's: N seeds' images; the separate runs': their images "
            f"over their timed seconds); wall seconds of each way, compiling included, in brackets. "
            f"Machine: {machine()}.",
            "",
            f"Command: `python -m benchmarks.vmapped_seeds --config={FLAGS.config} "
            f"--seeds={','.join(FLAGS.seeds)} --steps={FLAGS.steps}`",
            "",
            "| seeds N | vmapped: images/s (wall s) | N separate runs: images/s (wall s) | vmapped / separate |",
            "|---|---|---|---|",
            *rows,
        ]
    )


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:  # quiet library logs (orbax), as the binaries
        logging.set_verbosity(logging.ERROR)
    compile_options.use_cpu_cores()  # as the binaries do: one CPU device per core
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for n in map(int, FLAGS.seeds):
            r = measure(n, root)
            (v, v_wall), (s, s_wall) = r["vmapped"], r["separate"]
            print(
                f"{n} seeds: vmapped {v:,.0f} images/s ({v_wall:.1f} s), separate {s:,.0f} images/s "
                f"({s_wall:.1f} s), ratio {v / s:.2f}",
                flush=True,
            )
            rows.append(
                f"| {n} | {v:,.0f} ({v_wall:.1f} s) | {s:,.0f} ({s_wall:.1f} s) | {v / s:.2f} |"
            )
            # after every N: a run stopped by a time limit keeps what it measured
            update_section(TITLE, section_body(rows, configs(1)[0]), FLAGS.docs or DOCS)


if __name__ == "__main__":
    app.run(main)
