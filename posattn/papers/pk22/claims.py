"""PK22's claims and published numbers set beside the measurements of `suite.measure`, as summary rows.

Each row: what PK22 claims, the number it publishes (`published.NUMBERS`), and ours for every model. Layer
changes (how a layer moves the high-frequency amplitude or the variance) compare each layer with the
one before it at the same map size: a subsampling step changes both for reasons of its own (PK22 shades
it apart, Fig. 6).
"""
import numpy as np

from posattn.papers.pk22 import published

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


def layer_changes(names, sizes, values) -> dict[str, float]:
    """Mean change of a per-layer value across attention layers and across the other layers
    (conv blocks, MLPs), each against the previous layer of the same map size; NaNs left out."""
    att, other = [], []
    for i in range(1, len(names)):
        if sizes[i] != sizes[i - 1] or not np.isfinite(values[i]) or not np.isfinite(values[i - 1]):
            continue
        (att if names[i].endswith("/attention") else other).append(values[i] - values[i - 1])
    mean = lambda xs: float(np.mean(xs)) if xs else float("nan")  # noqa: E731
    share = lambda xs: float(np.mean(np.asarray(xs) < 0)) if xs else float("nan")  # noqa: E731
    return {"attention": mean(att), "other": mean(other), "attention_lowers": share(att),
            "other_lowers": share(other), "attention_layers": len(att), "other_layers": len(other)}


def _fmt(x, digits=2) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


def _log_variance(r):
    return [float(np.log(v)) if v and np.isfinite(v) and v > 0 else float("nan") for v in r["variance"]]


def rows(results: dict[str, dict]) -> list[dict]:
    """[{"claim", "paper", "ours": {model: text}}] for every measurement, models as in `results`."""
    def per_model(fn):
        return {m: fn(r) for m, r in results.items()}

    hf = lambda r: layer_changes(r["layers"], r["layer_sizes"], r["high_frequency"])  # noqa: E731
    var = lambda r: layer_changes(r["layers"], r["layer_sizes"], _log_variance(r))  # noqa: E731
    drop = lambda r, f: r["noise"]["drop_points"][r["noise"]["frequencies_pi"].index(f)]  # noqa: E731
    land = lambda r: r["landscape"]  # noqa: E731
    paper = published.NUMBERS
    return [
        {"claim": "Test accuracy (%): AlterNet > ResNet > ViT on small data",
         "paper": paper["accuracy"],
         "ours": per_model(lambda r: _fmt(100 * r["noise"]["clean_accuracy"], 1))},
        {"claim": "Hessian: CNN's top-5 eigenvalues large and positive; ViT's small, many negative. "
                  "APE (mean of the positive ones)",
         "paper": paper["hessian_ape"],
         "ours": per_model(lambda r: _fmt(r["hessian"]["ape"], 1))},
        {"claim": "Hessian NEP (share of negative top-5 eigenvalues)",
         "paper": paper["hessian_nep"],
         "ours": per_model(lambda r: f"{_fmt(r['hessian']['nep'])} (min {_fmt(r['hessian']['min'], 1)})")},
        {"claim": "Fourier: attention lowers the high-frequency (1.0 pi) log amplitude: mean change at "
                  "attention layers",
         "paper": paper["fourier_attention"],
         "ours": per_model(lambda r: f"{_fmt(hf(r)['attention'])} ({hf(r)['attention_layers']} layers)"
                           if hf(r)["attention_layers"] else "no attention")},
        {"claim": "Fourier: convs / MLPs raise it: mean change at the other layers",
         "paper": paper["fourier_other"],
         "ours": per_model(lambda r: f"{_fmt(hf(r)['other'])} ({hf(r)['other_layers']} layers)")},
        {"claim": "Fourier: range of the high-frequency value over layers",
         "paper": paper["fourier_range"],
         "ours": per_model(lambda r: f"{_fmt(np.nanmin(r['high_frequency']))} to "
                                     f"{_fmt(np.nanmax(r['high_frequency']))}")},
        {"claim": "Noise at 0.1 pi: accuracy drop (points)", "paper": paper["noise_low"],
         "ours": per_model(lambda r: _fmt(drop(r, 0.1), 1))},
        {"claim": "Noise at 0.9 pi: ViT robust to high-frequency noise, ResNet not",
         "paper": paper["noise_high"],
         "ours": per_model(lambda r: _fmt(drop(r, 0.9), 1))},
        {"claim": "Variance: attention reduces the feature-map variance: mean change of log variance at "
                  "attention layers (share that lower it)",
         "paper": paper["variance_attention"],
         "ours": per_model(lambda r: f"{_fmt(var(r)['attention'])} ({_fmt(var(r)['attention_lowers'])})"
                           if var(r)["attention_layers"] else "no attention")},
        {"claim": "Variance: convs / MLPs increase it: mean change of log variance at the other layers "
                  "(share that lower it)",
         "paper": paper["variance_other"],
         "ours": per_model(lambda r: f"{_fmt(var(r)['other'])} ({_fmt(var(r)['other_lowers'])})")},
        {"claim": "Landscape: NLL at theta* (augmented training images)",
         "paper": paper["landscape_nll"],
         "ours": per_model(lambda r: _fmt(land(r)["nll_at_optimum"]))},
        {"claim": "Landscape: ViT flatter: loss rise at (0.5, 0) and at (1, 0)",
         "paper": paper["landscape_rise"],
         "ours": per_model(lambda r: f"{_fmt(land(r)['delta_at_half'])} and {_fmt(land(r)['delta_at_one'])}")},
    ]


def markdown(rows_: list[dict], models: list[str]) -> str:
    """The rows as a markdown table: claim | PK22 | one column per model."""
    head = ["PK22's claim", "PK22's number"] + [LABELS.get(m, m) + (" *" if m in POSITIONAL else "")
                                              for m in models]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows_:
        lines.append("| " + " | ".join([row["claim"], row["paper"]] + [row["ours"].get(m, "") for m in models])
                     + " |")
    return "\n".join(lines) + "\n\n\\* positional attention (JSL22 Definition 3.2)\n"
