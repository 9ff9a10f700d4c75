"""LWLC23's deeper-ViT experiment on token grids end to end (`experiments/token_grid.py`): every
pre-training run and cell of `grid_experiment`'s plan, trained one after another (each resumed if
present), then the claims of `grid_report` with their verdicts and the figures.
"""

import os
import time

import ml_collections

from posattn import io, metric_log, ownership, progress, run_record
from posattn.papers.lwlc23 import grid_experiment, grid_report, published
from posattn.plots import save_png
from posattn.plots import token_grid as plots
from posattn.vision.setup import resolve


def run(config, workdir: str, claim, config_file: str = "") -> None:
    """Check `config` (`grid_experiment.SCHEMA`) and every run's config, `claim(workdir, "token_grid", ...)` (the binary's
    `cli.claim`), pre-train and train every cell (each resumed if present), and write the claims' table,
    summary and figures into `workdir`; `config_file` names the config in summary.md's setting."""
    grid = config.grid
    Rs, kinds, starts, seeds, ks = grid_experiment.check_grid(grid)
    base = ml_collections.ConfigDict(config.to_dict())
    del base["grid"]
    # refused if empty before it is made absolute (which would make "" the current directory); a local
    # path made absolute, since the cells record their pre-trained start by path
    workdir = io.absolute(ownership.check_path(workdir))
    pretrains, configs = grid_experiment.plan(base, grid, workdir, Rs, kinds, starts, seeds)
    for cell in configs.values():  # every run's config, before the workdir is touched
        grid_experiment.check_cell(cell)
    for cell in pretrains.values():
        resolve(cell)
    record = {
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
    claim(workdir, "token_grid", record, resumes=True)
    run_record.write_config(workdir, record)
    run_record.write_run(workdir)
    log = metric_log.MetricLog(workdir, fresh=True)  # step: the record's place in the run
    t0, cells, pretrained, runs = time.perf_counter(), [], {}, len(configs) + len(pretrains)

    def report(i, name, what):
        elapsed = time.perf_counter() - t0
        progress.say(
            f"[{i}/{runs}] {name}: {what}; {elapsed:.0f}s, ETA {progress.eta(elapsed * (runs - i) / i)}"
        )

    for name, cell_config in configs.items():
        pre = os.path.basename(cell_config.init_from) if cell_config.init_from else None
        if pre and pre not in pretrained:
            pretrained[pre] = done = grid_experiment.pretrain(pretrains[pre], cell_config.init_from)
            log.write({"step": len(cells) + len(pretrained) - 1, **done})
            report(
                len(cells) + len(pretrained),
                pre,
                f"pre-trained, test accuracy {done['test_accuracy']:.4f} on {done['dataset']}",
            )
        cell = grid_experiment.run_cell(
            cell_config, os.path.join(workdir, name), ks, seed=grid.seed
        )
        cells.append(cell)
        log.write({"step": len(cells) + len(pretrained) - 1, **cell})
        report(
            len(cells) + len(pretrained),
            name,
            f"test accuracy {cell['test_accuracy']:.4f}, relevant mass "
            f"{cell['relevant_mass']:.3f} (chance {cell['chance_mass']:.3f})",
        )
    log.close()
    seconds = time.perf_counter() - t0

    curves = grid_report.curves(cells)
    figures = {
        "token_grid_accuracy.png": plots.accuracy(curves, published.GRID_ACCURACY),
        "token_grid_attention.png": plots.attention_mass(curves),
        "token_grid_pruning.png": plots.pruning(curves),
    }
    for name, fig in figures.items():
        save_png(fig, os.path.join(workdir, name), dpi=110)
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
        f"{config_file}.{pre_text} Attention: last block, mean over heads; "
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
