r"""GD steps per second of Eq. (T) on the empirical risk (E), compile time apart.

    python -m benchmarks.theory_step            # writes its section of docs/benchmarks.md

Shapes: N=50,000 samples with D=10 patches of d=100 (random partition into sets of C=2), and the
`paper` preset (D=36, C=4, d=64, N=20,000). Timing: the compiled `lax.scan` chunk of `--chunk` steps,
run `--repeats` times after one warm-up, wall clock around `block_until_ready`.
"""
import dataclasses
import time

import jax
import jax.numpy as jnp
from absl import app, flags

from benchmarks.report import machine, update_section
from posattn import mesh as mesh_lib
from posattn.theory import GDConfig, TheoryConfig, make_task, sample
from posattn.theory.gd import make_chunk_fn
from posattn.theory.model import init_params
from posattn.theory.presets import get_preset
from posattn.theory.step import make_batch

flags.DEFINE_integer("chunk", 100, "GD steps per compiled call")
flags.DEFINE_integer("repeats", 3, "timed calls")
FLAGS = flags.FLAGS


def measure(cfg: TheoryConfig, gd: GDConfig) -> dict:
    mesh = mesh_lib.data_mesh()
    shards = mesh.devices.size
    task = make_task(jax.random.key(0), cfg)
    train = make_batch(*sample(jax.random.key(1), cfg, task, gd.N), shards)
    test = make_batch(*sample(jax.random.key(2), cfg, task, 1000), shards)
    train, test = jax.device_put((train, test), mesh_lib.batch_sharding(mesh))
    params = init_params(jax.random.key(3), cfg, gd, task.w_star)
    key = jax.random.key(4)
    chunk = make_chunk_fn(cfg, gd, mesh)
    args = (params, jnp.asarray(0), train, test, key, task, FLAGS.chunk)

    t0 = time.perf_counter()
    compiled = chunk.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    params, _ = compiled(*args[:6])  # warm-up
    jax.block_until_ready(params)
    t0 = time.perf_counter()
    for _ in range(FLAGS.repeats):
        params, entry = compiled(params, *args[1:6])
    jax.block_until_ready(entry)
    seconds = time.perf_counter() - t0
    return {"compile_s": compile_s, "steps_per_s": FLAGS.chunk * FLAGS.repeats / seconds}


def main(argv):
    del argv
    paper_cfg, paper_gd = get_preset("paper")
    cases = {
        "N=50,000, D=10, d=100": (TheoryConfig(D=10, C=2, d=100, q=0.4, partition="random"),
                                 dataclasses.replace(paper_gd, N=50_000)),
        "paper preset (N=20,000, D=36, d=64)": (paper_cfg, paper_gd),
    }
    rows = []
    for name, (cfg, gd) in cases.items():
        r = measure(cfg, gd)
        print(f"{name}: {r['steps_per_s']:.1f} GD steps/s, compile {r['compile_s']:.2f}s", flush=True)
        rows.append(f"| {name} | {r['steps_per_s']:.1f} | {r['compile_s']:.2f} |")
    body = "\n".join([
        f"Full-batch GD on (E), float32, {FLAGS.chunk} steps per compiled `lax.scan` call. "
        f"Machine: {machine()}.", "",
        "Command: `python -m benchmarks.theory_step`", "",
        "| problem | GD steps/s | compile (s) |", "|---|---|---|", *rows])
    update_section("Theory: GD steps per second (benchmarks/theory_step.py)", body)


if __name__ == "__main__":
    app.run(main)
