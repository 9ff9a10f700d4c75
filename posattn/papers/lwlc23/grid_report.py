"""LWLC23's deeper-ViT claims beside our measurements on the token grids: one row (claim | paper | ours |
verdict) each, decided by the criterion the row states (`experiments.token_grid` writes them).

`cells` are the dictionaries of `grid_experiment.run_cell`, one per (R, attention kind, start, seed). A
curve is one (attention kind, start); its point at R is the mean over seeds with a 95% t-interval.

The criterion of "accuracy rises with alpha_*", fixed before the Fashion-MNIST runs: each seed's
least-squares slope of test accuracy on alpha_* over the curve's R values; the accuracy rises when the
95% t-interval of the mean slope over seeds lies above 0, falls when it lies below 0, and is not
resolved otherwise (one seed: the sign of its slope, no interval).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from posattn.papers.lwlc23.published import GRID_ACCURACY

# cell fields averaged over seeds (lists element-wise)
_MEAN_FIELDS = (
    "test_accuracy",
    "test_loss",
    "train_accuracy",
    "relevant_mass",
    "accuracy_attention_pruned",
    "accuracy_random_pruned",
    "relevant_removed_attention",
    "relevant_removed_random",
    "seconds",
)


def interval(values) -> tuple[float, float, float]:
    """(mean, low, high): the 95% t-interval of the mean of `values` (NaN bounds for one value)."""
    v = np.asarray(values, float)
    mean = float(v.mean())
    if len(v) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return mean, mean - half, mean + half


def curve_name(kind: str, start: str) -> str:
    return f"{kind}, {'pre-trained' if start == 'pretrained' else 'from scratch'}"


def curves(cells: list[dict]) -> dict[str, list[dict]]:
    """{curve name: one point per R (sorted)}: each point the cells of its R (over seeds) averaged
    (`_MEAN_FIELDS`), with "accuracy_interval" (mean, low, high), "seeds" and the per-seed "by_seed"
    accuracies."""
    groups: dict[tuple, dict[int, list[dict]]] = {}
    for cell in cells:
        key = (cell["attention"], cell["start"])
        groups.setdefault(key, {}).setdefault(cell["R"], []).append(cell)
    out = {}
    for (kind, start), by_R in groups.items():
        points = []
        for R in sorted(by_R):
            cs = sorted(by_R[R], key=lambda c: c["seed"])
            point = {k: v for k, v in cs[0].items() if k not in _MEAN_FIELDS}
            for field in _MEAN_FIELDS:
                if field in cs[0]:
                    point[field] = np.mean([c[field] for c in cs], axis=0).tolist()
            point.update(
                attention=kind,
                start=start,
                seeds=[c["seed"] for c in cs],
                by_seed=[c["test_accuracy"] for c in cs],
                accuracy_interval=interval([c["test_accuracy"] for c in cs]),
            )
            points.append(point)
        out[curve_name(kind, start)] = points
    return out


def slope_verdict(points: list[dict]) -> tuple[str, str]:
    """(the per-seed slopes d accuracy / d alpha_* with their interval, the verdict of the module doc's
    criterion), over the seeds every point of the curve has."""
    if len(points) < 2:
        return "one alpha_* only", "no trend measured"
    common = sorted(set.intersection(*(set(p["seeds"]) for p in points)))
    alphas = np.array([p["alpha_star"] for p in points])
    slopes = [
        np.polyfit(alphas, [p["by_seed"][p["seeds"].index(s)] for p in points], 1)[0]
        for s in common
    ]
    mean, low, high = interval(slopes)
    if len(slopes) < 2:
        return f"slope {mean:+.3f} (1 seed)", (
            "rises with alpha_* (one seed, no interval)"
            if mean > 0
            else "does not rise (one seed, no interval)"
        )
    text = f"slope {mean:+.3f} [{low:+.3f}, {high:+.3f}] ({len(slopes)} seeds)"
    if low > 0:
        return text, "rises with alpha_* (slope interval above 0)"
    if high < 0:
        return text, "falls with alpha_* (slope interval below 0)"
    return text, "not resolved (slope interval holds 0)"


def _fmt(values, digits: int = 3) -> str:
    return ", ".join(f"{x:.{digits}f}" for x in values)


def _fmt_interval(mean: float, low: float, high: float, spec: str = ".3f") -> str:
    """ "mean [low, high]", or "mean" alone where there is no interval (one seed)."""
    return f"{mean:{spec}}" + ("" if math.isnan(low) else f" [{low:{spec}}, {high:{spec}}]")


def _with_interval(point: dict) -> str:
    return _fmt_interval(*point["accuracy_interval"])


def rows(cells: list[dict]) -> list[dict]:
    """Per curve: accuracy against alpha_*, test loss, attention mass on relevant slots, pruning; then
    the pre-trained start against the scratch one (`start_rows`)."""
    out = []
    for name, cs in curves(cells).items():
        alphas = ", ".join(f"{c['R']}/9" for c in cs)
        slope, verdict = slope_verdict(cs)
        out.append(
            {
                "claim": f"{name}: test accuracy rises with alpha_* ({alphas})",
                "paper": f"{_fmt([GRID_ACCURACY[c['R']] for c in cs])} (CIFAR-10, pre-trained init)",
                "ours": f"{'; '.join(_with_interval(c) for c in cs)}; {slope}",
                "verdict": verdict,
            }
        )
        out.append(
            {
                "claim": f"{name}: test loss falls with alpha_* (resolves the points where accuracy "
                "saturates; mean over seeds)",
                "paper": "not reported",
                "ours": _fmt([c["test_loss"] for c in cs], 4),
                "verdict": "falls with alpha_*"
                if np.all(np.diff([c["test_loss"] for c in cs]) < 0)
                else "does not fall monotonically",
            }
        )
        mass = [c["relevant_mass"] for c in cs]
        # At R = 9 every slot is relevant: the mass is 1 whatever the ViT learnt, so it is not counted.
        informative = [(m, c) for m, c in zip(mass, cs) if c["chance_mass"] < 1]
        above = sum(m > c["chance_mass"] for m, c in informative)
        out.append(
            {
                "claim": f"{name}: the trained ViT attends to relevant slots (last block, mass above "
                "chance R/9, mean over seeds)",
                "paper": "sparse attention on relevant tokens (Proposition 2, shallow ViT)",
                "ours": f"{_fmt(mass)} (chance {_fmt([c['chance_mass'] for c in cs])})",
                "verdict": (
                    f"above chance at {above} of {len(informative)} alpha_* < 1"
                    if informative
                    else "only alpha_* = 1 measured: no test"
                ),
            }
        )
        k = cs[0]["ks"][-1]
        if k >= 1:
            share = [
                (c["relevant_removed_attention"][1], c["chance_mass"]) for c in cs if c["R"] < 9
            ]
            below = sum(s < chance for s, chance in share)
            out.append(
                {
                    "claim": f"{name}: the least attended slot is rarely a relevant one (share of relevant "
                    "slots among those removed at k = 1, chance R/9; mean over seeds)",
                    "paper": "attention concentrates on relevant tokens (Proposition 2)",
                    "ours": ", ".join(f"{s:.3f} (chance {chance:.3f})" for s, chance in share),
                    "verdict": f"below chance at {below} of {len(share)} alpha_* < 1",
                }
            )
        att = [c["accuracy_attention_pruned"][-1] for c in cs]
        rnd = [c["accuracy_random_pruned"][-1] for c in cs]
        wins = sum(a >= r for a, r, c in zip(att, rnd, cs) if c["R"] < 9)
        out.append(
            {
                "claim": f"{name}: removing the {k} least attended slots (no labels) keeps accuracy "
                "better than removing random ones (mean over seeds)",
                "paper": "magnitude-based pruning justified (no number for the deeper ViT)",
                "ours": (
                    f"accuracy at k = {k}: {_fmt(att)} (least attended) vs {_fmt(rnd)} (random); "
                    f"k = 0: {_fmt([c['accuracy_attention_pruned'][0] for c in cs])}"
                ),
                "verdict": f"at least as good as random at {wins} of {sum(c['R'] < 9 for c in cs)} alpha_* < 1",
            }
        )
    return out + start_rows(cells)


def start_rows(cells: list[dict]) -> list[dict]:
    """Per attention kind with both starts: the pre-trained start's accuracy minus the scratch one's at
    each R, paired by seed, with its 95% t-interval; better where the interval lies above 0."""
    out = []
    for kind in dict.fromkeys(c["attention"] for c in cells):
        acc = {
            (c["start"], c["R"], c["seed"]): c["test_accuracy"]
            for c in cells
            if c["attention"] == kind
        }
        diffs: dict[int, list[float]] = {}  # R -> the gains of the seeds with both starts
        for (start, R, seed), a in sorted(acc.items()):
            if start == "pretrained" and ("scratch", R, seed) in acc:
                diffs.setdefault(R, []).append(a - acc["scratch", R, seed])
        gains = {R: interval(d) for R, d in diffs.items()}
        if not gains:
            continue
        above = [R for R, (_, low, _) in gains.items() if low > 0]
        out.append(
            {
                "claim": f"{kind}: the pre-trained start beats the scratch one (accuracy gain, paired by seed)",
                "paper": "the paper trains from pre-trained inits only",
                "ours": "; ".join(
                    f"R = {R}: {_fmt_interval(*g, '+.3f')}" for R, g in gains.items()
                ),
                "verdict": (
                    "one seed: no interval"
                    if all(math.isnan(g[1]) for g in gains.values())
                    else f"better at R = {', '.join(map(str, above))} (interval above 0)"
                    if above
                    else "better at no R (every interval holds 0 or lies below it)"
                ),
            }
        )
    return out


def markdown_table(table_rows: list[dict]) -> str:
    lines = ["| claim | paper | ours | verdict |", "|---|---|---|---|"]
    lines += [f"| {r['claim']} | {r['paper']} | {r['ours']} | {r['verdict']} |" for r in table_rows]
    return "\n".join(lines)


def accuracy_table(cells: list[dict]) -> str:
    """alpha_* | alpha_# | margin | paper | accuracy per curve (mean [95% interval] over seeds) | test loss
    per curve: the per-R numbers behind the rows."""
    by_curve = {name: {c["R"]: c for c in cs} for name, cs in curves(cells).items()}
    Rs = sorted({c["R"] for c in cells})
    head = ["alpha_* (R/9)", "alpha_#", "alpha_* >= 2e alpha_#", "paper"]
    head += [f"{n} accuracy" for n in by_curve] + [f"{n} test loss" for n in by_curve]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for R in Rs:
        any_cell = next(c for c in cells if c["R"] == R)
        row = [
            f"{R / 9:.3f} ({R}/9)",
            f"{any_cell['alpha_conf']:.3f}",
            "yes" if any_cell["theorem_margin"] else "no",
            f"{GRID_ACCURACY[R]:.3f}",
        ]
        row += [_with_interval(pts[R]) if R in pts else "-" for pts in by_curve.values()]
        row += [f"{pts[R]['test_loss']:.4f}" if R in pts else "-" for pts in by_curve.values()]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def summary_markdown(cells: list[dict], setting: str, seconds: float, figures) -> str:
    """summary.md of experiments.token_grid: the setting, the claims, the per-R numbers."""
    return "\n".join(
        [
            "# LWLC23 deeper ViT on token grids: the paper's numbers and ours",
            "",
            setting,
            "",
            markdown_table(rows(cells)),
            "",
            accuracy_table(cells),
            "",
            f"Wall time {seconds:.1f}s (compile included). Figures: {', '.join(figures)}.",
            "",
        ]
    )
