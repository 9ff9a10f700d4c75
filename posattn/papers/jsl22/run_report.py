"""What a theory run reports: progress lines and metrics.jsonl while it runs, then a summary per seed
(patch association, phases, final errors on fresh samples) as JSON and as markdown beside the paper.

`experiments/theory.py` hands its runs to these functions and writes what they return.
"""

import time

import numpy as np

from posattn import progress
from posattn.metric_log import MetricLog, from_theory
from posattn.papers.jsl22 import glm, phases
from posattn.theory import evaluation, keys
from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.metrics import off_diagonal_overlap


class Progress:
    """`on_eval` of `gd.fit`: appends each history entry to workdir/metrics.jsonl and TensorBoard (the
    shared schema of `posattn.metric_log`) and prints step, loss, test error, rows with patch
    association, steps/s and ETA. `close()` when the run ends."""

    def __init__(self, workdir, total: int):
        self.total, self.t0 = total, None
        self.log = MetricLog(workdir, fresh=True)  # a rerun starts its own record

    def close(self) -> None:
        self.log.close()

    def __call__(self, entry: dict) -> None:
        now = time.perf_counter()
        self.t0 = self.t0 or now
        step = int(entry["step"])
        self.log.write(from_theory(entry))
        rate = step / (now - self.t0) if step and now > self.t0 else float("nan")
        eta = (self.total - step) / rate if rate == rate and rate > 0 else None
        progress.say(
            f"step {step:6d}/{self.total}  loss {float(entry['loss']):.4g}  "
            f"test error {100 * float(entry['test_error']):6.2f}%  "
            f"patch assoc. {100 * float(entry['patch_association_share']):5.1f}% rows  "
            f"{rate:8.1f} steps/s  ETA {progress.eta(eta)}"
        )


def seed_summary(
    seed: int, history: dict, params, task, theory: TheoryConfig, gd: GDConfig
) -> dict:
    """Patch association, the phase statements (against the GLM reference) and final errors (on the
    run's fresh "final_test" samples) of one run."""
    streams = keys.run_keys(keys.seed_key(seed))
    # Dispatched before anything waits on a result: the programs below compile while the final test
    # (the longest of the three) runs.
    final = evaluation.test_errors(streams["final_test"], params, theory, task, gd.n_final_test)
    overlap = off_diagonal_overlap(params["A"], task)  # chance (C-1)/(D-1)
    glm_error = glm.phase_one_reference(streams["glm_reference"], theory, task)
    phase_info = phases.detect_phases(history, logit_scale=theory.logit_scale, glm_error=glm_error)
    return {
        "seed": seed,
        "patch_association": phase_info["patch_association_step"] is not None,
        "patch_association_step": phase_info["patch_association_step"],
        "patch_association_share_final": float(history["patch_association_share"][-1]),
        "off_diagonal_overlap": float(overlap),
        "test_error": float(final["test_error"]),
        "label_noise_rate": float(final["label_noise_rate"]),
        "f_star_not_yC_rate": float(final["f_star_not_yC_rate"]),
        "final_loss": float(history["loss"][-1]),
        "glm_error": glm_error,
        "phases": phase_info,
    }


def run_summary(preset: str, per_seed: list[dict], gd: GDConfig, seconds: float) -> dict:
    """The run's summary.json: the first seed's summary, and with several seeds their counts."""
    summary = {"preset": preset, **per_seed[0], "steps": gd.steps, "seconds": seconds}
    if len(per_seed) > 1:
        summary["seeds"] = {
            "count": len(per_seed),
            "patch_association": sum(r["patch_association"] for r in per_seed),
            "phases_in_order": sum(r["phases"]["in_order"] for r in per_seed),
            "test_error_mean": float(np.mean([r["test_error"] for r in per_seed])),
            "per_seed": per_seed,
        }
    return summary


def summary_lines(s: dict) -> list[str]:
    """The lines printed at the end of a run."""
    named = lambda holds: [
        f"{r['phase']} {r['statement']}"
        for r in s["phases"]["statements"]  # noqa: E731
        if r["holds"] is holds
    ]
    failed, unmeasured = named(False), named(None)
    lines = [
        *phases.statement_lines(s["phases"]),
        f"patch association: {s['patch_association']} (step {s['patch_association_step']}); test "
        f"error {100 * s['test_error']:.2f}% vs label noise {100 * s['label_noise_rate']:.2f}%; "
        f"phases in order: {s['phases']['in_order']}"
        + (f" (not: {'; '.join(failed)})" if failed else "")
        + (f" (not measured: {'; '.join(unmeasured)})" if unmeasured else "")
        + f"; {s['seconds']:.1f}s",
    ]
    if "seeds" in s:
        agg = s["seeds"]
        lines.append(
            f"{agg['count']} seeds: patch association in {agg['patch_association']}, phases in "
            f"order in {agg['phases_in_order']}, mean test error "
            f"{100 * agg['test_error_mean']:.2f}%"
        )
    return lines


def summary_markdown(s: dict, theory: TheoryConfig, gd: GDConfig) -> str:
    """summary.md: the measured numbers beside what JSL22 states."""
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
        f"| label-noise rate P[y f*(X) <= 0] | {100 * s['label_noise_rate']:.2f}% | d^-omega(1) |",
        *(
            [
                f"| P[f*(X) != yC]: a set besides the signal set all +1 or all -1 | "
                f"{100 * s['f_star_not_yC_rate']:.2f}% | about 2 (L-1) (q/2)^C = "
                f"{100 * 2 * (theory.L - 1) * (theory.q / 2) ** theory.C:.2f}% (from Assumption 1) |"
            ]
            if theory.dataset == "structured"
            else []
        ),  # the formula is Assumption 1's
        f"| phases I / II / III (steps) | {p['phases']['I']} / {p['phases']['II']} / "
        f"{p['phases']['III']} | in this order |",
        *[
            f"| phase {r['phase']}: {r['statement']} | {phases.VERDICTS[r['holds']]}: {phases.format_measured(r['measured'])} | "
            f"{r['paper']} |"
            for r in p["statements"]
        ],
        f"| phases in order (every statement holds; I.b where a GLM reference exists) | {p['in_order']} | yes |",
        f"| wall time | {s['seconds']:.1f}s | |",
        "",
        "Figures: `attention.png` (A beside the true sets), `dynamics.png` (phases shaded), "
        "`test_error.png`"
        + (
            ", `overlay.png` ((E) at several N beside the exact (P))."
            if gd.risk == "population_exact"
            else "."
        ),
    ]
    if "overlay" in s:  # (E) against (P) from the same start, largest gaps over the run
        lines += [
            "",
            "| (E) at N | max gap in gamma - rho | max gap in alpha | final risk (E) | "
            "final risk (P) |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {N:,} | {o['max_gap_gamma_minus_rho']:.3g} | {o['max_gap_alpha']:.3g} | "
            f"{o['final_risk']:.4f} | {o['final_risk_P']:.4f} |"
            for N, o in s["overlay"].items()
        ]
    return "\n".join(lines) + "\n"
