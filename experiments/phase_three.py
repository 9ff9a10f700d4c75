r"""Why alpha falls in phase III where JSL22 says it grows: the exact population dynamics at several q.

    python -m posattn.experiments.phase_three --workdir=DIR            # `small` preset, q = 0.4, 0.2, 0.1
    python -m posattn.experiments.phase_three --config=tpu_configs/phase_three.py:quick --workdir=DIR

`--config=FILE[:ARG]` (default tpu_configs/phase_three.py) with fields preset, q and steps, each
overridable as `--config.FIELD=VALUE`; `:quick` runs 100 steps.

Runs GD on the exact population risk (P) as its reduced recursions (`population.reduced`, v on span(w*))
from the same start for each q, and splits the drift of alpha, -dR/dalpha, between the patterns the model
misclassifies and the others (`reduced.alpha_drift_split`). Writes
summary.json, summary.md and phase_three.png (docs/theory_results.md, "Phase III").

One host, one device: the exact population recursions hold a few vectors per step, nothing a second
host would share.
"""

import dataclasses
import os

import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags

from posattn import cli, io
from posattn.errors import INT32_MAX, ConfigError
from posattn.plots import theory as figures
from posattn.theory import population
from posattn.theory.population import reduced
from posattn.theory.presets import get_preset

# preset: the problem (its q is replaced by each of q); steps: GD steps on (P) (0: the preset's)
SCHEMA = cli.Schema(
    "a phase_three config (preset, q, steps)",
    lambda fields: ml_collections.ConfigDict({"preset": "small", "q": (0.4, 0.2, 0.1), "steps": 0}),
    lambda c: c.update(steps=100),
    "phase_three",
)
_CONFIG = cli.define_config(
    "tpu_configs/phase_three.py", SCHEMA, "The problem and the q to compare"
)
_WORKDIR = flags.DEFINE_string("workdir", None, "where results are written", required=True)
_ALPHA0 = 0.02  # the start, v = alpha0 w* with A = a0 I, the same for every q


def main(argv):
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    config = _CONFIG.value
    base, gd = get_preset(config.preset)
    try:
        qs = [float(q) for q in config.q]
    except (TypeError, ValueError):
        qs = []
    if not qs:
        raise ConfigError(f"q={config.q}: give probabilities, e.g. --config.q=0.4,0.1")
    # every problem before any work: q outside [0, 1] is a ConfigError, and so is a preset whose data
    # have no exact population dynamics (Figure 2's Gaussian CNN data)
    configs = {q: dataclasses.replace(base, q=q) for q in qs}
    for cfg in configs.values():
        population.check_config(cfg, "multiset")
    steps = config.steps or gd.steps
    if not 1 <= steps <= INT32_MAX:
        raise ConfigError(f"steps={steps} must lie in [1, {INT32_MAX:,}]")
    workdir = _WORKDIR.value
    # its own, writable and locked, before any work
    cli.claim(workdir, "phase_three", {"preset": config.preset, "q": qs, "steps": steps})
    runs, rows = {}, []
    for q, cfg in configs.items():
        start = reduced.ReducedState(*(jnp.float32(x) for x in (_ALPHA0, 0.0, 0.0, 0.0)))
        states, risks = reduced.reduced_trajectory(start, cfg, gd.a0, gd.lr, gd.lr_A, steps)
        alpha = np.asarray(states.alpha)
        gap = np.asarray(states.gamma - states.rho)
        marks = sorted({int(np.argmax(alpha)), steps // 2, steps - 1})
        splits = [
            reduced.alpha_drift_split(alpha[i], states.gamma[i], states.rho[i], cfg, gd.a0)
            for i in marks
        ]
        runs[q] = {
            "step": np.arange(1, steps + 1),
            "alpha": alpha,
            "split_steps": [i + 1 for i in marks],
            "splits": splits,
        }
        rows.append(
            {
                "q": q,
                "alpha_max": float(alpha.max()),
                "alpha_max_step": int(alpha.argmax()) + 1,
                "alpha_final": float(alpha[-1]),
                "gamma_minus_rho_final": float(gap[-1]),
                "risk_final": float(risks[-1]),
                "full_set_mass": splits[0]["full_set_mass"],
                "splits": dict(zip(runs[q]["split_steps"], splits)),
            }
        )
        print(
            f"q={q}: alpha max {alpha.max():.4f} at step {alpha.argmax() + 1}, final {alpha[-1]:.4f}; "
            f"gamma - rho {gap[-1]:.2f}; P[a set all +-1] {splits[0]['full_set_mass']:.4%}",
            flush=True,
        )
    figures.write_png(figures.phase_three_figure(runs), os.path.join(workdir, "phase_three.png"))
    io.write_json(
        os.path.join(workdir, "summary.json"),
        {"preset": config.preset, "steps": steps, "alpha0": _ALPHA0, "runs": rows},
    )
    lines = [
        f"# Phase III on the exact population dynamics (`{config.preset}`, {steps} GD steps on (P))",
        "",
        "| q | P[a set besides the signal set all +-1] | alpha max (step) | final alpha | final "
        "gamma - rho | final (P) | at the end: P[yF <= 0] | drift of alpha at the end: classified / "
        "misclassified / total |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        end = r["splits"][steps]
        lines.append(
            f"| {r['q']} | {r['full_set_mass']:.3%} | {r['alpha_max']:.4f} ({r['alpha_max_step']}) | "
            f"{r['alpha_final']:.4f} | {r['gamma_minus_rho_final']:.2f} | {r['risk_final']:.4f} | "
            f"{end['misclassified_mass']:.3%} | {end['classified']:+.4f} / {end['misclassified']:+.4f}"
            f" / {end['total']:+.5f} |"
        )
    io.write_text(os.path.join(workdir, "summary.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


def entry():
    """`python -m posattn.experiments.phase_three` and the console script `posattn-phase-three` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
