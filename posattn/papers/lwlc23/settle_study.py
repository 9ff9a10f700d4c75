"""The settling runs of LWLC23's three open results (`experiments/shallow_settle.py`): the schema of
their config (the pre-registered values: tpu_configs/shallow_settle.py) and the driver that runs one
study of `settle` and writes its results, summary and figure.
"""

import os
import time

import ml_collections

from posattn import configs, io, run_record
from posattn.errors import ConfigError
from posattn.papers.lwlc23 import settle, settle_grid, settle_report
from posattn.plots import save_png
from posattn.plots import shallow as plots
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig

CONFIGS = {"tokens": TokenConfig, "model": ModelConfig, "sgd": SGDConfig}


def _schema(fields) -> ml_collections.ConfigDict:
    """The study's fields (pre-registered values: tpu_configs/shallow_settle.py)."""
    study = fields.get("study", "boundary")
    c = ml_collections.ConfigDict(
        {key: configs.dataclass_section(cls()) for key, cls in CONFIGS.items()}
    )
    c.tokens.update(
        {
            "L": 30 if study == "init_error" else 60,
            "tau": 0.5 if study == "sparsify" else 1.0,
            "alpha_conf": 1 / 30,
            "theorem_margin": False,
        }
    )
    c.sgd.t_scale = 10.0
    c.update(
        {
            "study": study,
            "seed": 0,
            "seeds": 64 if study == "init_error" else 40 if study == "boundary" else 16,
            "coarse_seeds": 8,
            "coarse_Ns": (4, 16, 64, 256, 1024, 4096),
            "window": 2.0,  # each row's fine grid spans N*_coarse / window .. N*_coarse * window
            "ratio": 1.2,  # of the fine grid
            "level": settle.LEVEL,
            "boot": 1000,
            "analyze_only": False,  # summarise the parts already saved, computing none (a study stopped early)
            "parts_from": "",  # also read saved parts from this directory (another run's parts/, e.g. still running)
            # boundary
            "n_confs": (0, 2, 4),
            "n_stars": (9, 12, 18, 24),
            "attentions": ("softmax", "none"),
            # init_error
            "sigmas": (0.0, 1 / 6, 0.5, 1.0),
            "deltas": (0.25, 0.49, 1.0),
            # each knob swept alone around the base (sigma_base, delta_base, tokens.tau); the base is a
            # row of its own, N*(base) the reference of every difference
            "sigma_base": 0.0,
            "delta_base": 0.0,
            "taus": (),
            # sparsify
            "Ls": (30, 60, 100),
            "noisy_counts": (5, 10, 20),
            "noisy_kinds": ("any", "irrelevant"),
            "noisy_taus": (1.0, 2.0),
            "policies": ("random", "irrelevant", "noisy", "attention"),
            "train_Ls": (
                60,
            ),  # training-time sparsification (one model per policy and k: the costly part)
            "train_policies": ("random", "irrelevant", "noisy"),
        }
    )
    return c


def _smoke(c):
    c.update(
        {
            "seeds": 4,
            "coarse_seeds": 2,
            "coarse_Ns": (4, 16, 64),
            "window": 1.5,
            "ratio": 1.5,
            "boot": 50,
            "n_confs": (0, 2),
            "n_stars": (9, 18),
            "sigmas": (0.0, 1.0),
            "deltas": (1.0,),
            "Ls": (30,),
            "noisy_counts": (5,),
            "noisy_kinds": ("any",),
            "noisy_taus": (2.0,),
            "train_Ls": (30,),
            "attentions": ("softmax",),
        }
    )
    c.sgd.n_test, c.sgd.t_scale = 100, 4.0


SCHEMA = configs.Schema("a shallow_settle config", _schema, _smoke)


def run(config, workdir: str, claim) -> None:
    """Check `config` (SCHEMA), `claim(workdir, "shallow_settle", ...)` (the binary's `cli.claim`), run
    its study (its saved parts skipped) and write results.json, summary.md and its figure."""
    cfg = {key: cls(**config[key].to_dict()) for key, cls in CONFIGS.items()}
    cfg["model"].check_widths(cfg["tokens"])
    if config.seeds < 2 or config.coarse_seeds < 1 or config.boot < 10:
        raise ConfigError(
            f"seeds={config.seeds}, coarse_seeds={config.coarse_seeds}, boot={config.boot}: need "
            f"seeds >= 2, coarse_seeds >= 1, boot >= 10"
        )
    record = {"study": config.study, "config": config.to_dict()}
    claim(workdir, "shallow_settle", record, resumes=True, may_change=("config.analyze_only",))
    run_record.write_config(workdir, record)
    run_record.write_run(workdir)
    t0 = time.perf_counter()
    study = {
        "boundary": settle.run_boundary,
        "init_error": settle.run_init_error,
        "sparsify": settle.run_sparsify,
    }[config.study]
    results = study(
        config, cfg, settle_grid.part_saver(workdir, config.analyze_only, config.parts_from)
    )
    results["seconds"] = time.perf_counter() - t0
    io.write_json(os.path.join(workdir, "results.json"), results)
    summary = settle_report.summary_markdown(config.study, results, config)
    io.write_text(os.path.join(workdir, "summary.md"), summary)
    fig = plots.settle_figure(config.study, results)
    save_png(fig, os.path.join(workdir, f"{config.study}.png"), dpi=110)
    print(summary, flush=True)
