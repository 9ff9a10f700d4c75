"""Why alpha falls in phase III where JSL22 says it grows: the exact population dynamics at several q
(`experiments/phase_three.py`; docs/theory_results.md, "Phase III").

GD on the exact population risk (P) as its reduced recursions (`population.reduced`, v on span(w*))
from the same start for each q, the drift of alpha, -dR/dalpha, split between the patterns the model
misclassifies and the others (`reduced.alpha_drift_split`), and the table of the result.
"""

import dataclasses
import os

import jax.numpy as jnp
import ml_collections
import numpy as np

from posattn import configs, io
from posattn.errors import INT32_MAX, ConfigError
from posattn.plots import save_png
from posattn.plots import theory as figures
from posattn.theory import population
from posattn.theory.population import reduced
from posattn.theory.presets import get_preset

# preset: the problem (its q is replaced by each of q); steps: GD steps on (P) (0: the preset's)
SCHEMA = configs.Schema(
    "a phase_three config (preset, q, steps)",
    lambda fields: ml_collections.ConfigDict({"preset": "small", "q": (0.4, 0.2, 0.1), "steps": 0}),
    lambda c: c.update(steps=100),
    "phase_three",
)
ALPHA0 = 0.02  # the start, v = alpha0 w* with A = a0 I, the same for every q


def run(config, workdir: str, claim) -> None:
    """Check `config` (SCHEMA), `claim(workdir, "phase_three", record)` (the binary's `cli.claim`), run
    each q and write phase_three.png, summary.json and summary.md into `workdir`."""
    base, gd = get_preset(config.preset)
    try:
        qs = [float(q) for q in config.q]
    except (TypeError, ValueError):
        qs = []
    if not qs:
        raise ConfigError(f"q={config.q}: give probabilities, e.g. --config.q=0.4,0.1")
    # every problem before any work: q outside [0, 1] is a ConfigError, and so is a preset whose data
    # have no exact population dynamics (Figure 2's Gaussian CNN data)
    problems = {q: dataclasses.replace(base, q=q) for q in qs}
    for cfg in problems.values():
        population.check_config(cfg, "multiset")
    steps = config.steps or gd.steps
    if not 1 <= steps <= INT32_MAX:
        raise ConfigError(f"steps={steps} must lie in [1, {INT32_MAX:,}]")
    # its own, writable and locked, before any work
    claim(workdir, "phase_three", {"preset": config.preset, "q": qs, "steps": steps})
    runs, rows = {}, []
    for q, cfg in problems.items():
        start = reduced.ReducedState(*(jnp.float32(x) for x in (ALPHA0, 0.0, 0.0, 0.0)))
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
    save_png(figures.phase_three_figure(runs), os.path.join(workdir, "phase_three.png"))
    io.write_json(
        os.path.join(workdir, "summary.json"),
        {"preset": config.preset, "steps": steps, "alpha0": ALPHA0, "runs": rows},
    )
    table = summary_markdown(config.preset, steps, rows)
    io.write_text(os.path.join(workdir, "summary.md"), table + "\n")
    print(table)


def summary_markdown(preset: str, steps: int, rows: list[dict]) -> str:
    """The table of summary.md: per q, the mass of patterns with a set all +-1, alpha's peak and end, and
    the drift of alpha at the end split between classified and misclassified patterns."""
    lines = [
        f"# Phase III on the exact population dynamics (`{preset}`, {steps} GD steps on (P))",
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
    return "\n".join(lines)
