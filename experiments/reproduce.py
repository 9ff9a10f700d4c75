r"""Every claim of JSL22's theory, measured beside what the paper states, from one command (SPEC 1.4-1.6).

    python -m experiments.reproduce --workdir=DIR            # full run, < 10 min on 2 CPU cores
    python -m experiments.reproduce --workdir=DIR --quick    # the same claims on small sizes, < 2 min

Runs the theory core (GD on (E), `paper` preset), GD on the exact population risk (P) (`small`
preset), the GLM baseline (Theorem 3.1), the construction without patch association (Theorem 3.2),
Figure 2 (`fig2` preset), transfer (Theorem 5.1) and the sample-size sweep, then writes DIR/report.md
(claim, what the paper states, what we measured, verdict, figure) and DIR/report.json (one entry per
claim with its numbers), with the figures as PNG in DIR. `docs/theory_results.md` is a committed copy.
"""
import dataclasses
import json
import math
import os
import time

import jax
import numpy as np
from absl import flags

from posattn import cli
from posattn.theory import claim_plots, construction, data, evaluation, glm, phases, plots, sweep, transfer
from posattn.theory import gd as gd_lib
from posattn.theory.metrics import off_diagonal_overlap, patch_association, top_c_overlap
from posattn.theory.presets import get_preset

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "where report.md, report.json and the figures are written",
                    required=True)
flags.DEFINE_bool("quick", False, "small sizes and few steps (a smoke run of every claim)")
flags.DEFINE_integer("seed", 0, "seed of every run")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes of each claim's runs [D]: the full plan follows the presets, `quick` shrinks them."""

    core_preset: str = "paper"
    core_steps: int | None = None  # None: the preset's
    core_N: int | None = None
    exact_steps: int | None = None
    glm_preset: str = "paper"
    glm_N: int | None = None
    glm_steps: int = 500
    fig2_steps: int | None = None
    fig2_N: int | None = None
    fig2_seeds: int = 5
    transfer_q: float = 0.55
    transfer_pretrain_steps: int = 1000
    transfer_pretrain_N: int | None = None
    transfer_sizes: tuple = (16, 32, 64, 128, 256, 512, 1024, 2048)
    transfer_seeds: int = 10
    transfer_steps: int = 800
    sweep_sizes: tuple = (100, 300, 1000, 3000, 10000)
    sweep_seeds: int = 8
    sweep_steps: int = 400
    n_final_test: int = 100_000


QUICK = Plan(core_preset="small", core_steps=300, core_N=5000, exact_steps=200, glm_N=2000, glm_steps=150,
             fig2_steps=200, fig2_N=4000, fig2_seeds=3, transfer_pretrain_steps=600, transfer_pretrain_N=5000,
             transfer_sizes=(16, 1024), transfer_seeds=10, transfer_steps=600, sweep_sizes=(100, 10000), sweep_seeds=4,
             sweep_steps=300, n_final_test=20_000)


def small_problem(q: float | None = None):
    """The transfer/sweep problem [D]: the `small` preset (its d = 32 reaches patch association in a few
    hundred steps; at d = 16 some rows of A stay unassociated for thousands), with q optionally raised."""
    cfg, gd = get_preset("small")
    return dataclasses.replace(cfg, q=cfg.q if q is None else q), dataclasses.replace(gd, n_test=2000)


def _with(gd, **changes):
    return dataclasses.replace(gd, **{k: v for k, v in changes.items() if v is not None})


def theory_core(key, plan, workdir, name, risk):
    """GD on (E) (`core`) or on the exact population risk (`exact`): patch association and the phases."""
    preset = plan.core_preset if risk == "empirical" else "small"
    cfg, gd = get_preset(preset)
    steps = plan.core_steps if risk == "empirical" else plan.exact_steps
    gd = _with(gd, risk=risk, steps=steps, eval_every=min(gd.eval_every, steps or gd.steps),
               N=plan.core_N if risk == "empirical" else None)
    result = gd_lib.fit(key, cfg, gd)
    final = evaluation.test_errors(jax.random.fold_in(key, 7), result.params, cfg, result.task,
                                   plan.n_final_test)
    info = phases.detect_phases(result.history)
    plots.plot_attention(os.path.join(workdir, f"{name}_attention.png"), result.params["A"],
                         data.same_set_mask(result.task.sets))
    plots.plot_dynamics(os.path.join(workdir, f"{name}_dynamics.png"), result.history, info["phases"])
    return {
        "preset": preset, "risk": risk, "N": gd.N, "steps": gd.steps, "seconds": result.seconds,
        "patch_association": info["patch_association_step"] is not None,
        "patch_association_step": info["patch_association_step"],
        "patch_association_share": float(result.history["patch_association_share"][-1]),
        "test_error": float(final["test_error"]), "label_noise_rate": float(final["label_noise_rate"]),
        "final_loss": float(result.history["loss"][-1]), "phases": info["phases"],
        "phases_in_order": info["in_order"], "figure": f"{name}_dynamics.png",
    }


def glm_claim(key, plan, workdir):
    cfg, gd = get_preset(plan.glm_preset)
    N = plan.glm_N or gd.N
    k_task, k_train, k_fit, k_test, k_oracle = jax.random.split(key, 5)
    task = data.make_task(k_task, cfg)
    X, y = data.sample(k_train, cfg, task, N)
    t0 = time.perf_counter()
    params, losses = glm.fit_glm(k_fit, X, y, steps=plan.glm_steps)
    train_error = float((y * glm.glm_forward(params, X) <= 0).mean())
    test_error = float(glm.glm_test_error(k_test, params, cfg, task, min(plan.n_final_test, 50_000)))
    return {"preset": plan.glm_preset, "N": N, "adam_steps": plan.glm_steps,
            "final_train_risk": float(losses[-1]), "train_error": train_error, "test_error": test_error,
            "oracle_error": float(glm.oracle_error(k_oracle, cfg, task)), "bound": 0.125,
            "seconds": time.perf_counter() - t0}


def construction_claim(key, plan, workdir):
    cfg, _ = get_preset("paper")
    task = data.make_task(key, cfg)
    params = construction.construction_params(cfg, task)
    errors = evaluation.test_errors(jax.random.fold_in(key, 1), params, cfg, task, plan.n_final_test)
    rows_meeting = construction.own_set_in_top_c(params["A"], task)
    plots.plot_attention(os.path.join(workdir, "construction_attention.png"), params["A"],
                         data.same_set_mask(task.sets), title="constructed A")
    return {"preset": "paper", "test_error": float(errors["test_error"]),
            "label_noise_rate": float(errors["label_noise_rate"]),
            "rows_whose_top_C_meets_own_set": int(rows_meeting.sum()),
            "patch_association": bool(patch_association(params["A"], task)[1]),
            "top_c_overlap": float(top_c_overlap(params["A"], task))}


def figure2_claim(key, plan, workdir):
    """Figure 2 over `plan.fig2_seeds` runs (each its own CNN labeller, start and data; vmapped). One
    run's off-diagonal overlap with the blocks moves by about 0.1 from seed to seed (48 entries of A
    decide it), so the verdict reads the mean over seeds; the figure shows the first seed's A."""
    cfg, gd = get_preset("fig2")
    gd = _with(gd, steps=plan.fig2_steps, N=plan.fig2_N)
    keys = jax.random.split(key, plan.fig2_seeds)
    runs = gd_lib.fit_seeds(keys, cfg, gd)
    pick = lambda tree, i: jax.tree.map(lambda a: a[i], tree)
    errors, overlaps = [], []
    for i, k in enumerate(keys):
        params, task = pick(runs.params, i), pick(runs.task, i)
        final = evaluation.test_errors(jax.random.fold_in(k, 7), params, cfg, task, plan.n_final_test)
        errors.append(float(final["test_error"]))
        # Off the diagonal: the frozen a0 = sqrt(d) is in every row's top C (`off_diagonal_overlap`).
        overlaps.append(float(off_diagonal_overlap(params["A"], task)))
    chance = (cfg.C - 1) / (cfg.D - 1)
    curve = np.asarray(runs.history["test_error"]).mean(1)  # mean over seeds, per evaluation step
    claim_plots.plot_figure2(os.path.join(workdir, "figure2.png"),
                             {"step": runs.history["step"], "test_error": curve}, runs.params["A"][0],
                             data.same_set_mask(runs.task.sets[0]), overlaps[0], chance)
    return {"steps": gd.steps, "N": gd.N, "d": cfg.d, "seeds": plan.fig2_seeds,
            "test_error": float(np.mean(errors)), "test_errors": errors,
            "off_diagonal_overlap": float(np.mean(overlaps)), "off_diagonal_overlaps": overlaps,
            "chance": chance, "best_mean_history_test_error": float(curve.min()),
            "step_of_best": int(runs.history["step"][curve.argmin()]), "seconds": runs.seconds}


def transfer_claim(key, plan, workdir):
    """[D] q = 0.55: the best GLM then errs ~6% > the 5% target, so reaching it takes attention; at the
    preset's q = 0.4 (GLM floor 3.6%) even 16 samples reach 5% from scratch, with no structure to use."""
    cfg, gd = small_problem(plan.transfer_q)
    out = transfer.transfer(key, cfg, _with(gd, steps=plan.transfer_steps),
                            pretrain_N=plan.transfer_pretrain_N or gd.N,
                            pretrain_steps=plan.transfer_pretrain_steps, sizes=plan.transfer_sizes,
                            seeds=plan.transfer_seeds)
    claim_plots.plot_transfer(os.path.join(workdir, "transfer.png"), out)
    out.pop("pretrained_A")
    return {"D": cfg.D, "d": cfg.d, "q": cfg.q, "steps": plan.transfer_steps, **out}


def sweep_claim(key, plan, workdir):
    cfg, gd = small_problem()
    keys = jax.random.split(key, plan.sweep_seeds)
    entries = sweep.run_sizes(keys, cfg=cfg, gd=_with(gd, steps=plan.sweep_steps),
                              sizes=plan.sweep_sizes, spread=1.0)  # one compiled call per size
    summary = sweep.summarise(entries, plan.sweep_sizes)
    rows = np.asarray(entries["patch_association_share"])
    summary["rows_with_patch_association"] = rows.mean(1).tolist()
    claim_plots.plot_sweep(os.path.join(workdir, "sweep.png"), summary)
    return {"D": cfg.D, "d": cfg.d, "q": cfg.q, "steps": plan.sweep_steps, **summary}


def pct(x):
    return "n/a" if x is None else f"{100 * x:.2f}%"


def verdicts(r: dict) -> list[dict]:
    """One row per claim: what the paper states, what was measured, whether it holds here."""
    core, exact, g, c, f2, t, s = (r[k] for k in ("core", "exact", "glm", "construction", "figure2",
                                                  "transfer", "sweep"))
    ok = lambda cond: "reproduced" if cond else "not reproduced"
    ratio = t["ratio"]
    ratio_text = "n/a" if ratio is None else (">= " if t["ratio_is_lower_bound"] else "") + f"{ratio:.0f}x"
    return [
        {"claim": "Theorems 4.1-4.2: GD on (E) learns patch association and generalises",
         "paper": "patch association; o(1) test error; phases I-II-III in order",
         "measured": f"patch association {core['patch_association']} "
                     f"({100 * core['patch_association_share']:.0f}% rows), test error "
                     f"{pct(core['test_error'])} (label noise {pct(core['label_noise_rate'])}), "
                     f"phases in order {core['phases_in_order']}",
         "verdict": ok(core["patch_association"] and core["phases_in_order"]),
         "figure": core["figure"]},
        {"claim": "GD on the exact population risk (P)",
         "paper": "patch association and vanishing population risk (Theorem 4.1)",
         "measured": f"patch association {exact['patch_association']}, final (P) {exact['final_loss']:.4f}, "
                     f"test error {pct(exact['test_error'])}",
         "verdict": ok(exact["patch_association"]), "figure": exact["figure"]},
        {"claim": "Theorem 3.1: generalised linear models fail",
         "paper": "any g(X) = phi(sum_j <w_j, X_j>) errs with probability >= 1/8",
         "measured": f"learned GLM test error {pct(g['test_error'])} (train {pct(g['train_error'])}); "
                     f"majority-link GLM with w_j = w*: {pct(g['oracle_error'])}",
         "verdict": ok(min(g["test_error"], g["oracle_error"]) >= 0.125), "figure": None},
        {"claim": "Theorem 3.2: generalising without patch association",
         "paper": "a transformer whose rows' top-C entries avoid their own set still generalises",
         "measured": f"test error {pct(c['test_error'])} vs label noise {pct(c['label_noise_rate'])}; "
                     f"rows whose top-C meets their set: {c['rows_whose_top_C_meets_own_set']}",
         "verdict": ok(c["test_error"] <= c["label_noise_rate"] + 0.01
                       and c["rows_whose_top_C_meets_own_set"] == 0),
         "figure": "construction_attention.png"},
        {"claim": "Figure 2: Gaussian data, structure not learnt",
         "paper": "test error about 6.5-7% after ~60 of 1000 steps; learnt A looks random",
         "measured": f"mean of {f2['seeds']} seeds: test error {pct(f2['test_error'])}; share of each "
                     f"row's C-1 largest off-diagonal entries in its block {f2['off_diagonal_overlap']:.2f} "
                     f"(chance {f2['chance']:.2f}; per seed "
                     f"{', '.join(f'{o:.2f}' for o in f2['off_diagonal_overlaps'])})",
         "verdict": ok(f2["test_error"] < 0.15 and f2["off_diagonal_overlap"] - f2["chance"] <= 0.1),
         "figure": "figure2.png"},
        {"claim": "Theorem 5.1: transfer with A frozen is sample-efficient",
         "paper": "far fewer downstream samples with A frozen than from scratch",
         "measured": f"smallest N' reaching {pct(t['target'])}: frozen A {t['frozen_A']['smallest_size']}, "
                     f"scratch {t['scratch']['smallest_size']} (ratio {ratio_text}; scratch never "
                     f"reaching it on the grid gives n/a; >= where frozen A reaches it at the grid's "
                     f"smallest N'); pre-training reached patch association: "
                     f"{t['pretrain']['patch_association']}",
         "verdict": ok(t["pretrain"]["patch_association"] and t["frozen_A"]["smallest_size"] is not None
                       and (ratio is None or ratio >= 5)),
         "figure": "transfer.png"},
        {"claim": "Sample complexity: patch association against N",
         "paper": "enough samples give patch association and small test error (Theorem 4.2)",
         "measured": "; ".join(f"N={n}: {100 * p:.0f}% runs ({100 * rows:.0f}% rows), "
                               f"error {pct(e)}" for n, p, rows, e in zip(
                                   s["sizes"], s["patch_association_rate"],
                                   s["rows_with_patch_association"], s["test_error_mean"])),
         "verdict": ok(s["patch_association_rate"][-1] >= 0.5), "figure": "sweep.png"},
    ]


def report_markdown(rows, results, plan, seconds, quick) -> str:
    lines = [f"# JSL22 theory claims, measured{' (--quick)' if quick else ''}", "",
             f"`python -m experiments.reproduce --workdir=DIR{' --quick' if quick else ''}` "
             f"(seed {results['seed']}), {seconds:.0f}s on {jax.device_count()} x "
             f"{jax.devices()[0].device_kind}, {os.cpu_count()} CPU cores. Numbers: report.json.", "",
             "| claim | paper | measured | verdict | figure |", "|---|---|---|---|---|"]
    for r in rows:
        fig = f"[{r['figure']}]({r['figure']})" if r["figure"] else ""
        lines.append(f"| {r['claim']} | {r['paper']} | {r['measured']} | {r['verdict']} | {fig} |")
    lines += ["", "Seconds per claim: " + ", ".join(
        f"{k} {v:.0f}" for k, v in results["seconds"].items()), ""]
    return "\n".join(lines)


CLAIMS = {"core": lambda k, p, w: theory_core(k, p, w, "core", "empirical"),
          "exact": lambda k, p, w: theory_core(k, p, w, "exact", "population_exact"),
          "glm": glm_claim, "construction": construction_claim, "figure2": figure2_claim,
          "transfer": transfer_claim, "sweep": sweep_claim}


def main(argv):
    del argv
    plan = QUICK if FLAGS.quick else Plan()
    workdir = FLAGS.workdir
    os.makedirs(workdir, exist_ok=True)
    key = jax.random.PRNGKey(FLAGS.seed)
    results = {"seed": FLAGS.seed, "quick": FLAGS.quick, "plan": dataclasses.asdict(plan), "seconds": {}}
    t0 = time.perf_counter()
    for i, (name, claim) in enumerate(CLAIMS.items()):
        t = time.perf_counter()
        results[name] = claim(jax.random.fold_in(key, i), plan, workdir)
        results["seconds"][name] = time.perf_counter() - t
        print(f"{name}: {results['seconds'][name]:.1f}s", flush=True)
    seconds = time.perf_counter() - t0
    rows = verdicts(results)
    results["claims"] = rows
    results["total_seconds"] = seconds
    # report.json last, written atomically: its presence means the run completed.
    with open(os.path.join(workdir, "report.md"), "w") as f:
        f.write(report_markdown(rows, results, plan, seconds, FLAGS.quick))
    tmp = os.path.join(workdir, "report.json.tmp")
    with open(tmp, "w") as f:
        json.dump(results, f, indent=2, default=lambda x: np.asarray(x).tolist())
    os.replace(tmp, os.path.join(workdir, "report.json"))
    for r in rows:
        print(f"{r['verdict']:>15}  {r['claim']}: {r['measured']}")
    print(f"{seconds:.0f}s; report in {workdir}/report.md")


if __name__ == "__main__":
    cli.run(main)
