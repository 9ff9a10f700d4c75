"""PK22's claims and published numbers set beside the measurements of `suite.measure`, as summary rows.

Each row: what PK22 claims, the number it publishes (`published.NUMBERS`), and ours for every model with
its 95% bootstrap interval (`per_model.estimates`), PK22's verdict where the intervals allow one and the positional
ViT's place against the vanilla ViT and the ResNet (`verdict`, `positional_comparison`: the rules of
docs/how_vits_work.md, Verdicts, fixed before the runs in `ROWS`). The numbers
themselves: `per_model`.
"""

import numpy as np

from posattn.analysis import bootstrap
from posattn.papers.pk22 import per_model, published

# model key -> label; the binary's default runs use these keys (tpu_configs/how_vits_work.py)
LABELS = {
    "resnet": "ResNet",
    "resnet18": "ResNet-18",
    "vgg16": "VGG-16",
    "vit_vanilla": "ViT (vanilla)",
    "alternet": "AlterNet (vanilla)",
    "alternet_positional": "AlterNet (positional)",
    "vit_positional": "ViT (positional)",
}
POSITIONAL = ("vit_positional", "alternet_positional")


def model_key(config) -> str:
    """The key of `LABELS` that a run's config describes (its model name, attention and variant)."""
    m = config.model
    if m.name == "vit":
        return f"vit_{m.attention}"
    if m.name == "alternet":
        if "/" in m.variant and set(m.variant.partition("/")[2]) == {"0"}:
            return "resnet"
        return "alternet" if m.attention == "vanilla" else f"alternet_{m.attention}"
    return m.name


def _fmt(x, digits=2) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def _cell(est: dict | None, digits=2) -> str:
    """ "value [lo, hi]"; "n/a" where there is no estimate; an estimate of eigenvalues some of which did not
    converge (`per_model.hessian_not_converged`) says how many."""
    if est is not None and est.get("empty"):
        return "no frequency at this size"
    if est is None or not np.isfinite(est["value"]):
        return "n/a"
    cell = f"{_fmt(est['value'], digits)} [{_fmt(est['lo'], digits)}, {_fmt(est['hi'], digits)}]"
    if est.get("not_converged"):
        cell += f" ({est['not_converged']} of {est['eigenvalues']} eigenvalues NOT converged)"
    return cell


# Each row: (key of `per_model.estimates`, claim, key of published.NUMBERS, PK22's verdict rule). A rule is
# ("sign", s): the claim holds for a model where its interval lies on the side s of 0; or
# ("order", [(a, b), ..]): it holds where a's interval lies wholly above b's for every pair present.
# Fixed before the runs (docs/how_vits_work.md, Verdicts); `verdict` applies them.
ROWS = (
    (
        "accuracy",
        "Test accuracy (%): AlterNet > ResNet > ViT on small data",
        "accuracy",
        ("order", [("alternet", "resnet"), ("resnet", "vit_vanilla")]),
    ),
    (
        "hessian_ape",
        "Hessian APE (mean of the positive top-5 eigenvalues): the CNN's large, the ViT's small",
        "hessian_ape",
        ("order", [("resnet", "vit_vanilla")]),
    ),
    (
        "hessian_nep",
        "Hessian NEP (share of negative top-5 eigenvalues): the ViT's larger",
        "hessian_nep",
        ("order", [("vit_vanilla", "resnet")]),
    ),
    (
        "fourier_attention",
        "Fourier: attention lowers the high-frequency (1.0 pi) log amplitude: mean change at "
        "attention layers",
        "fourier_attention",
        ("sign", -1),
    ),
    (
        "fourier_other",
        "Fourier: convs / MLPs raise it: mean change at the other layers",
        "fourier_other",
        ("sign", +1),
    ),
    ("fourier_min", "Fourier: lowest high-frequency value over layers", "fourier_range", None),
    ("fourier_max", "Fourier: highest high-frequency value over layers", "fourier_range", None),
    ("noise_low", "Noise at 0.1 pi: accuracy change (points)", "noise_low", None),
    (
        "noise_high",
        "Noise at 0.9 pi: ViT robust to high-frequency noise, ResNet not (accuracy change, points)",
        "noise_high",
        ("order", [("vit_vanilla", "resnet")]),
    ),
    (
        "variance_attention",
        "Variance: attention reduces the feature-map variance: mean change of log variance "
        "at attention layers",
        "variance_attention",
        ("sign", -1),
    ),
    (
        "variance_other",
        "Variance: convs / MLPs increase it: mean change of log variance at the other layers",
        "variance_other",
        ("sign", +1),
    ),
    (
        "landscape_nll",
        "Landscape: NLL at theta* (augmented training images)",
        "landscape_nll",
        None,
    ),
    (
        "landscape_half",
        "Landscape: ViT flatter: loss rise at (0.5, 0)",
        "landscape_rise",
        ("order", [("resnet", "vit_vanilla")]),
    ),
    (
        "landscape_one",
        "Landscape: ViT flatter: loss rise at (1, 0)",
        "landscape_rise",
        ("order", [("resnet", "vit_vanilla")]),
    ),
    (
        "landscape_half_nll",
        "Landscape without the L2 term (the NLL alone): loss rise at (0.5, 0)",
        "landscape_rise_nll",
        ("order", [("resnet", "vit_vanilla")]),
    ),
    (
        "landscape_one_nll",
        "Landscape without the L2 term (the NLL alone): loss rise at (1, 0)",
        "landscape_rise_nll",
        ("order", [("resnet", "vit_vanilla")]),
    ),
)


def _resnet(ests: dict) -> str:
    """The key that plays PK22's ResNet: the study's own ("resnet") or, where only a ResNet-18 run was
    measured (`--config.runs` of `train_images` runs), "resnet18"."""
    return (
        "resnet18" if ests.get("resnet") is None and ests.get("resnet18") is not None else "resnet"
    )


def _word(s: int, above="above", below="below") -> str:
    return {1: above, -1: below, 0: "not separated"}[s]


def verdict(rule, ests: dict[str, dict | None]) -> str:
    """PK22's claim under `rule` (see ROWS) on the models' estimates: "holds", "fails" or "undecided",
    with the models it was decided on; "-" where the row claims nothing or no model can decide it."""
    if rule is None:
        return "-"
    kind, arg = rule
    if kind == "sign":
        parts = []
        for m, e in ests.items():
            if e is None:
                continue
            s = bootstrap.sign(e)
            parts.append(
                f"{LABELS.get(m, m)}: "
                + ("holds" if s == arg else "undecided" if s == 0 else "fails")
            )
        return "; ".join(parts) or "-"
    role = lambda m: _resnet(ests) if m == "resnet" else m  # noqa: E731
    pairs = [(role(a), role(b)) for a, b in arg]
    pairs = [(a, b) for a, b in pairs if ests.get(a) is not None and ests.get(b) is not None]
    if not pairs:
        return "-"
    signs = [bootstrap.compare(ests[a], ests[b]) for a, b in pairs]
    word = (
        "holds"
        if all(s == 1 for s in signs)
        else "fails"
        if any(s == -1 for s in signs)
        else "undecided"
    )
    return (
        word
        + " ("
        + ", ".join(
            f"{LABELS.get(a, a)} vs {LABELS.get(b, b)}: {_word(s)}"
            for (a, b), s in zip(pairs, signs)
        )
        + ")"
    )


def positional_comparison(ests: dict[str, dict | None]) -> str:
    """Where the positional ViT's interval lies against the vanilla ViT's and the ResNet's: "above",
    "below" or "not separated" (the same separation rule as `verdict`)."""
    pos = ests.get("vit_positional")
    if pos is None:
        return "-"
    parts = [
        f"vs {LABELS[m]}: {_word(bootstrap.compare(pos, ests[m]))}"
        for m in ("vit_vanilla", _resnet(ests))
        if ests.get(m) is not None
    ]
    return "; ".join(parts) or "-"


def rows(results: dict[str, dict]) -> list[dict]:
    """[{"key", "claim", "paper", "ours": {model: "value [lo, hi]"}, "estimates", "verdict", "positional"}]
    for every row of ROWS, models as in `results`."""
    by_model = {m: per_model.estimates(r) for m, r in results.items()}
    out = []
    for key, claim, paper_key, rule in ROWS:
        ests = {m: e[key] for m, e in by_model.items()}
        digits = 1 if key in ("accuracy", "noise_low", "noise_high", "hessian_ape") else 2
        ours = {
            m: ("no attention" if e is None and key.endswith("_attention") else _cell(e, digits))
            for m, e in ests.items()
        }
        judged = verdict(rule, ests)

        def flagged(what):
            return ", ".join(
                LABELS.get(m, m) for m, e in ests.items() if e is not None and e.get(what)
            )

        # a verdict on eigenvalues whose power iteration did not converge is not PK22's measurement
        if flagged("not_converged") and judged != "-":
            judged = f"NOT CONVERGED ({flagged('not_converged')}): {judged}"
        # a band that holds no frequency of the images measured nothing: no verdict on it
        if flagged("empty") and rule is not None:
            judged = (
                f"not measured: no frequency in this band at the image size of {flagged('empty')}"
            )
        out.append(
            {
                "key": key,
                "claim": claim,
                "paper": published.NUMBERS[paper_key],
                "ours": ours,
                "estimates": ests,
                "verdict": judged,
                "positional": positional_comparison(ests),
            }
        )
    return out


def stem_position_table(results: dict[str, dict]) -> str:
    """The positional embedding's part of the stem's high-frequency value and variance (PK22 Figs. 4, 6)
    for the models whose stem adds one (`measures.stem_position_parts`), each with its 95% interval over the
    Fourier tool's test images; "" where no model's does."""
    lines = []
    for m, r in results.items():
        parts = r.get("stem_position")
        if not parts or not np.any(np.asarray(parts["position"]["variance"])):
            continue  # no P, or a stem that P does not enter (the positional ViT: P makes its maps alone)
        kw = per_model.bootstrap_settings(r)
        cells = []
        for quantity in ("high_frequency", "variance"):
            for part in ("with", "without", "position"):
                units = np.asarray(parts[part][quantity], np.float64)
                cells.append(_cell(bootstrap.estimate(units, np.mean, **kw)))
        lines.append(f"| {LABELS.get(m, m)} | " + " | ".join(cells) + " |")
    if not lines:
        return ""
    head = (
        "| model | stem high-frequency value | without P | P alone | stem variance | without P | P alone |\n"
        "|---|---|---|---|---|---|---|"
    )
    return (
        "The positional embedding P in the stem (the stem with P set to 0, and P alone; models whose "
        "stem holds no P, such as the positional ViT, are left out):\n\n"
        + head
        + "\n"
        + "\n".join(lines)
        + "\n"
    )


def across_lengths(rows_by_length: dict[str, list[dict]]) -> str:
    """A markdown table of the PK22 verdicts and the positional ViT's place (`rows`) at each training
    length ({label: rows}), and which positional statements hold at every length: the same by the
    separation rule everywhere, and not "not separated" (docs/how_vits_work.md, Verdicts)."""
    labels = list(rows_by_length)
    first = rows_by_length[labels[0]]
    head = (
        ["row"]
        + [f"verdict, {l}" for l in labels]
        + [f"positional ViT, {l}" for l in labels]
        + ["positional statement at every length"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, row in enumerate(first):
        rs = [rows_by_length[l][i] for l in labels]
        places = [r["positional"] for r in rs]
        parts = [p.split("; ") for p in places]
        kept = [
            part
            for part in parts[0]
            if all(part in other for other in parts[1:]) and not part.endswith("not separated")
        ]
        lines.append(
            "| "
            + " | ".join(
                [row["claim"]] + [r["verdict"] for r in rs] + places + ["; ".join(kept) or "none"]
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def markdown(rows_: list[dict], models: list[str]) -> str:
    """The rows as a markdown table: claim | PK22 | one column per model (value [95% interval]) | PK22's
    verdict | the positional ViT against the vanilla ViT and the ResNet."""
    head = (
        ["PK22's claim", "PK22's number"]
        + [LABELS.get(m, m) + (" *" if m in POSITIONAL else "") for m in models]
        + ["verdict (intervals)", "positional ViT"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows_:
        cells = [row["claim"], row["paper"]] + [row["ours"].get(m, "") for m in models]
        lines.append(
            "| " + " | ".join(cells + [row.get("verdict", "-"), row.get("positional", "-")]) + " |"
        )
    return (
        "\n".join(lines)
        + "\n\nEvery number: the estimate [95% percentile bootstrap interval]. A verdict is "
        "stated only where the intervals separate (docs/how_vits_work.md, Verdicts): a sign where the interval "
        'excludes 0, an order where two intervals do not overlap; otherwise "undecided" or "not separated".'
        "\n\n\\* positional attention (JSL22 Definition 3.2)\n"
    )
