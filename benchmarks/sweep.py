r"""64 seeds of GD on Eq. (T) as one vmapped compiled call against 64 sequential runs.

    python -m benchmarks.sweep                    # writes its section of docs/benchmarks.md
    python -m benchmarks.sweep --host_devices=2   # the CPU split into 2 XLA devices, seeds over both

Problem: the `small` preset (D=16, C=4, d=32) with --N samples per seed and --steps GD steps; each run
draws its own task, initialisation, data and test set (`posattn.theory.gd.draw_run`). Three ways:
- vmapped: `gd.fit_grid` over the 64 seed keys, end to end (its compile included), its seeds split
  over the devices (`posattn.mesh.map_runs`);
- sequential `gd.fit`: 64 calls of the library's single-run entry point on one device, end to end, as
  a research script's loop over seeds would do (the first call compiles, the others reuse it);
- the compiled-once loop: the single-seed computation jitted once and called per seed, compile
  excluded (both this and vmapped timed again after a warm-up for the compile-free ratio).
The vmapped and compiled-once results are checked equal before timing. Last, the vmapped call's cost
per seed at 1, 8 and 64 seeds shows what batching seeds buys on the machine at hand, and the seeds'
data draws, timed alone, are a floor under any sweep that draws the same data.
"""
import dataclasses
import functools
import time

import jax
import numpy as np
from absl import app, flags

from benchmarks.report import machine, update_section
from posattn import mesh as mesh_lib
from posattn.theory import gd as gd_lib
from posattn.theory import keys as keys_lib
from posattn.theory.step import train_chunk
from posattn.theory.presets import get_preset

flags.DEFINE_integer("seeds", 64, "runs")
flags.DEFINE_integer("N", 256, "training samples per run")
flags.DEFINE_integer("steps", 200, "GD steps per run")
flags.DEFINE_integer("n_test", 512, "test samples per run")
flags.DEFINE_integer("host_devices", 1, "on a CPU, the XLA devices to split it into: the vmapped sweep "
                     "spreads its seeds over them, each sequential run keeps to one")
FLAGS = flags.FLAGS

FLAT_NOTE = (  # written only when the measured cost per seed is flat, which is what it explains
    "The cost per seed does not fall as seeds are vmapped (table above): one small run already keeps "
    "the device busy, so a sweep in one call saves only the per-call overhead of a loop, and compile "
    "time dominates both end-to-end figures. Vmapping seeds pays where one small run leaves the device "
    "mostly idle.")


def five_x_limits(t_vmap_e2e, t_vmap, t_fit, t_seq, t_draw, seeds) -> str:
    """What keeps the sweep from 5x, each clause written only where the measurement shows it."""
    compile_s, parts = t_vmap_e2e - t_vmap, []
    if compile_s > t_fit / 5:
        parts.append(f"end to end, compiling the vmapped program alone ({compile_s:.2f} s: end to end "
                     f"minus compile excluded) takes more than a fifth of the whole sequential loop "
                     f"({t_fit / 5:.2f} s)")
    if t_draw > t_seq / 5:
        parts.append(f"compile excluded, a 5x sweep would cost {t_seq / 5 / seeds * 1e3:.1f} ms per seed, "
                     f"less than drawing one seed's data alone in the sweep "
                     f"({t_draw / seeds * 1e3:.1f} ms)")
    return f"What rules out 5x on this machine: {'; '.join(parts)}." if parts else ""


def single_run(key, *, cfg, gd):
    params, train, test, k, task = gd_lib.draw_run(key, cfg, gd, n_train=gd.N)
    return train_chunk(params, 0, train, test, k, task, num_steps=gd.steps, cfg=cfg, gd=gd)[1]


def wall(fn):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


def timed(fn):
    jax.block_until_ready(fn())  # compile and warm up
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - t0, out


def main(argv):
    del argv
    jax.config.update("jax_num_cpu_devices", FLAGS.host_devices)  # before the first array is made
    cfg, gd = get_preset("small")
    gd = dataclasses.replace(gd, N=FLAGS.N, steps=FLAGS.steps, n_test=FLAGS.n_test)
    keys = keys_lib.seed_keys(0, FLAGS.seeds)
    vmapped = lambda: gd_lib.fit_grid(keys, cfg=cfg, gd=gd, sizes=(FLAGS.N,))
    one = jax.jit(functools.partial(single_run, cfg=cfg, gd=gd))
    sequential = lambda: [one(k) for k in keys]
    gd_fit = dataclasses.replace(gd, eval_every=gd.steps)
    fits = lambda: [gd_lib.fit(k, cfg, gd_fit, devices=jax.devices()[:1]).params for k in keys]
    draw = jax.jit(lambda ks: mesh_lib.map_runs(  # the draws of `fit_grid`, alone
        lambda k: gd_lib.draw_run(k, cfg, gd, n_train=FLAGS.N), ks))
    t_vmap_e2e = wall(vmapped)
    t_fit = wall(fits)
    t_vmap, out_v = timed(vmapped)
    t_seq, out_s = timed(sequential)
    np.testing.assert_allclose(out_v["loss"][0], [o["loss"] for o in out_s], rtol=1e-3, atol=1e-6)
    t_draw = timed(lambda: draw(keys))[0]
    speedup, speedup_fit = t_seq / t_vmap, t_fit / t_vmap_e2e
    per_seed = {n: timed(lambda n=n: gd_lib.fit_grid(keys[:n], cfg=cfg, gd=gd, sizes=(FLAGS.N,)))[0]
                for n in (1, 8, FLAGS.seeds)}
    command = "python -m benchmarks.sweep" + (
        f" --host_devices={FLAGS.host_devices}" if FLAGS.host_devices > 1 else "")
    print(f"{FLAGS.seeds} seeds x {FLAGS.steps} GD steps, N={FLAGS.N}: end to end vmapped "
          f"{t_vmap_e2e:.2f}s vs sequential gd.fit {t_fit:.2f}s ({speedup_fit:.2f}x); compile excluded "
          f"vmapped {t_vmap:.2f}s vs compiled-once loop {t_seq:.2f}s ({speedup:.2f}x)", flush=True)
    body = "\n".join([
        f"`small` preset (D=16, C=4, d=32), N={FLAGS.N} samples and {FLAGS.steps} GD steps per run, "
        f"{FLAGS.seeds} runs (own task, initialisation and data each). "
        f"Machine: {machine()}.", "",
        f"Command: `{command}`", "",
        "| runs | wall time (s) |", "|---|---|",
        f"| {FLAGS.seeds} seeds vmapped in one compiled call (`gd.fit_grid`), compile included | "
        f"{t_vmap_e2e:.2f} |",
        f"| {FLAGS.seeds} sequential `gd.fit` runs, end to end | {t_fit:.2f} |",
        f"| {FLAGS.seeds} seeds vmapped, compile excluded | {t_vmap:.2f} |",
        f"| {FLAGS.seeds} calls of the single-seed run compiled once, compile excluded | {t_seq:.2f} |",
        f"| drawing the {FLAGS.seeds} seeds' tasks, starts and samples alone, as in the sweep, compile "
        f"excluded | "
        f"{t_draw:.2f} |",
        "", "| seeds in one vmapped call | ms per seed, compile excluded |", "|---|---|",
        *[f"| {n} | {t * 1e3 / n:.1f} |" for n, t in per_seed.items()],
        "", f"Speed-up of the vmapped sweep: {speedup_fit:.2f}x end to end over sequential `gd.fit`, "
        f"{speedup:.2f}x compile excluded over the compiled-once loop.",
        FLAT_NOTE if per_seed[FLAGS.seeds] / FLAGS.seeds >= 0.8 * per_seed[1] else "",
        five_x_limits(t_vmap_e2e, t_vmap, t_fit, t_seq, t_draw, FLAGS.seeds)])
    split = f", seeds over {FLAGS.host_devices} host devices" if FLAGS.host_devices > 1 else ""
    update_section(f"Theory: vmapped seeds against sequential runs{split} (benchmarks/sweep.py)", body)


if __name__ == "__main__":
    app.run(main)
