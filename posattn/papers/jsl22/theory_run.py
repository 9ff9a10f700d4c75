"""JSL22's theory regime as one run (`experiments/theory.py`): GD on Eq. (T) for a config of
`posattn.theory.presets`, over one or several seeds, its report (`run_report`), figures and, for the exact
population risk, the overlay of (E) runs (`overlay`).
"""

import os
import time

import jax
import numpy as np

from posattn import io, run_record
from posattn.errors import ConfigError, check_seed
from posattn.papers.jsl22 import overlay, run_report
from posattn.plots import save_png
from posattn.plots import theory as figures
from posattn.theory import data, keys, population, presets
from posattn.theory import gd as gd_lib


def run(config, workdir: str, claim) -> None:
    """Check `config` (`presets.SCHEMA`), `claim(workdir, "theory", config)` (the binary's `cli.claim`),
    fit its seeds (vmapped in one program) and write config.json, the figures, summary.md and
    summary.json into `workdir`; with risk=population_exact also (E) at each overlay_N beside (P)."""
    theory, gd = presets.configs_from(config)
    if gd.risk == "population_exact":
        population.check_config(theory, gd.population_method)
        sizes = presets.overlay_sizes(config)  # checked now, not after the long (P) run
    if config.seeds < 1 or (config.seeds > 1 and gd.risk == "population_exact"):
        raise ConfigError(
            f"seeds={config.seeds}: use seeds >= 1 (and 1 with risk=population_exact)"
        )
    if not isinstance(config.split_samples, bool):
        raise ConfigError(f"split_samples={config.split_samples!r}: give True or False")
    seeds = list(range(config.seed, config.seed + config.seeds))
    check_seed(config.seed)  # its key is made after the claim: a dry run compiles nothing
    # its own, writable and locked, before any work; a record of an older version completed by the schema
    claim(workdir, "theory", config, complete=presets.SCHEMA.complete)
    key = keys.seed_key(config.seed)
    path = lambda name: os.path.join(workdir, name)
    run_record.write_config(workdir, config)
    run_record.write_run(workdir)
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
            split_samples=config.split_samples,
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
        save_png(
            figures.attention_figure(params["A"], data.same_set_mask(task.sets)),
            path("attention.png"),
        )
        save_png(figures.dynamics_figure(history, phase_spans), path("dynamics.png"))
        save_png(
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
            save_png(figures.overlay_figure(history, e_histories, phase_spans), path("overlay.png"))
        summary["overlay"] = overlay.deviations(history, e_histories)
    io.write_text(path("summary.md"), run_report.summary_markdown(summary, theory, gd))
    io.write_json(path("summary.json"), summary)
    if writer:
        print("\n".join([*run_report.summary_lines(summary), f"results in {workdir}"]))
