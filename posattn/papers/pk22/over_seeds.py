"""PK22's claims over trained models, not over one model's test images (docs/how_vits_work.md, Issue 46).

A trained model's number on a row of `claims.ROWS` is the mean of its measurements, one per measurement
seed (other landscape directions, Hessian mini-batches and noise draws); a kind's sample is its trained
models, one per training seed. So an interval here holds the variation between trained networks, which
the intervals of `per_model.estimates` (over one model's units) leave out. The primary claims (`PRIMARY`,
named before the runs) are judged with Welch's t and the bootstrap over seeds at the Bonferroni level of
their family (`PRIMARY_LEVEL`); every other row is exploratory, at 95% and without a verdict.
"""

import json
import math

import numpy as np
from etils import epath

from posattn import io
from posattn.analysis import bootstrap
from posattn.errors import ConfigError
from posattn.papers.pk22 import claims, per_model
from posattn.vision import runs

# (row of claims.ROWS, the kind claimed higher, the kind claimed lower); None: 0 (a sign claim)
PRIMARY = (
    ("hessian_nep", "vit_vanilla", "resnet"),
    ("landscape_one", "resnet", "vit_vanilla"),
    ("landscape_one_nll", "resnet", "vit_vanilla"),
    ("noise_high", "vit_vanilla", "resnet"),
    ("fourier_attention", None, "vit_vanilla"),
)
FAMILY_ERROR = 0.05
PRIMARY_LEVEL = 1 - FAMILY_ERROR / len(PRIMARY)
EXPLORATORY_LEVEL = 0.95


def numbers(results: dict) -> dict[str, float]:
    """{row: value} of one measurement (`per_model.estimates`), the rows it has a finite number for."""
    return {
        key: e["value"]
        for key, e in per_model.estimates(results).items()
        if e is not None and math.isfinite(e["value"])
    }


def samples(measured) -> dict[str, dict[str, np.ndarray]]:
    """{kind: {row: values_S}}, one value per training seed (in seed order): the mean over that model's
    measurement seeds. `measured`: (kind, training seed, measurement seed, numbers) tuples."""
    by_model: dict = {}
    for kind, training_seed, _, nums in measured:
        for row, value in nums.items():
            by_model.setdefault(kind, {}).setdefault(training_seed, {}).setdefault(row, []).append(
                value
            )
    out = {}
    for kind, models in by_model.items():
        rows = {row for per_row in models.values() for row in per_row}
        out[kind] = {
            row: np.array([np.mean(models[s][row]) for s in sorted(models) if row in models[s]])
            for row in sorted(rows)
        }
    return out


def judge(samples_: dict, row: str, higher: str | None, lower: str | None, level: float) -> dict:
    """The claim "`higher`'s mean exceeds `lower`'s" on `row` (None: 0) with its two intervals over
    seeds at `level`: "holds" where both lie above 0, "fails" where both lie below, else "undecided"."""
    if higher is None and lower is None:
        raise ConfigError("a claim compares two kinds, or one kind with 0")
    values = lambda kind: samples_[kind][row]  # noqa: E731
    if higher is not None and lower is not None:
        out = bootstrap.difference_of_means(values(lower), values(higher), level=level)
        intervals = (out["welch"], out["bootstrap"])
    else:
        sign = 1.0 if lower is None else -1.0  # "higher > 0", or "0 > lower", i.e. -lower > 0
        out = bootstrap.mean_interval(sign * values(higher or lower), level=level)
        intervals = (out["t"], out["bootstrap"])
    word = {1: "holds", -1: "fails", 0: "undecided"}[bootstrap.agreed_sign(*intervals)]
    return {**out, "row": row, "higher": higher, "lower": lower, "level": level, "verdict": word}


def collect(*workdirs: str) -> list[tuple[str, int, int, dict]]:
    """(kind, training seed, measurement seed, numbers) of every model measured in the how_vits_work
    `workdirs` (their results/KIND.json; the training seed from the measured run's config). ConfigError
    where two measurements share all three, or their settings differ."""
    measured, seen, settings = [], set(), set()
    for w in workdirs:
        for p in sorted((epath.Path(w) / "results").glob("*.json")):
            r = json.loads(p.read_text())
            ident = (p.stem, int(runs.run_config(r["run_dir"]).seed), int(r["seed"]))
            if ident in seen:
                raise ConfigError(f"{p}: {ident} is measured twice in {', '.join(workdirs)}")
            seen.add(ident)
            settings.add(json.dumps(r["settings"], sort_keys=True))
            measured.append((*ident, numbers(r)))
    if len(settings) > 1:
        raise ConfigError(f"the measurements in {', '.join(workdirs)} differ in their settings")
    return measured


def _interval(pair) -> str:
    return f"[{pair[0]:+.2f}, {pair[1]:+.2f}]"


def markdown(samples_: dict) -> str:
    """The primary claims with their verdicts, then every row of `claims.ROWS` per kind (exploratory)."""
    lines = [
        f"Primary claims (intervals at {100 * PRIMARY_LEVEL:g}%, Bonferroni over {len(PRIMARY)}):",
        "",
        "| row | claim | difference | Welch / t | bootstrap | seeds | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for row, higher, lower in PRIMARY:
        if any(k is not None and row not in samples_.get(k, {}) for k in (higher, lower)):
            lines.append(f"| {row} | {higher or 0} > {lower or 0} | not measured | | | | |")
            continue
        j = judge(samples_, row, higher, lower, PRIMARY_LEVEL)
        first = j.get("welch", j.get("t"))
        lines.append(
            f"| {row} | {claims.LABELS.get(higher, 0)} > {claims.LABELS.get(lower, 0)} | "
            f"{j['value']:+.3f} | {_interval(first)} | {_interval(j['bootstrap'])} | {j['n']} | "
            f"{j['verdict']} |"
        )
    kinds = list(samples_)
    lines += [
        "",
        f"Every row, exploratory: the mean over training seeds [t interval, {EXPLORATORY_LEVEL:.0%}]",
        "",
        "| row | " + " | ".join(claims.LABELS.get(k, k) for k in kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    for row, *_ in claims.ROWS:
        cells = []
        for k in kinds:
            v = samples_[k].get(row)
            if v is None or v.size < 2:
                cells.append("-" if v is None else f"{v.mean():.2f} (1 seed)")
                continue
            m = bootstrap.mean_interval(v, level=EXPLORATORY_LEVEL)
            cells.append(f"{m['value']:.2f} {_interval(m['t'])}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write(workdir: str, *measured: str) -> dict:
    """over_seeds.md and over_seeds.json in `workdir`, of the how_vits_work workdirs `measured`."""
    samples_ = samples(collect(*measured))
    out = epath.Path(workdir)
    out.mkdir(parents=True, exist_ok=True)
    io.write_text(out / "over_seeds.md", markdown(samples_))
    io.write_json(
        out / "over_seeds.json",
        {k: {row: v.tolist() for row, v in rows.items()} for k, rows in samples_.items()},
    )
    return samples_
