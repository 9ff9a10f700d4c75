r"""JSL22's theory regime end to end: GD on Eq. (T), patch association and the three phases.

    python -m experiments.theory --workdir=/tmp/theory                 # `small` preset, < 1 min on CPU
    python -m experiments.theory --preset=paper --seed=3 --workdir=DIR
    python -m experiments.theory --preset=small --D=36 --q=0.3 --risk=population_mc --workdir=DIR

Flags override the preset. Writes into --workdir: config.json, metrics.jsonl, attention.png,
dynamics.png, test_error.png, summary.json and summary.md; with --risk=population_exact also overlay.png
(GD on (E) at each --overlay_N from the same start, beside the exact (P) run).
"""
import dataclasses
import os
import time

import jax
import numpy as np
from absl import flags

from posattn import cli, io
from posattn.errors import ConfigError
from posattn.plots import theory as figures
from posattn.theory import config as config_lib
from posattn.theory import data, gd as gd_lib, keys, population, run_report
from posattn.theory.claims import overlay
from posattn.theory.presets import PRESETS, get_preset

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "small", f"one of {sorted(PRESETS)}")
flags.DEFINE_string("workdir", None, "where results are written", required=True)
flags.DEFINE_integer("seed", 0, "seed of the run (task, initialisation, samples)")
flags.DEFINE_integer("seeds", 1, "runs with seeds seed, seed+1, ..., vmapped in one compiled call; "
                     "figures show the first")
# TheoryConfig fields (None = the preset's value).
flags.DEFINE_integer("D", None, "number of patches")
flags.DEFINE_integer("C", None, "patches per set")
flags.DEFINE_integer("d", None, "patch dimension")
flags.DEFINE_float("q", None, "probability of a (spurious) feature outside the signal set")
flags.DEFINE_float("noise_std", None, "noise standard deviation s (default 1/sqrt(d))")
flags.DEFINE_enum("partition", None, config_lib.PARTITIONS, "sets: grid blocks or random")
flags.DEFINE_enum("noise", None, config_lib.NOISES, "patch noise")
flags.DEFINE_enum("activation", None, config_lib.ACTIVATIONS, "sigma of Eq. (T)")
flags.DEFINE_boolean("temperature", None, "divide attention logits by sqrt(d)")
flags.DEFINE_boolean("scale_by_D", None, "multiply the attention output by D")
flags.DEFINE_enum("dataset", None, config_lib.DATASETS, "Assumption 1 or the Figure-2 Gaussian data")
flags.DEFINE_integer("cnn_width", None, "hidden width of the Figure-2 CNN labeller")
flags.DEFINE_boolean("cnn_shared_filter", None, "Figure-2 labeller: one filter per block (True) or per "
                     "position")
# GDConfig fields.
flags.DEFINE_string("risk", None, f"one of {config_lib.RISKS}")
flags.DEFINE_enum("population_method", None, config_lib.POPULATION_METHODS,
                  "with --risk=population_exact: how (P) is enumerated (multiset: A three-valued)")
flags.DEFINE_integer("N", None, "samples of (E), or fresh samples per step of population_mc")
flags.DEFINE_integer("steps", None, "GD steps")
flags.DEFINE_float("lr", None, "step size of v")
flags.DEFINE_float("lr_A", None, "step size of A")
flags.DEFINE_float("a0", None, "A's frozen diagonal")
flags.DEFINE_float("v_std", None, "scale of v at initialisation")
flags.DEFINE_enum("v_init", None, ["random", "aligned"], "v^(0) random or along w*")
flags.DEFINE_integer("eval_every", None, "GD steps between history entries")
flags.DEFINE_integer("n_test", None, "fixed test set of the history")
flags.DEFINE_integer("n_final_test", None, "fresh samples of the final test error")
flags.DEFINE_list("overlay_N", [str(n) for n in overlay.DEFAULT_NS],
                  "with --risk=population_exact: the N of the (E) runs overlaid in overlay.png")

THEORY_FLAGS = [f.name for f in dataclasses.fields(config_lib.TheoryConfig) if f.name in FLAGS]
GD_FLAGS = [f.name for f in dataclasses.fields(config_lib.GDConfig) if f.name in FLAGS]


def configs_from_flags():
    """The preset, with every flag that was given replacing its field (validated on construction)."""
    theory, gd = get_preset(FLAGS.preset)
    overrides = lambda names: {n: FLAGS[n].value for n in names if FLAGS[n].value is not None}
    return (config_lib.TheoryConfig(**{**dataclasses.asdict(theory), **overrides(THEORY_FLAGS)}),
            config_lib.GDConfig(**{**dataclasses.asdict(gd), **overrides(GD_FLAGS)}))


def overlay_sizes_from_flag() -> list[int]:
    """--overlay_N as positive integers (none: no (E) runs), or a ConfigError."""
    try:
        sizes = [int(n) for n in FLAGS.overlay_N]
    except ValueError:
        sizes = [0]
    if any(n < 1 for n in sizes):
        raise ConfigError(f"overlay_N={','.join(FLAGS.overlay_N)}: give positive integers, e.g. 100,1000")
    return sizes


def main(argv):
    del argv
    theory, gd = configs_from_flags()
    if gd.risk == "population_exact":
        population.check_config(theory, gd.population_method)
        overlay_sizes = overlay_sizes_from_flag()  # checked now, not after the long (P) run
    if FLAGS.seeds < 1 or (FLAGS.seeds > 1 and gd.risk == "population_exact"):
        raise ConfigError(f"seeds={FLAGS.seeds}: use seeds >= 1 (and 1 with risk=population_exact)")
    workdir = FLAGS.workdir
    os.makedirs(workdir, exist_ok=True)
    path = lambda name: os.path.join(workdir, name)
    io.write_json(path("config.json"), {
        "preset": FLAGS.preset, "seed": FLAGS.seed, "seeds": FLAGS.seeds,
        "theory": dataclasses.asdict(theory), "gd": dataclasses.asdict(gd),
        "jax_devices": [str(d) for d in jax.devices()],
    })
    print(f"preset {FLAGS.preset}: {theory}\n{gd}\non {jax.device_count()} device(s)", flush=True)

    seeds = list(range(FLAGS.seed, FLAGS.seed + FLAGS.seeds))
    key = keys.seed_key(FLAGS.seed)
    progress = run_report.Progress(path("metrics.jsonl"), gd.steps)
    t0 = time.perf_counter()
    if FLAGS.seeds == 1:
        result = gd_lib.fit(key, theory, gd, on_eval=progress)
        runs = [(result.history, result.params, result.task)]
    else:  # history entries carry a seed axis; progress shows the mean over seeds
        result = gd_lib.fit_seeds(keys.consecutive_seed_keys(FLAGS.seed, FLAGS.seeds), theory, gd,
                                  on_eval=lambda e: progress({k: np.mean(v) for k, v in e.items()}))
        pick = lambda tree, i: jax.tree.map(lambda a: a[i], tree)
        runs = [({k: (v if k == "step" else v[:, i]) for k, v in result.history.items()},
                 pick(result.params, i), pick(result.task, i)) for i in range(len(seeds))]
    per_seed = [run_report.seed_summary(s, *run, theory, gd) for s, run in zip(seeds, runs)]
    summary = run_report.run_summary(FLAGS.preset, per_seed, gd, time.perf_counter() - t0)

    history, params, task = runs[0]
    phase_spans = summary["phases"]["phases"]
    figures.write_png(figures.attention_figure(params["A"], data.same_set_mask(task.sets)),
                      path("attention.png"))
    figures.write_png(figures.dynamics_figure(history, phase_spans), path("dynamics.png"))
    figures.write_png(figures.error_figure(history, summary["label_noise_rate"]), path("test_error.png"))
    if gd.risk == "population_exact":  # (E) from the same start at each N, beside the exact (P) run
        empirical = overlay.empirical_runs(key, theory, gd, overlay_sizes,
                                           task=result.task, params=result.init_params,
                                           on_done=lambda n, r: print(f"(E) N={n}: {r.seconds:.1f}s",
                                                                      flush=True))
        e_histories = {n: r.history for n, r in empirical.items()}
        figures.write_png(figures.overlay_figure(history, e_histories, phase_spans), path("overlay.png"))
        summary["overlay"] = overlay.deviations(history, e_histories)
    io.write_text(path("summary.md"), run_report.summary_markdown(summary, theory, gd))
    io.write_json(path("summary.json"), summary)
    for line in run_report.summary_lines(summary):
        print(line)
    print(f"results in {workdir}")


if __name__ == "__main__":
    cli.run(main)
