r"""Seeds per second of a vmapped sweep as it grows, with the one-pass step and with `jax.grad`'s.

    python -m benchmarks.sweep                    # writes its section of docs/benchmarks.md
    python -m benchmarks.sweep --max_seeds=4096   # as far as memory and time allow

Problem: the `small` preset (D=16, C=4, d=32) with --N samples per seed and --steps GD steps; each run
draws its own task, initialisation, data and test set (`posattn.theory.draw.draw_run`). For 1, 4, 16, ...
--max_seeds seeds: `grid.fit_grid` (the library's sweep, the one-pass step of `posattn.theory.fused`)
and the same sweep with the step written as `jax.grad` of the plain model, each timed on its second
call (compile excluded; the first call's wall time, compile included, is printed beside). A sweep
stops growing once one call takes longer than --max_call_s.
"""

import dataclasses
import functools
import os
import time

import jax
from absl import app, flags

from benchmarks.report import machine, update_section
from posattn import compile_options
from posattn.theory import draw as draw_lib
from posattn.theory import grid as grid_lib
from posattn.theory import keys as keys_lib
from posattn.theory.model import empirical_risk
from posattn.theory.optim import gd_hyperparameters, gradient_descent
from posattn.theory.presets import get_preset
from posattn.theory.step import descend, evaluate, init_state

flags.DEFINE_integer("max_seeds", 1024, "largest sweep (seeds, powers of --growth from 1)")
flags.DEFINE_integer("N", 256, "training samples per run")
flags.DEFINE_integer("steps", 200, "GD steps per run")
flags.DEFINE_integer("n_test", 512, "test samples per run")
flags.DEFINE_float("max_call_s", 120.0, "stop growing a sweep once one call takes longer")
flags.DEFINE_integer("growth", 4, "each sweep this many times the last (1, growth, growth^2, ...)")
flags.DEFINE_bool("plain", True, "also time the sweep with `jax.grad`'s step")
FLAGS = flags.FLAGS


def plain_sweep(keys, *, cfg, gd):
    """`fit_grid` at one size with the step written as `jax.grad` of the plain model (the library's
    optimiser, `posattn.theory.optim.gradient_descent`)."""
    optimizer = gradient_descent()

    def run(key):
        params, train, test, k, task = draw_lib.draw_run(key, cfg, gd, n_train=gd.N)

        def one_step(state, _):
            grads = jax.grad(empirical_risk)(state["params"], train.X, train.y, cfg, train.weight)
            return descend(state, grads, optimizer), None

        state = init_state(params, optimizer, gd_hyperparameters(gd))
        params = jax.lax.scan(one_step, state, None, length=gd.steps)[0]["params"]
        return evaluate(params, gd.steps, train, test, k, task, cfg=cfg, gd=gd)

    return jax.vmap(run)(keys)


def two_calls(fn):
    """(first call's wall seconds, compile included; second call's), the second on warm programs."""
    out = []
    for _ in range(2):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        out.append(time.perf_counter() - t0)
    return out


def section_body(ways, rows) -> str:
    return "\n".join(
        [
            f"`small` preset (D=16, C=4, d=32), N={FLAGS.N} samples and {FLAGS.steps} GD steps per run, each "
            f"run with its own task, initialisation and data, all seeds in one compiled call (`fit_grid` splits "
            f"them over the CPU devices, one per core; the `jax.grad` sweep is vmapped on one device); "
            f"seeds per second on the second call (compile excluded; the call's seconds in brackets, then the "
            f"first call's, compile included). Machine: {machine()}"
            + (f", XLA_FLAGS={os.environ['XLA_FLAGS']!r}" if os.environ.get("XLA_FLAGS") else "")
            + ".",
            "",
            f"Command: `python -m benchmarks.sweep --max_seeds={FLAGS.max_seeds} --N={FLAGS.N} --steps={FLAGS.steps} "
            f"--growth={FLAGS.growth} --plain={FLAGS.plain} "
            f"--max_call_s={FLAGS.max_call_s:g}`",
            "",
            f"| seeds | {' | '.join(ways)} |",
            "|---|" + "---|" * len(ways),
            *rows,
        ]
    )


def main(argv):
    del argv
    compile_options.use_cpu_cores()  # as the binaries do: one CPU device per core, the seeds split over them
    cfg, gd = get_preset("small")
    gd = dataclasses.replace(gd, N=FLAGS.N, steps=FLAGS.steps, n_test=FLAGS.n_test)
    plain = jax.jit(functools.partial(plain_sweep, cfg=cfg, gd=gd))
    ways = {
        "one-pass (`fit_grid`)": lambda keys: grid_lib.fit_grid(
            keys, cfg=cfg, gd=gd, sizes=(FLAGS.N,)
        ),
        "jax.grad step": plain,
    }
    if not FLAGS.plain:
        del ways["jax.grad step"]
    rows, growing, seeds = [], set(ways), 1
    while seeds <= FLAGS.max_seeds and growing:
        keys = keys_lib.seed_keys(0, seeds)
        cells = []
        for name, fn in ways.items():
            if name not in growing:
                cells.append("-")
                continue
            try:
                first, second = two_calls(lambda: fn(keys))
            except (
                jax.errors.JaxRuntimeError
            ) as e:  # the sweep outgrew memory: record it, stop growing
                if "RESOURCE_EXHAUSTED" not in str(e):
                    raise
                print(
                    f"{seeds} seeds, {name}: out of memory ({str(e).splitlines()[0]})", flush=True
                )
                cells.append("out of memory")
                growing.discard(name)
                continue
            print(
                f"{seeds} seeds, {name}: {seeds / second:.1f} seeds/s ({second:.2f} s; first call "
                f"{first:.2f} s)",
                flush=True,
            )
            cells.append(f"{seeds / second:.1f} ({second:.2f} s; first {first:.1f} s)")
            if second > FLAGS.max_call_s:
                growing.discard(name)
        rows.append(f"| {seeds} | {' | '.join(cells)} |")
        # after every size: a run stopped by a time limit keeps what it measured
        update_section(
            "Theory: seeds per second as a sweep grows (benchmarks/sweep.py)",
            section_body(ways, rows),
        )
        seeds *= FLAGS.growth


if __name__ == "__main__":
    app.run(main)
