r"""LWLC23's deeper-ViT experiment on real images, offline: the ViT of posattn.vision trained on 3 x 3
grids with R = 5..9 label-relevant slots of 9 ("<family>/R": digit_grid of the 8 x 8 digits, the fast
smoke data; fashion_grid of Fashion-MNIST items), for each R, attention kind, start (from scratch, or
from the same ViT pre-trained on single items of the base dataset: LWLC23's pre-trained initial model)
and seed; reports test accuracy against alpha_* = R/9 with intervals over seeds, the attention mass on
relevant slots, and accuracy after removing the k least attended slots (docs/shallow_vit_results.md,
"Deeper ViT on token grids").

    python -m posattn.experiments.token_grid --workdir=/tmp/grid     # digits, from scratch: < 8 min on 2 CPU cores
    python -m posattn.experiments.token_grid --config=tpu_configs/token_grid.py:quick --workdir=/tmp/grid
    python -m posattn.experiments.token_grid --config=tpu_configs/token_grid.py:fashion --workdir=/tmp/fgrid
    python -m posattn.experiments.token_grid --workdir=DIR --config.grid.Rs=5,7,9 \
        --config.grid.attentions=vanilla --config.grid.seeds=0,1,2 --config.grid.steps=600

`--config=FILE[:ARG]` (default tpu_configs/token_grid.py, found from any directory) is the image config
of every cell, with the experiment's own fields grid.* (family, Rs, attentions, starts, seeds, steps,
pretrain_steps, max_pruned, seed); any field can be overridden with `--config.FIELD=VALUE`. `:quick` is
the smoke run: R = 5 and 9, 60 steps (20 of pre-training) of the file's test ViT, well under a minute a
cell.

Writes into --workdir: config.json, metrics.jsonl (one record per pre-training run and per cell),
summary.json, summary.md (the paper's number | ours | verdict), token_grid_accuracy.png,
token_grid_attention.png, token_grid_pruning.png, each pre-training run in pretrain_<attention>_s<seed>/
and each cell's training run in <start>_<attention>_R<R>_s<seed>/ (each resumed if present).

One host: each run is a short train_images run of a small ViT, trained one after another, seed by seed
(so an interrupted experiment has whole curves); for a pod, train a cell's config with
`posattn.experiments.train_images` (docs/distributed.md).
"""
import os
import time

import ml_collections
from absl import flags, logging

from posattn import cli, io, ownership
from posattn.errors import ConfigError, check_seed
from posattn.plots import token_grid as plots
from posattn.papers.lwlc23 import grid_experiment, grid_report, published
from posattn.vision import config as config_lib
from posattn.vision.data import token_grid
from posattn.vision.models.attention import ATTENTIONS
from posattn.vision.setup import resolve


def _schema(fields) -> ml_collections.ConfigDict:
    """The image config of every cell (posattn.vision.config) and the experiment's own `grid` section."""
    c = config_lib.base_config()
    c.grid = ml_collections.ConfigDict({
        "family": "digit_grid",  # the token-grid dataset family (posattn.vision.data.datasets)
        "Rs": tuple(token_grid.R_VALUES),  # label-relevant slots R (alpha_* = R/9)
        "attentions": "vanilla,positional",  # attention kinds to train, comma-separated
        "starts": "scratch",  # initial models, comma-separated: scratch, pretrained
        "seeds": (0,),  # config.seed of each run: its initialisation and batch order
        "steps": 0,  # training steps of every cell (0: the config's total_steps; the warm-up shrinks with it)
        "pretrain_steps": 0,  # steps of pre-training on the base's single items (a "pretrained" start needs them)
        "max_pruned": 4,  # pruning: remove k = 0..max_pruned slots per test grid
        "seed": 0,  # seed of the random-pruning baseline
    })
    return c


def _smoke(c):
    """R = 5 and 9, 60 steps, 20 of pre-training (and the config file's `smoke` section: tpu_configs/token_grid.py's test ViT)."""
    c.grid.Rs, c.grid.steps = (5, 9), 60
    c.grid.pretrain_steps = min(c.grid.pretrain_steps, 20)


SCHEMA = cli.Schema("a token-grid config (an image config and grid.*)", _schema, _smoke)
_CONFIG = cli.define_config("tpu_configs/token_grid.py", SCHEMA, "The image config of every cell, with grid.*")
_WORKDIR = flags.DEFINE_string("workdir", None, "where results are written", required=True)


def _names(text: str, allowed, field: str) -> list[str]:
    """The comma-separated names of `text`, each checked against `allowed`, in order, once each."""
    names = list(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    for name in names or [""]:
        if name not in allowed:
            raise ConfigError(f"grid.{field}: unknown {name!r}; use {', '.join(allowed)}, comma-separated")
    return names


def _ints(values, field: str, example: str) -> list[int]:
    try:
        out = sorted({int(v) for v in values})
    except (TypeError, ValueError):
        out = []
    if not out:
        raise ConfigError(f"grid.{field}={values}: give integers, e.g. --config.grid.{field}={example}")
    return out


def _check(grid) -> tuple[list[int], list[str], list[str], list[int], list[int]]:
    """(Rs, attention kinds, starts, seeds, pruned ks) of the grid section, or ConfigError."""
    Rs = _ints(grid.Rs, "Rs", "5,9")
    for R in Rs:
        token_grid.slot_counts(R)
    kinds = _names(grid.attentions, ATTENTIONS, "attentions")
    starts = _names(grid.starts, grid_experiment.STARTS, "starts")
    seeds = _ints(grid.seeds, "seeds", "0,1,2")
    for s in seeds:
        check_seed(s, "grid.seeds")
    if not 0 <= grid.max_pruned < token_grid.SLOTS:
        raise ConfigError(f"grid.max_pruned={grid.max_pruned} must lie in [0, {token_grid.SLOTS - 1}]")
    check_seed(grid.seed, "grid.seed")
    if grid.steps < 0:
        raise ConfigError(f"grid.steps={grid.steps} must be positive (0: the config's total_steps)")
    if "pretrained" in starts and grid.pretrain_steps < 1:
        raise ConfigError(f"grid.pretrain_steps={grid.pretrain_steps}: a pretrained start needs pre-training "
                          "steps, e.g. --config.grid.pretrain_steps=940")
    return Rs, kinds, starts, seeds, list(range(grid.max_pruned + 1))


def _plan(base, grid, workdir, Rs, kinds, starts, seeds) -> tuple[dict, dict]:
    """({name: pre-training config}, {name: cell config}) in the order they run: seed by seed, each
    kind's pre-training before the cells that start from it."""
    pretrains, cells = {}, {}
    for seed in seeds:
        for kind in kinds:
            for start in starts:
                init_from = ""
                if start == "pretrained":
                    name = grid_experiment.pretrain_name(kind, seed)
                    init_from = os.path.join(workdir, name)
                for R in Rs:
                    config = grid_experiment.cell_config(base, family=grid.family, R=R, attention=kind, seed=seed,
                                                         steps=grid.steps or None, init_from=init_from)
                    if init_from and name not in pretrains:
                        pretrains[name] = grid_experiment.pretrain_config(config, grid.pretrain_steps)
                    cells[grid_experiment.cell_name(R, kind, start, seed)] = config
    return pretrains, cells


def main(argv):
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    if not flags.FLAGS["verbosity"].present:  # quiet library logs (orbax's at every save); --verbosity=0 shows them
        logging.set_verbosity(logging.ERROR)
    grid = _CONFIG.value.grid
    Rs, kinds, starts, seeds, ks = _check(grid)
    base = ml_collections.ConfigDict(_CONFIG.value.to_dict())
    del base["grid"]
    workdir = os.path.abspath(_WORKDIR.value)  # (the cells record their pre-trained start by path)
    pretrains, configs = _plan(base, grid, workdir, Rs, kinds, starts, seeds)
    for config in configs.values():  # every run's config, before the workdir is touched
        grid_experiment.check_cell(config)
    for config in pretrains.values():
        resolve(config)
    config = {"Rs": Rs, "attentions": kinds, "starts": starts, "seeds": seeds, "ks": ks, "seed": grid.seed,
              "pretrain": {n: c.to_dict() for n, c in pretrains.items()},
              "cells": {n: c.to_dict() for n, c in configs.items()}}
    # its own (its runs resume), writable and locked, before any training
    ownership.claim(workdir, "token_grid", config, resumes=True)
    io.write_json(os.path.join(workdir, "config.json"), config)
    metrics_path = os.path.join(workdir, "metrics.jsonl")
    io.write_text(metrics_path, "")
    t0, cells, pretrained, runs = time.perf_counter(), [], {}, len(configs) + len(pretrains)

    def progress(i, name, what):
        elapsed = time.perf_counter() - t0
        print(f"[{i}/{runs}] {name}: {what}; {elapsed:.0f}s, ETA {elapsed * (runs - i) / i:.0f}s", flush=True)

    for name, config in configs.items():
        pre = os.path.basename(config.init_from) if config.init_from else None
        if pre and pre not in pretrained:
            summary = grid_experiment.pretrain(pretrains[pre], config.init_from)
            pretrained[pre] = {"pretrain": pre, "attention": config.model.attention, "seed": int(config.seed),
                               "dataset": pretrains[pre].dataset, "steps": summary["steps"],
                               "test_accuracy": summary["test_accuracy"], "seconds": summary["seconds"]}
            io.append_jsonl(metrics_path, pretrained[pre])
            progress(len(cells) + len(pretrained), pre, f"pre-trained, test accuracy {summary['test_accuracy']:.4f} "
                     f"on {pretrains[pre].dataset}")
        cell = grid_experiment.run_cell(config, os.path.join(workdir, name), ks, seed=grid.seed)
        cells.append(cell)
        io.append_jsonl(metrics_path, cell)
        progress(len(cells) + len(pretrained), name, f"test accuracy {cell['test_accuracy']:.4f}, relevant mass "
                 f"{cell['relevant_mass']:.3f} (chance {cell['chance_mass']:.3f})")
    seconds = time.perf_counter() - t0

    curves = grid_report.curves(cells)
    figures = {"token_grid_accuracy.png": plots.accuracy(curves, published.GRID_ACCURACY),
               "token_grid_attention.png": plots.attention_mass(curves),
               "token_grid_pruning.png": plots.pruning(curves)}
    for name, fig in figures.items():
        fig.savefig(os.path.join(workdir, name), dpi=110)
    first = next(iter(configs.values()))
    pre_text = ""
    if pretrained:
        accs = [p["test_accuracy"] for p in pretrained.values()]
        pre_text = (f" Pre-trained start: the same ViT trained {grid.pretrain_steps} steps on single items of "
                    f"{next(iter(pretrains.values())).dataset} (all classes; test accuracy "
                    f"{min(accs):.4f}-{max(accs):.4f}), P spread over the slots, a fresh 2-class head.")
    setting = (f"Dataset {grid.family}/R (R = {', '.join(map(str, Rs))}); ViT {first.model.variant} "
               f"({first.model.pool} pooling), {first.total_steps} steps of batch {first.global_batch_size}, "
               f"starts {', '.join(starts)}, seeds {', '.join(map(str, seeds))}; config "
               f"{flags.FLAGS['config'].config_filename}.{pre_text} Attention: last block, mean over heads; "
               f"pruning removes k = {ks[0]}..{ks[-1]} slots per test grid. Intervals: 95% t-intervals over "
               f"seeds.")
    rows = grid_report.rows(cells)
    io.write_json(os.path.join(workdir, "summary.json"),
                  {"rows": rows, "cells": cells, "pretrain": list(pretrained.values()), "seconds": seconds})
    io.write_text(os.path.join(workdir, "summary.md"),
                  grid_report.summary_markdown(cells, setting, seconds, list(figures)))
    print(grid_report.markdown_table(rows), flush=True)
    print(f"{seconds:.1f}s; results in {workdir}")


def entry():
    """`python -m posattn.experiments.token_grid` and the console script `posattn-token-grid` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
