"""summary.md of a settling study (`posattn.papers.lwlc23.settle`): each claim, the paper's statement,
ours with its interval, and the verdict the pre-registration fixes."""

import math

from posattn.shallow.config import TWO_E


def _iv(iv: dict, fmt: str = ".3g") -> str:
    if math.isnan(iv["value"]):
        return "censored"
    cens = f", {iv['censored']:.0%} of resamples censored" if iv["censored"] >= 0.005 else ""
    return f"{iv['value']:{fmt}} [{iv['lo']:{fmt}}, {iv['hi']:{fmt}}]{cens}"


def _n_star(row: dict) -> str:
    """N* with its interval, or where the row's window left it (at or below its first N, beyond its last)."""
    if row["below_window"]:
        return f"<= {row['N'][0]} (at the window's floor)"
    if math.isnan(row["N_star"]["value"]):
        return f"> {row['N'][-1]} (beyond the window)"
    return _iv(row["N_star"], ".1f")


def exponent_verdict(q: dict, paper: float, other: float) -> str:
    """q's interval against the paper's exponent and the other network's."""
    if math.isnan(q["value"]) or math.isnan(q["lo"]):
        return "not measured (fewer than 3 rows with N* inside their windows)"
    if q["lo"] <= paper <= q["hi"]:
        return f"consistent with {paper:g}" + (
            f" (and with {other:g})" if q["lo"] <= other <= q["hi"] else ""
        )
    return f"{'above' if q['lo'] > paper else 'below'} {paper:g}" + (
        f", consistent with {other:g}" if q["lo"] <= other <= q["hi"] else ""
    )


def margin_verdict(a0: dict, alpha_conf: float) -> str:
    if math.isnan(a0["value"]) or math.isnan(a0["lo"]):
        return "not measured"
    marks = {"0": 0.0, "2e alpha_#": TWO_E * alpha_conf}
    inside = [name for name, v in marks.items() if a0["lo"] <= v <= a0["hi"]]
    return (
        ("interval contains " + " and ".join(inside))
        if inside
        else (f"interval excludes 0 and 2e alpha_# = {TWO_E * alpha_conf:.3f}")
    )


def summary_markdown(study: str, results: dict, config) -> str:
    lines = [
        f"# LWLC23 settling run: {study}",
        "",
        f"Pre-registered criteria: tpu_configs/shallow_settle.py. Success = zero test error on "
        f"{config.sgd.n_test} fresh samples; N* = success rate {config.level} (log-linear interpolation); "
        f"intervals = 95% bootstrap over {config.seeds} seeds ({config.boot} resamples). "
        f"Wall time {results['seconds']:.0f}s.",
        "",
    ]
    if study == "boundary":
        paper = {"softmax": (2, 4), "none": (4, 2)}
        lines += [
            "| network | alpha_# | N* by alpha_* [95%] | q (paper) | alpha_0 (0, 2e alpha_#) | q at alpha_0 = 0 | "
            "verdict on q | verdict on alpha_0 | rows whose top < 1 |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for net, by_conf in results["networks"].items():
            for nc, s in by_conf.items():
                ns = "; ".join(f"{r['alpha_star']:.2f}: {_n_star(r)}" for r in s["rows"])
                lines.append(
                    f"| {'ViT' if net == 'softmax' else 'attention-free'} | {s['alpha_conf']:.3f} | {ns} | "
                    f"{_iv(s['q'])} ({paper[net][0]}) | {_iv(s['alpha0'])} (0, {s['two_e_alpha_conf']:.3f}) | "
                    f"{_iv(s['q_at_alpha0_0'])} | {exponent_verdict(s['q'], *paper[net])} | "
                    f"{margin_verdict(s['alpha0'], s['alpha_conf'])} | "
                    f"{', '.join(f'{a:.2f}' for a in s['short_top_rows']) or 'none'} |"
                )
    elif study == "init_error":
        base = results["base"]
        lines += [
            f"alpha_* = {results['alpha_star']:.2f}, alpha_# = {results['alpha_conf']:.3f}; each knob swept "
            f"alone around the base sigma = {base['sigma']:.3g}, delta = {base['delta']:.3g}"
            + f", tau = {base['tau']:.3g}. The last column is exploratory (not pre-registered): test hinge loss minus the base's at "
            "the smallest shared N >= 4.",
            "",
            "| sigma | delta | tau | regime | N* [95%] | N* - N*(base) [95%] | verdict | top reaches 1 | hinge - hinge(base) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in results["rows"]:
            h = r.get("hinge_minus_base") or {}
            n4 = min((n for n in h if n >= 4), default=None)
            last = f"N = {n4}: {_iv(h[n4], '+.4f')}" if n4 is not None else ""
            lines.append(
                f"| {r['sigma']:.3g} | {r['delta']:.3g} | {r['tau']:.3g} | {r['regime']} | "
                f"{_n_star(r)} | {_iv(r['minus_base'], '.1f')} | {r['verdict']} | "
                f"{'yes' if r['top_reaches_1'] else 'NO'} | {last} |"
            )
    else:
        pols = list(config.policies)  # training time runs a subset: the others are left blank
        lines += [
            "Test hinge loss at k = 0 -> k = n removed (n = noisy count); change [95%] and reading per policy.",
            "",
            "| at | L | noisy | kind | bound (far %) | k=0 loss | "
            + " | ".join(pols)
            + " | random flat? |",
            "|" + "---|" * (6 + len(pols) + 1),
        ]
        for s in results["settings"]:
            P = s["policies"]
            cols = [
                f"{P[p]['loss'][-1]['value']:.3f} ({P[p]['verdict']}, {_iv(P[p]['change'], '+.3f')})"
                if p in P
                else ""
                for p in pols
            ]
            flat = P["random"]["flat"] if "random" in P else None
            lines.append(
                f"| {s['at']} | {s['L']} | {s['n']} | {s['kind']} | {s['bound']:g} ({s['far']:.0%}) | "
                f"{P[pols[0]]['loss'][0]['value']:.3f} | "
                + " | ".join(cols)
                + f" | {'yes' if flat else 'no'} |"
            )
    return "\n".join(lines) + "\n"
