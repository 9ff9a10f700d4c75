r"""JSL22's theory regime end to end: GD on Eq. (T), patch association and the three phases.

    python -m experiments.theory --workdir=/tmp/theory                 # `small` preset, < 1 min on CPU
    python -m experiments.theory --preset=paper --seed=3 --workdir=DIR
    python -m experiments.theory --preset=small --D=36 --q=0.3 --risk=population_mc --workdir=DIR

Flags override the preset. Writes into --workdir: config.json, metrics.jsonl, attention.png,
dynamics.png, test_error.png, summary.json and summary.md; with --risk=population_exact also overlay.png
(GD on (E) at each --overlay_N from the same start, beside the exact (P) run).
"""
import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from posattn import cli
from posattn.errors import ConfigError
from posattn.theory import config as config_lib
from posattn.theory import data, evaluation, gd as gd_lib, overlay, phases, plots, population
from posattn.theory.metrics import off_diagonal_overlap
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


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.generic, np.ndarray)):
        return x.item() if np.ndim(x) == 0 else x.tolist()
    return x


def write_json(path, obj):
    """Write atomically, so a file that exists is complete."""
    with open(path + ".tmp", "w") as f:
        json.dump(_jsonable(obj), f, indent=2)
    os.replace(path + ".tmp", path)


class Progress:
    """Prints step, loss, test error, steps/s and ETA, and appends each entry to metrics.jsonl."""

    def __init__(self, path, total):
        self.path, self.total, self.t0 = path, total, None
        open(path, "w").close()

    def __call__(self, entry):
        now = time.perf_counter()
        self.t0 = self.t0 or now
        step = int(entry["step"])
        with open(self.path, "a") as f:
            f.write(json.dumps(_jsonable(entry)) + "\n")
        rate = step / (now - self.t0) if step and now > self.t0 else float("nan")
        eta = (self.total - step) / rate if rate == rate and rate > 0 else float("nan")
        print(f"step {step:6d}/{self.total}  loss {float(entry['loss']):.4g}  "
              f"test error {100 * float(entry['test_error']):6.2f}%  "
              f"patch assoc. {100 * float(entry['patch_association_share']):5.1f}% rows  "
              f"{rate:8.1f} steps/s  ETA {eta:6.1f}s", flush=True)


def summary_markdown(s, theory, gd):
    p = s["phases"]
    lines = [
        f"# Theory run: preset `{s['preset']}`, seed {s['seed']}",
        "",
        f"D={theory.D}, C={theory.C}, d={theory.d}, q={theory.q}, risk={gd.risk}, N={gd.N}, "
        f"steps={gd.steps}, lr={gd.lr}, lr_A={gd.lr_A}, a0={gd.a0}",
        "",
        "| quantity | measured | JSL22 says |",
        "|---|---|---|",
        f"| patch association (Def. 2.2) | {s['patch_association']} (from step "
        f"{s['patch_association_step']}) | reached (Theorems 4.1, 4.2) |",
        f"| test error | {100 * s['test_error']:.2f}% | small (o(1)) |",
        f"| label-noise rate P[y f*(X) <= 0] | {100 * s['label_noise_rate']:.2f}% | "
        f"d^-omega(1) |",
        *([f"| P[f*(X) != yC]: a set besides the signal set all +1 or all -1 | "
           f"{100 * s['f_star_not_yC_rate']:.2f}% | about 2 (L-1) (q/2)^C = "
           f"{100 * 2 * (theory.L - 1) * (theory.q / 2) ** theory.C:.2f}% (SPEC 1.1) |"]
          if theory.dataset == "structured" else []),
        f"| phases I / II / III | {p['phases']['I']} / {p['phases']['II']} / {p['phases']['III']} | "
        f"in this order |",
        f"| phases in order | {p['in_order']} | yes |",
        f"| wall time | {s['seconds']:.1f}s | |",
        "",
        "Figures: `attention.png` (A beside the true sets), `dynamics.png` (phases shaded), "
        "`test_error.png`" + (", `overlay.png` ((E) at several N beside the exact (P))."
                              if gd.risk == "population_exact" else "."),
    ]
    if "overlay" in s:  # (E) against (P) from the same start, largest gaps over the run
        lines += ["", "| (E) at N | max gap in gamma - rho | max gap in alpha | final risk (E) | "
                  "final risk (P) |", "|---|---|---|---|---|"]
        lines += [f"| {N:,} | {o['max_gap_gamma_minus_rho']:.3g} | {o['max_gap_alpha']:.3g} | "
                  f"{o['final_risk']:.4f} | {o['final_risk_P']:.4f} |" for N, o in s["overlay"].items()]
    return "\n".join(lines) + "\n"


def seed_summary(seed, history, params, task, theory, gd) -> dict:
    """Patch association, phases and final errors (on fresh samples) of one run."""
    key = jax.random.PRNGKey(seed)
    final = evaluation.test_errors(jax.random.fold_in(key, 7), params, theory, task, gd.n_final_test)
    phase_info = phases.detect_phases(history)
    return {
        "seed": seed,
        "patch_association": phase_info["patch_association_step"] is not None,
        "patch_association_step": phase_info["patch_association_step"],
        "patch_association_share_final": float(history["patch_association_share"][-1]),
        "off_diagonal_overlap": float(off_diagonal_overlap(params["A"], task)),  # chance (C-1)/(D-1)
        "test_error": float(final["test_error"]),
        "label_noise_rate": float(final["label_noise_rate"]),
        "f_star_not_yC_rate": float(final["f_star_not_yC_rate"]),
        "final_loss": float(history["loss"][-1]),
        "phases": phase_info,
    }


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
        population.check_config(theory)
        overlay_sizes = overlay_sizes_from_flag()  # checked now, not after the long (P) run
    if FLAGS.seeds < 1 or (FLAGS.seeds > 1 and gd.risk == "population_exact"):
        raise ConfigError(f"seeds={FLAGS.seeds}: use seeds >= 1 (and 1 with risk=population_exact)")
    workdir = FLAGS.workdir
    os.makedirs(workdir, exist_ok=True)
    write_json(os.path.join(workdir, "config.json"), {
        "preset": FLAGS.preset, "seed": FLAGS.seed, "seeds": FLAGS.seeds,
        "theory": dataclasses.asdict(theory), "gd": dataclasses.asdict(gd),
        "jax_devices": [str(d) for d in jax.devices()],
    })
    print(f"preset {FLAGS.preset}: {theory}\n{gd}\non {jax.device_count()} device(s)", flush=True)

    seeds = list(range(FLAGS.seed, FLAGS.seed + FLAGS.seeds))
    key = jax.random.PRNGKey(FLAGS.seed)
    progress = Progress(os.path.join(workdir, "metrics.jsonl"), gd.steps)
    t0 = time.perf_counter()
    if FLAGS.seeds == 1:
        result = gd_lib.fit(key, theory, gd, on_eval=progress)
        runs = [(result.history, result.params, result.task)]
    else:  # history entries carry a seed axis; progress shows the mean over seeds
        result = gd_lib.fit_seeds(jnp.stack([jax.random.PRNGKey(s) for s in seeds]), theory, gd,
                                  on_eval=lambda e: progress({k: np.mean(v) for k, v in e.items()}))
        pick = lambda tree, i: jax.tree.map(lambda a: a[i], tree)
        runs = [({k: (v if k == "step" else v[:, i]) for k, v in result.history.items()},
                 pick(result.params, i), pick(result.task, i)) for i in range(len(seeds))]
    per_seed = [seed_summary(s, *run, theory, gd) for s, run in zip(seeds, runs)]
    seconds = time.perf_counter() - t0
    summary = {"preset": FLAGS.preset, **per_seed[0], "steps": gd.steps, "seconds": seconds}
    if FLAGS.seeds > 1:
        summary["seeds"] = {
            "count": len(seeds),
            "patch_association": sum(r["patch_association"] for r in per_seed),
            "phases_in_order": sum(r["phases"]["in_order"] for r in per_seed),
            "test_error_mean": float(np.mean([r["test_error"] for r in per_seed])),
            "per_seed": per_seed,
        }

    history, params, task = runs[0]
    phase_spans = summary["phases"]["phases"]
    plots.plot_attention(os.path.join(workdir, "attention.png"), params["A"],
                         data.same_set_mask(task.sets))
    plots.plot_dynamics(os.path.join(workdir, "dynamics.png"), history, phase_spans)
    plots.plot_test_error(os.path.join(workdir, "test_error.png"), history,
                          summary["label_noise_rate"])
    if gd.risk == "population_exact":  # (E) from the same start at each N, beside the exact (P) run
        empirical = overlay.empirical_runs(key, theory, gd, overlay_sizes,
                                           task=result.task, params=result.init_params,
                                           on_done=lambda n, r: print(f"(E) N={n}: {r.seconds:.1f}s",
                                                                      flush=True))
        e_histories = {n: r.history for n, r in empirical.items()}
        plots.plot_overlay(os.path.join(workdir, "overlay.png"), history, e_histories, phase_spans)
        summary["overlay"] = overlay.deviations(history, e_histories)
    with open(os.path.join(workdir, "summary.md"), "w") as f:
        f.write(summary_markdown(summary, theory, gd))
    write_json(os.path.join(workdir, "summary.json"), summary)
    print(f"patch association: {summary['patch_association']} (step "
          f"{summary['patch_association_step']}); test error {100 * summary['test_error']:.2f}% vs "
          f"label noise {100 * summary['label_noise_rate']:.2f}%; phases in order: "
          f"{summary['phases']['in_order']}; {seconds:.1f}s; results in {workdir}")
    if FLAGS.seeds > 1:
        agg = summary["seeds"]
        print(f"{agg['count']} seeds: patch association in {agg['patch_association']}, phases in order "
              f"in {agg['phases_in_order']}, mean test error {100 * agg['test_error_mean']:.2f}%")


if __name__ == "__main__":
    cli.run(main)
