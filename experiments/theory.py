r"""JSL22's theory regime end to end: GD on Eq. (T), patch association and the three phases.

    python -m posattn.experiments.theory --workdir=/tmp/theory          # `phases` preset, < 1 min on a CPU
    posattn-theory --config=tpu_configs/theory.py:paper --config.seed=3 --workdir=DIR
    posattn-theory --config=tpu_configs/theory.py:quick --workdir=DIR  # the smoke run
    posattn-theory --config.theory.D=36 --config.theory.q=0.3 --config.gd.risk=population_mc --workdir=DIR

`--config=FILE[:PRESET]` is an ml_collections config file, by default tpu_configs/theory.py (found from any
directory), which names a preset of `posattn/theory/presets.py` (`phases`, `small`, `paper`, `fig2`;
`phases` when none is given; `quick` shrinks it to a smoke run); any field can be overridden with
`--config.FIELD=VALUE`: seed, seeds (runs seed, seed+1, ... vmapped in one
compiled call; figures show the first), overlay_N, theory.* (`TheoryConfig`) and gd.* (`GDConfig`).
Writes into --workdir: config.json, metrics.jsonl and tensorboard/ (docs/metrics.md), attention.png,
dynamics.png, test_error.png, summary.json and summary.md; with --config.gd.risk=population_exact also
overlay.png (GD on (E) at each overlay_N from the same start, beside the exact (P) run). The workdir is
the run's own (workdir.json, `posattn.ownership`): the same command on it runs again from the start, and
any other config or binary is refused. On several hosts run the same command on each; JAX detects TPU
pods, Slurm and Open MPI itself, and --coordinator_address/--num_processes/--process_id start any other
cluster (docs/distributed.md, "The theory regime").
"""

import dataclasses
import os
import time

import jax
import numpy as np
from absl import flags

from posattn import cli, io
from posattn import mesh as mesh_lib
from posattn.errors import ConfigError, check_seed
from posattn.papers.jsl22 import overlay, run_report
from posattn.plots import theory as figures
from posattn.theory import data, keys, population, presets
from posattn.theory import gd as gd_lib

_CONFIG = cli.define_config(
    "tpu_configs/theory.py", presets.SCHEMA, "A theory config file[:PRESET]"
)
_WORKDIR = flags.DEFINE_string("workdir", None, "where results are written", required=True)
_INITIALIZE_DISTRIBUTED = cli.define_distributed_flags()  # one process per host of a cluster


def main(argv):
    mesh_lib.use_cpu_cores()  # first, before JAX starts: one CPU device per core (docs/decisions.md)
    _INITIALIZE_DISTRIBUTED()  # before any computation (docs/distributed.md)
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    config = _CONFIG.value
    theory, gd = presets.configs_from(config)
    if gd.risk == "population_exact":
        population.check_config(theory, gd.population_method)
        sizes = presets.overlay_sizes(config)  # checked now, not after the long (P) run
    if config.seeds < 1 or (config.seeds > 1 and gd.risk == "population_exact"):
        raise ConfigError(
            f"seeds={config.seeds}: use seeds >= 1 (and 1 with risk=population_exact)"
        )
    seeds = list(range(config.seed, config.seed + config.seeds))
    check_seed(config.seed)  # its key is made after the claim: a dry run compiles nothing
    workdir = _WORKDIR.value
    cli.claim(workdir, "theory", config)  # its own, writable and locked, before any work
    key = keys.seed_key(config.seed)
    path = lambda name: os.path.join(workdir, name)
    io.write_json(
        path("config.json"),
        {
            "preset": config.preset,
            "seed": config.seed,
            "seeds": config.seeds,
            "theory": dataclasses.asdict(theory),
            "gd": dataclasses.asdict(gd),
            "jax_devices": [str(d) for d in jax.devices()],
        },
    )
    writer = (
        io.is_writer()
    )  # process 0 of a multi-process run prints and writes; every process computes
    if writer:
        print(
            f"preset {config.preset}: {theory}\n{gd}\non {jax.device_count()} device(s)", flush=True
        )

    progress = run_report.Progress(workdir, gd.steps)
    t0 = time.perf_counter()
    if config.seeds == 1:
        result = gd_lib.fit(key, theory, gd, on_eval=progress)
        runs = [(result.history, result.params, result.task)]
    else:  # history entries carry a seed axis; progress shows the mean over seeds
        result = gd_lib.fit_seeds(
            keys.consecutive_seed_keys(config.seed, config.seeds),
            theory,
            gd,
            on_eval=lambda e: progress({k: np.mean(v) for k, v in e.items()}),
        )
        pick = lambda tree, i: jax.tree.map(lambda a: a[i], tree)
        runs = [
            (
                {k: (v if k == "step" else v[:, i]) for k, v in result.history.items()},
                pick(result.params, i),
                pick(result.task, i),
            )
            for i in range(len(seeds))
        ]
    progress.close()
    per_seed = [run_report.seed_summary(s, *run, theory, gd) for s, run in zip(seeds, runs)]
    summary = run_report.run_summary(config.preset, per_seed, gd, time.perf_counter() - t0)

    history, params, task = runs[0]
    phase_spans = summary["phases"]["phases"]
    if writer:
        figures.write_png(
            figures.attention_figure(params["A"], data.same_set_mask(task.sets)),
            path("attention.png"),
        )
        figures.write_png(figures.dynamics_figure(history, phase_spans), path("dynamics.png"))
        figures.write_png(
            figures.error_figure(history, summary["label_noise_rate"], summary["glm_error"]),
            path("test_error.png"),
        )
    if gd.risk == "population_exact":  # (E) from the same start at each N, beside the exact (P) run
        done = lambda n, r: print(f"(E) N={n}: {r.seconds:.1f}s", flush=True)
        empirical = overlay.empirical_runs(
            key,
            theory,
            gd,
            sizes,
            task=result.task,
            params=result.init_params,
            on_done=done if writer else None,
        )
        e_histories = {n: r.history for n, r in empirical.items()}
        if writer:
            figures.write_png(
                figures.overlay_figure(history, e_histories, phase_spans), path("overlay.png")
            )
        summary["overlay"] = overlay.deviations(history, e_histories)
    io.write_text(path("summary.md"), run_report.summary_markdown(summary, theory, gd))
    io.write_json(path("summary.json"), summary)
    if writer:
        print("\n".join([*run_report.summary_lines(summary), f"results in {workdir}"]))


def entry():
    """`python -m posattn.experiments.theory` and the console script `posattn-theory` (see pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
