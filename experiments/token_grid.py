r"""LWLC23's deeper-ViT experiment on real images, offline: the ViT of posattn.vision trained on 3 x 3
grids of digits with R = 5..9 label-relevant slots of 9 ("digit_grid/R"), for each R and both attention
kinds; reports test accuracy against alpha_* = R/9, the attention mass on relevant slots, and accuracy
after removing the k least attended slots (docs/shallow_vit_results.md, "Deeper ViT on token grids").

    python -m posattn.experiments.token_grid --workdir=/tmp/grid     # default: < 8 min on 2 CPU cores
    python -m posattn.experiments.token_grid --config=tpu_configs/token_grid.py:quick --workdir=/tmp/grid
    python -m posattn.experiments.token_grid --workdir=DIR --config.grid.Rs=5,7,9 \
        --config.grid.attentions=vanilla --config.grid.steps=600 --config.model.variant=S/8

`--config=FILE[:ARG]` (default tpu_configs/token_grid.py, found from any directory) is the image config
of every cell, with the experiment's own fields grid.* (family, Rs, attentions, steps, max_pruned, seed);
any field can be overridden with `--config.FIELD=VALUE`. `:quick` is the smoke run: R = 5 and 9, 60
steps of the file's test/8 ViT, well under a minute.

Writes into --workdir: config.json, metrics.jsonl (one record per cell), summary.json, summary.md (the
paper's number | ours | verdict), token_grid_accuracy.png, token_grid_attention.png,
token_grid_pruning.png, and each cell's training run in <attention>_R<R>/ (resumed if present).

One host: each cell is a short train_images run of a small ViT, trained one after another; for a pod,
train a cell's config with `posattn.experiments.train_images` (docs/distributed.md).
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


def _schema(fields) -> ml_collections.ConfigDict:
    """The image config of every cell (posattn.vision.config) and the experiment's own `grid` section."""
    c = config_lib.base_config()
    c.grid = ml_collections.ConfigDict({
        "family": "digit_grid",  # the token-grid dataset family (posattn.vision.data.datasets)
        "Rs": tuple(token_grid.R_VALUES),  # label-relevant slots R (alpha_* = R/9)
        "attentions": "vanilla,positional",  # attention kinds to train, comma-separated
        "steps": 0,  # training steps of every cell (0: the config's total_steps; the warm-up shrinks with it)
        "max_pruned": 4,  # pruning: remove k = 0..max_pruned slots per test grid
        "seed": 0,  # seed of the random-pruning baseline
    })
    return c


def _smoke(c):
    """R = 5 and 9, 60 steps (and the config file's `smoke` section: tpu_configs/token_grid.py's test/8 ViT)."""
    c.grid.Rs, c.grid.steps = (5, 9), 60


SCHEMA = cli.Schema("a token-grid config (an image config and grid.*)", _schema, _smoke, "token_grid")
_CONFIG = cli.define_config("tpu_configs/token_grid.py", SCHEMA, "The image config of every cell, with grid.*")
_WORKDIR = flags.DEFINE_string("workdir", None, "where results are written", required=True)


def _check(grid) -> tuple[list[int], list[str], list[int]]:
    try:
        Rs = sorted({int(R) for R in grid.Rs})
    except (TypeError, ValueError):
        Rs = []
    if not Rs:
        raise ConfigError(f"grid.Rs={grid.Rs}: give slot counts R, e.g. --config.grid.Rs=5,9")
    for R in Rs:
        token_grid.slot_counts(R)
    kinds = list(dict.fromkeys(k.strip() for k in grid.attentions.split(",") if k.strip()))
    for kind in kinds or [""]:
        if kind not in ATTENTIONS:
            raise ConfigError(f"grid.attentions: unknown attention {kind!r}; use {', '.join(ATTENTIONS)}")
    if not 0 <= grid.max_pruned < token_grid.SLOTS:
        raise ConfigError(f"grid.max_pruned={grid.max_pruned} must lie in [0, {token_grid.SLOTS - 1}]")
    check_seed(grid.seed, "grid.seed")
    if grid.steps < 0:
        raise ConfigError(f"grid.steps={grid.steps} must be positive (0: the config's total_steps)")
    return Rs, kinds, list(range(grid.max_pruned + 1))


def main(argv):
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    if not flags.FLAGS["verbosity"].present:  # quiet library logs (orbax's at every save); --verbosity=0 shows them
        logging.set_verbosity(logging.ERROR)
    grid = _CONFIG.value.grid
    Rs, kinds, ks = _check(grid)
    base = ml_collections.ConfigDict(_CONFIG.value.to_dict())
    del base["grid"]
    configs = {(R, kind): grid_experiment.cell_config(base, family=grid.family, R=R, attention=kind,
                                                      steps=grid.steps or None)
               for kind in kinds for R in Rs}
    for config in configs.values():  # every cell's config, before the workdir is touched
        grid_experiment.check_cell(config)
    workdir = _WORKDIR.value
    config = {"Rs": Rs, "attentions": kinds, "ks": ks, "seed": grid.seed,
              "cells": {grid_experiment.cell_name(R, k): c.to_dict() for (R, k), c in configs.items()}}
    # its own (its cells resume), writable and locked, before any training
    ownership.claim(workdir, "token_grid", config, resumes=True)
    io.write_json(os.path.join(workdir, "config.json"), config)
    metrics_path = os.path.join(workdir, "metrics.jsonl")
    io.write_text(metrics_path, "")
    t0, cells = time.perf_counter(), []
    for i, ((R, kind), config) in enumerate(configs.items()):
        name = grid_experiment.cell_name(R, kind)
        cell = grid_experiment.run_cell(config, os.path.join(workdir, name), ks, seed=grid.seed)
        cells.append(cell)
        io.append_jsonl(metrics_path, cell)
        elapsed = time.perf_counter() - t0
        print(f"[{i + 1}/{len(configs)}] {name}: test accuracy {cell['test_accuracy']:.4f}, relevant mass "
              f"{cell['relevant_mass']:.3f} (chance {cell['chance_mass']:.3f}); {elapsed:.0f}s, ETA "
              f"{elapsed * (len(configs) - i - 1) / (i + 1):.0f}s", flush=True)
    seconds = time.perf_counter() - t0

    kinds = grid_report.by_kind(cells)
    figures = {"token_grid_accuracy.png": plots.accuracy(kinds, published.GRID_ACCURACY),
               "token_grid_attention.png": plots.attention_mass(kinds),
               "token_grid_pruning.png": plots.pruning(kinds)}
    for name, fig in figures.items():
        fig.savefig(os.path.join(workdir, name), dpi=110)
    first = next(iter(configs.values()))
    setting = (f"Dataset {grid.family}/R (R = {', '.join(map(str, Rs))}); ViT {first.model.variant} "
               f"({first.model.pool} pooling), "
               f"{first.total_steps} steps of batch {first.global_batch_size} from scratch (the paper fine-tunes "
               f"a pre-trained ViT), config {flags.FLAGS['config'].config_filename}. Attention: last block, mean "
               f"over heads; pruning "
               f"removes k = {ks[0]}..{ks[-1]} slots per test grid.")
    rows = grid_report.rows(cells)
    io.write_json(os.path.join(workdir, "summary.json"), {"rows": rows, "cells": cells, "seconds": seconds})
    io.write_text(os.path.join(workdir, "summary.md"),
                  grid_report.summary_markdown(cells, setting, seconds, list(figures)))
    print(grid_report.markdown_table(rows), flush=True)
    print(f"{seconds:.1f}s; results in {workdir}")


def entry():
    """`python -m posattn.experiments.token_grid` and the console script `posattn-token-grid` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
