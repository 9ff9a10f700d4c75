"""PK22's measurements over several trained runs, written as one report (`experiments/how_vits_work.py`).

`run(workdir, ...)` trains the runs it is not given (the models of `tpu_configs/how_vits_work.py`, on
the offline digits), measures each with `suite.measure`, and writes into `workdir`: config.json,
metrics.jsonl (one record per model), results/MODEL.json (every number and array), the figures
pk22_{hessian,fourier,variance,noise,landscape}.png and summary.md (PK22's claims and numbers beside
ours, `claims.markdown`). A model whose results file holds the same run measured with the same
settings and seed is not measured again, so a stopped run resumes where it stopped (training resumes
from its checkpoints); other settings or another seed measure it again.
"""

import concurrent.futures
import dataclasses
import json
import threading
import time

import jax
from etils import epath

from posattn import configs, io, metric_log, progress, run_record
from posattn.errors import ConfigError
from posattn.papers.pk22 import claims, suite
from posattn.plots import analysis as plots
from posattn.plots import save_png
from posattn.vision import config as config_lib
from posattn.vision import runs as trained_runs  # (not `runs`: run()'s argument of that name)
from posattn.vision.models import alternet
from posattn.vision.setup import resolve

CONFIG_FILE = (
    "tpu_configs/how_vits_work.py"  # found from any directory (`configs.find_config_file`)
)
# the models of each dataset of tpu_configs/how_vits_work.py (no AlterNet on 28 x 28 images: its file says why)
DEFAULT_MODELS = {
    "digits": ("resnet", "vit_vanilla", "alternet", "vit_positional"),
    "fashion_mnist": ("resnet", "vit_vanilla", "vit_positional"),
}
FIGURES = {
    "hessian": plots.hessian_spectra,
    "fourier": plots.fourier_profiles,
    "variance": plots.feature_variance,
    "noise": plots.noise_robustness,
    "landscape": plots.loss_landscapes,
}


# The smoke run's models, smaller than the default's, since most of a smoke run is compiling and a
# model's programs grow with its blocks (docs/how_vits_work.md, Time): ViTs two blocks deep (the
# default's: 4), CNNs of the AlterNet "XXS" size (two stages, the msas of the default's last two)
SMOKE_VIT_DEPTH = 2
SMOKE_CNN_SIZE = "XXS"


def smoke_model(model) -> None:
    """Make the config's `model` fields the smoke run's smaller model of the same kind (in place)."""
    if model.name == "vit":
        model.depth = SMOKE_VIT_DEPTH
    elif model.name == "alternet":
        msas = "".join("01"[m] for m in alternet.parse_variant(model.variant)[1])
        model.variant = f"{SMOKE_CNN_SIZE}/{msas[-len(alternet.SIZES[SMOKE_CNN_SIZE]) :]}"


def training_config(model: str, quick: bool, training_length: float = 1.0, dataset: str = "digits"):
    """The config of `tpu_configs/how_vits_work.py` for `model`, its steps and warm-up multiplied by
    `training_length` (a second training length of the same recipe); quick: 20 steps of the smaller
    model of `smoke_model` (a smoke run of the whole pipeline). ConfigError, with the config file's list
    of models, for any other."""
    try:
        c = configs.load_config(
            CONFIG_FILE, model if dataset == "digits" else f"{model},{dataset}", config_lib.SCHEMA
        )
    except ConfigError as e:
        raise ConfigError(f"unknown model {model!r} for --models on {dataset} ({e})") from None
    if quick:
        c.total_steps, c.optimizer.warmup_steps, c.log_every = 20, 5, 10
        smoke_model(c.model)
    elif training_length != 1:
        c.total_steps = max(1, round(c.total_steps * training_length))
        c.optimizer.warmup_steps = round(c.optimizer.warmup_steps * training_length)
    return c


def _read_json(path) -> dict:
    return json.loads(epath.Path(path).read_text())


PIPELINES = 2  # models trained and measured at once (docs/how_vits_work.md, Time)


def start_order(configs: dict) -> list[str]:
    """The models in the order their pipelines start: the most training steps first (stable).

    Training is the longest part of a pipeline since the CNNs' Hessian runs from the host on a CPU
    (docs/how_vits_work.md, Time): the ViTs' 1,350 steps against the CNNs' 450. Started last, a ViT
    would train alone at the end while the other pipeline's core idles (the default took 922 s with the
    CNNs started first).
    """
    return sorted(configs, key=lambda model: -configs[model].total_steps)


def train_one(workdir: epath.Path, model: str, config) -> tuple[str, float]:
    """Train (or resume) `model`'s run under workdir/runs/MODEL: (run directory, seconds)."""
    from posattn.vision import train  # heavy: only when something is trained

    run_dir, t = workdir / "runs" / model, time.perf_counter()
    train.train_and_evaluate(config, str(run_dir))
    return str(run_dir), time.perf_counter() - t


CONVERGED = (
    0.03  # docs/image_results.md: the training loss of the last epoch changes by less than 3%
)


def last_epoch_change(run_dir, steps_per_epoch: float) -> dict:
    """The convergence criterion of docs/image_results.md on a run's metrics.jsonl: the relative change
    of the logged training loss (each log the mean since the one before) from the first to the last log
    whose steps lie in the last epoch; "converged" where it is under `CONVERGED` in size. NaN where the
    last epoch holds fewer than two logs."""
    logs = sorted(
        (m for m in metric_log.read(run_dir) if m.get("train_loss") is not None),
        key=lambda m: m["step"],
    )
    last = logs[-1]["step"]
    # a log is the mean over the steps since the previous one: those of the last epoch lie wholly in it
    epoch = [
        m["train_loss"]
        for prev, m in zip([{"step": 0}] + logs, logs)
        if prev["step"] >= last - steps_per_epoch
    ]
    change = (epoch[-1] - epoch[0]) / epoch[0] if len(epoch) > 1 else float("nan")
    return {
        "steps": last,
        "steps_per_epoch": steps_per_epoch,
        "first_loss": epoch[0],
        "last_loss": epoch[-1],
        "logs": len(epoch),
        "change": change,
        "converged": bool(abs(change) < CONVERGED),
    }


def training_summary(run_dir, config) -> dict:
    """`last_epoch_change` of a run, its epoch from its config's dataset and batch size."""
    train_images = resolve(config, 1).split("train").num_examples
    return last_epoch_change(run_dir, train_images / config.global_batch_size)


def measure_one(
    workdir: epath.Path,
    run_dir: str,
    settings: suite.Settings,
    seed: int,
    training_seconds: float | None,
    log_metrics,
) -> tuple[str, dict]:
    """(model key, results) of one trained run: read from results/KEY.json when that file holds this
    run's results with these settings and seed, else measured (`suite.measure`) and written there and,
    its headline numbers, to `log_metrics` (a record of metrics.jsonl)."""
    model, variables, config, _ = trained_runs.load_run(run_dir)
    key = claims.model_key(config)
    path = workdir / "results" / f"{key}.json"
    # as results/KEY.json stores them (a JSON round trip turns tuples into lists)
    measured_as = json.loads(
        json.dumps(
            {"run_dir": str(run_dir), "settings": dataclasses.asdict(settings), "seed": seed}
        )
    )
    if path.exists():
        found = _read_json(path)
        if all(found.get(k) == v for k, v in measured_as.items()):
            progress.say(f"{key}: results found in {path}, kept")
            return key, found
        progress.say(f"{key}: {path} holds another run, settings or seed; measuring again")
    t = time.perf_counter()
    progress.say(f"measuring {key} ({run_dir})")
    r = suite.measure(model, variables, config, settings, jax.random.key(seed), name=key)
    r.update(measured_as)
    r["training"] = training_summary(run_dir, config)
    r["seconds"] = time.perf_counter() - t
    r["training_seconds"] = training_seconds
    io.write_json(path, r)
    log_metrics(
        {
            "model": key,
            "seconds": r["seconds"],
            **r["seconds_by_program"],
            "training_seconds": r["training_seconds"],
            "test_accuracy": r["noise"]["clean_accuracy"],
            **{
                f"hessian_{k}": r["hessian"][k]
                for k in ("nep", "ape", "nep_interval", "ape_interval", "min", "max")
            },
            "noise_drop_points": r["noise"]["drop_points"],
            **{
                f"landscape_{k}": r["landscape"][k]
                for k in ("nll_at_optimum", "delta_at_half", "delta_at_one")
            },
        },
    )
    return key, r


def config_record(runs, models, quick, seed, training_length, dataset, settings) -> dict:
    """The config of a report run, as its claim and its config.json record it."""
    return {
        "runs": list(runs),
        "models": list(models),
        "quick": quick,
        "seed": seed,
        "training_length": training_length,
        "dataset": dataset,
        "settings": dataclasses.asdict(settings),
    }


def run(
    workdir: str,
    *,
    runs=(),
    models=DEFAULT_MODELS["digits"],
    quick: bool = False,
    settings: suite.Settings | None = None,
    seed: int = 0,
    training_length: float = 1.0,
    dataset: str = "digits",
) -> dict:
    """Measure every run (training the default ones when `runs` is empty); write and return the report.

    Each model is one pipeline (train, then measure), `PIPELINES` of them at once, the longest first
    (`start_order`): on a CPU much of both is XLA compilation, which runs on one core per program, so
    two pipelines keep two cores busy (docs/how_vits_work.md, Time). Every program, and so every
    number, is the same as one at a time.
    """
    settings = settings or (suite.QUICK if quick else suite.Settings())
    workdir = epath.Path(workdir)
    # every config before any work: an unknown model stops the run now, not after another trained
    configs = (
        {}
        if runs
        else {model: training_config(model, quick, training_length, dataset) for model in models}
    )
    keys = (
        [claims.model_key(trained_runs.run_config(r)) for r in runs]
        if runs
        else [claims.model_key(configs[model]) for model in models]
    )
    if len(set(keys)) < len(
        keys
    ):  # each model key is one results file and one column of the report
        raise ConfigError(
            f"{'--runs' if runs else '--models'}: two runs of the same model "
            f"({', '.join(sorted({k for k in keys if keys.count(k) > 1}))}); give each model once "
            "and measure other runs of it in another workdir"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "results").mkdir(exist_ok=True)
    run_record.write_config(
        workdir, config_record(runs, models, quick, seed, training_length, dataset, settings)
    )
    run_record.write_run(workdir)
    t0, lock, log = time.perf_counter(), threading.Lock(), metric_log.MetricLog(workdir)
    items = list(runs) or list(configs)

    def pipeline(i: int, item: str) -> tuple[str, dict]:
        step = items.index(item)  # the model's place in the report (`item` becomes its run dir)

        def log_metrics(record: dict) -> None:  # (the pipelines run in threads)
            with lock:
                log.write({"step": step, **record})

        training_seconds = None
        if not runs:
            progress.say(
                f"[{i + 1}/{len(items)}] training {item} in {workdir / 'runs' / item}; "
                f"{time.perf_counter() - t0:.0f}s so far"
            )
            item, training_seconds = train_one(workdir, item, configs[item])
        return measure_one(workdir, item, settings, seed, training_seconds, log_metrics)

    started = list(runs) or start_order(configs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=PIPELINES) as pool:
        futures = {item: pool.submit(pipeline, started.index(item), item) for item in started}
        try:
            results = dict(futures[item].result() for item in items)  # in the order given
        except BaseException:
            pool.shutdown(
                wait=True, cancel_futures=True
            )  # the pipelines not yet started never start
            raise
        finally:
            log.close()
    write_report(workdir, results, time.perf_counter() - t0, quick)
    return results


def read_results(*workdirs: str) -> dict:
    """{model key: results} of finished how_vits_work workdirs, from their results/MODEL.json, in the
    order of DEFAULT_MODELS["digits"] then any other (a model measured twice: ConfigError)."""
    found = {}
    for w in workdirs:
        for p in sorted((epath.Path(w) / "results").glob("*.json")):
            if p.stem in found:
                raise ConfigError(f"{p.stem} is measured in two of {', '.join(workdirs)}")
            found[p.stem] = _read_json(p)
    order = list(DEFAULT_MODELS["digits"])
    return dict(
        sorted(found.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    )


def write_combined(workdir: str, *measured: str) -> dict:
    """The figures and summary.md of `write_report` in `workdir`, of the models measured in the
    workdirs `measured` (each model once, with the same settings and seed: ConfigError otherwise); for
    models measured by separate runs of the binary, e.g. while others still trained."""
    results = read_results(*measured)
    kept = {
        json.dumps({k: r.get(k) for k in ("settings", "seed")}, sort_keys=True)
        for r in results.values()
    }
    if len(kept) > 1:
        raise ConfigError(
            f"the models of {', '.join(measured)} were measured with other settings or seeds"
        )
    out = epath.Path(workdir)
    out.mkdir(parents=True, exist_ok=True)
    write_report(out, results, None, quick=False)
    return results


def compare_lengths(workdirs: dict[str, str | tuple]) -> str:
    """`claims.across_lengths` of finished how_vits_work workdirs ({label: workdir or workdirs}, one label
    per training length), from their results/MODEL.json; the models are those measured at every length."""
    results = {
        label: read_results(*([w] if isinstance(w, str) else w)) for label, w in workdirs.items()
    }
    common = [m for m in next(iter(results.values())) if all(m in r for r in results.values())]
    return claims.across_lengths(
        {label: claims.rows({m: r[m] for m in common}) for label, r in results.items()}
    )


def time_table(results: dict) -> str:
    """Per model: its training (steps, last-epoch loss change and whether that meets the 3% criterion,
    `last_epoch_change`) and wall-clock seconds: training (this run's, when it trained), the measurements'
    compiling (their programs, two at a time) and running (docs/how_vits_work.md, Time)."""
    lines = [
        "| model | steps | last-epoch loss change | converged (< 3%) | training (s) | "
        "compiling the measurements (s) | running them (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, r in results.items():
        s = r.get("seconds_by_program", {})
        run = sum(v for k, v in s.items() if k.startswith("run_"))
        train, t = r.get("training_seconds"), r.get("training", {})
        change = (
            f"{100 * t['change']:+.1f}% ({t['first_loss']:.3f} -> {t['last_loss']:.3f})"
            if t
            else "-"
        )
        lines.append(
            f"| {claims.LABELS.get(key, key)} | {t.get('steps', '-')} | {change} | "
            f"{('yes' if t['converged'] else 'NO') if t else '-'} | {'-' if train is None else f'{train:.0f}'} | "
            f"{s.get('compile_wall', float('nan')):.0f} | {run:.0f} |"
        )
    return "\n".join(lines) + "\n"


def write_report(workdir: epath.Path, results: dict, seconds: float | None, quick: bool) -> None:
    """The figures (models side by side) and summary.md (`seconds`: the run's wall clock, None: unknown)."""
    labelled = {claims.LABELS.get(k, k): r for k, r in results.items()}
    for name, figure in FIGURES.items():
        save_png(figure(labelled), workdir / f"pk22_{name}.png", dpi=110, bbox_inches="tight")
    order = list(results)
    table = claims.markdown(claims.rows(results), order)
    stem = claims.stem_position_table(results)
    timing = [] if seconds is None else [f"{seconds:.0f}s end to end"]
    head = ", ".join(([":quick"] if quick else []) + timing)
    text = (
        f"# PK22's measurements{f' ({head})' if head else ''}\n\n{table}\n"
        + (stem + "\n" if stem else "")
        + "Figures: "
        + ", ".join(f"pk22_{n}.png" for n in FIGURES)
        + ". Every number: results/MODEL.json.\n\n"
        + time_table(results)
    )
    io.write_text(workdir / "summary.md", text)
    progress.say(text)
