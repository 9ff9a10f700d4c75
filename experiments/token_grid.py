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
from posattn.errors import ConfigError
from posattn.papers.lwlc23 import grid_experiment, grid_report, published
from posattn.plots import token_grid as plots
from posattn.vision.setup import resolve

_CONFIG = cli.define_config(
    "tpu_configs/token_grid.py",
    grid_experiment.SCHEMA,
    "The image config of every cell, with grid.*",
)
_WORKDIR = flags.DEFINE_string("workdir", None, "where results are written", required=True)


def main(argv):
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    if not flags.FLAGS[
        "verbosity"
    ].present:  # quiet library logs (orbax's at every save); --verbosity=0 shows them
        logging.set_verbosity(logging.ERROR)
    grid = _CONFIG.value.grid
    Rs, kinds, starts, seeds, ks = grid_experiment.check_grid(grid)
    base = ml_collections.ConfigDict(_CONFIG.value.to_dict())
    del base["grid"]
    # refused if empty before it is made absolute (which would make "" the current directory); a local
    # path made absolute, since the cells record their pre-trained start by path
    workdir = io.absolute(ownership.check_path(_WORKDIR.value))
    pretrains, configs = grid_experiment.plan(base, grid, workdir, Rs, kinds, starts, seeds)
    for config in configs.values():  # every run's config, before the workdir is touched
        grid_experiment.check_cell(config)
    for config in pretrains.values():
        resolve(config)
    config = {
        "Rs": Rs,
        "attentions": kinds,
        "starts": starts,
        "seeds": seeds,
        "ks": ks,
        "seed": grid.seed,
        "pretrain": {n: c.to_dict() for n, c in pretrains.items()},
        "cells": {n: c.to_dict() for n, c in configs.items()},
    }
    # its own (its runs resume), writable and locked, before any training
    cli.claim(workdir, "token_grid", config, resumes=True)
    io.write_json(os.path.join(workdir, "config.json"), config)
    metrics_path = os.path.join(workdir, "metrics.jsonl")
    io.write_text(metrics_path, "")
    t0, cells, pretrained, runs = time.perf_counter(), [], {}, len(configs) + len(pretrains)

    def progress(i, name, what):
        elapsed = time.perf_counter() - t0
        print(
            f"[{i}/{runs}] {name}: {what}; {elapsed:.0f}s, ETA {elapsed * (runs - i) / i:.0f}s",
            flush=True,
        )

    for name, config in configs.items():
        pre = os.path.basename(config.init_from) if config.init_from else None
        if pre and pre not in pretrained:
            pretrained[pre] = record = grid_experiment.pretrain(pretrains[pre], config.init_from)
            io.append_jsonl(metrics_path, record)
            progress(
                len(cells) + len(pretrained),
                pre,
                f"pre-trained, test accuracy {record['test_accuracy']:.4f} on {record['dataset']}",
            )
        cell = grid_experiment.run_cell(config, os.path.join(workdir, name), ks, seed=grid.seed)
        cells.append(cell)
        io.append_jsonl(metrics_path, cell)
        progress(
            len(cells) + len(pretrained),
            name,
            f"test accuracy {cell['test_accuracy']:.4f}, relevant mass "
            f"{cell['relevant_mass']:.3f} (chance {cell['chance_mass']:.3f})",
        )
    seconds = time.perf_counter() - t0

    curves = grid_report.curves(cells)
    figures = {
        "token_grid_accuracy.png": plots.accuracy(curves, published.GRID_ACCURACY),
        "token_grid_attention.png": plots.attention_mass(curves),
        "token_grid_pruning.png": plots.pruning(curves),
    }
    for name, fig in figures.items():
        fig.savefig(os.path.join(workdir, name), dpi=110)
    first = next(iter(configs.values()))
    pre_text = ""
    if pretrained:
        accs = [p["test_accuracy"] for p in pretrained.values()]
        pre_text = (
            f" Pre-trained start: the same ViT trained {grid.pretrain_steps} steps on single items of "
            f"{next(iter(pretrains.values())).dataset} (all classes; test accuracy "
            f"{min(accs):.4f}-{max(accs):.4f}), P spread over the slots, a fresh 2-class head."
        )
    setting = (
        f"Dataset {grid.family}/R (R = {', '.join(map(str, Rs))}); ViT {first.model.variant} "
        f"({first.model.pool} pooling), {first.total_steps} steps of batch {first.global_batch_size}, "
        f"starts {', '.join(starts)}, seeds {', '.join(map(str, seeds))}; config "
        f"{flags.FLAGS['config'].config_filename}.{pre_text} Attention: last block, mean over heads; "
        f"pruning removes k = {ks[0]}..{ks[-1]} slots per test grid. Intervals: 95% t-intervals over "
        f"seeds."
    )
    rows = grid_report.rows(cells)
    io.write_json(
        os.path.join(workdir, "summary.json"),
        {"rows": rows, "cells": cells, "pretrain": list(pretrained.values()), "seconds": seconds},
    )
    io.write_text(
        os.path.join(workdir, "summary.md"),
        grid_report.summary_markdown(cells, setting, seconds, list(figures)),
    )
    print(grid_report.markdown_table(rows), flush=True)
    print(f"{seconds:.1f}s; results in {workdir}")


def entry():
    """`python -m posattn.experiments.token_grid` and the console script `posattn-token-grid` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
