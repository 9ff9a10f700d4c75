r"""LWLC23's deeper-ViT experiment on real images, offline: the ViT of posattn.vision trained on 3 x 3
grids of digits with R = 5..9 label-relevant slots of 9 ("digit_grid/R"), for each R and both attention
kinds; reports test accuracy against alpha_* = R/9, the attention mass on relevant slots, and accuracy
after removing the k least attended slots (docs/shallow_vit_results.md, "Deeper ViT on token grids").

    python -m experiments.token_grid --workdir=/tmp/grid            # default: < 8 min on 2 CPU cores
    python -m experiments.token_grid --workdir=/tmp/grid --quick    # R = 5, 9 and 60 steps, < 90 s
    python -m experiments.token_grid --workdir=DIR --Rs=5,7,9 --attentions=vanilla --steps=600

Writes into --workdir: config.json, metrics.jsonl (one record per cell), summary.json, summary.md (the
paper's number | ours | verdict), token_grid_accuracy.png, token_grid_attention.png,
token_grid_pruning.png, and each cell's training run in <attention>_R<R>/ (resumed if present).
"""
import os
import time

from absl import flags, logging

from posattn import cli, io, ownership
from posattn.errors import ConfigError, check_seed
from posattn.plots import token_grid as plots
from posattn.papers.lwlc23 import grid_experiment, grid_report, published
from posattn.vision.data import token_grid
from posattn.vision.models.attention import ATTENTIONS

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "where results are written", required=True)
flags.DEFINE_boolean("quick", False, "R = 5 and 9 only, 60 steps (flags given explicitly win)")
flags.DEFINE_string("config", "tpu_configs/token_grid.py", "the image-regime config of every cell")
flags.DEFINE_string("family", "digit_grid", "the token-grid dataset family (posattn.vision.data.datasets)")
flags.DEFINE_list("Rs", [str(R) for R in token_grid.R_VALUES], "label-relevant slots R (alpha_* = R/9)")
flags.DEFINE_list("attentions", ["vanilla", "positional"], "attention kinds to train")
flags.DEFINE_integer("steps", None, "training steps of every cell (default: the config's)")
flags.DEFINE_string("variant", None, "ViT variant of every cell (default: the config's); the patch must "
                    "be the base image's side so that a token is a slot")
flags.DEFINE_enum("pool", None, ["gap", "cls"], "pooling of every cell (default: the config's, gap); with "
                  "cls the attention metrics read the CLS token's row")
flags.DEFINE_integer("max_pruned", 4, "pruning: remove k = 0..max_pruned slots per test grid")
flags.DEFINE_integer("seed", 0, "seed of the random-pruning baseline")

QUICK = {"Rs": ["5", "9"], "steps": 60}


def flag(name):
    return cli.quick_or_flag(name, QUICK)


def _check_flags() -> tuple[list[int], list[str], list[int]]:
    Rs = sorted(set(cli.int_list(",".join(flag("Rs")), "Rs")))
    for R in Rs:
        token_grid.slot_counts(R)
    kinds = list(dict.fromkeys(flag("attentions")))
    for kind in kinds:
        if kind not in ATTENTIONS:
            raise ConfigError(f"--attentions: unknown attention {kind!r}; use {', '.join(ATTENTIONS)}")
    if not 0 <= FLAGS.max_pruned < token_grid.SLOTS:
        raise ConfigError(f"--max_pruned={FLAGS.max_pruned} must lie in [0, {token_grid.SLOTS - 1}]")
    check_seed(FLAGS.seed, "--seed")
    if flag("steps") is not None and flag("steps") < 1:
        raise ConfigError(f"--steps={flag('steps')} must be positive")
    return Rs, kinds, list(range(FLAGS.max_pruned + 1))


def main(argv):
    del argv
    if not FLAGS["verbosity"].present:  # quiet library logs (orbax's at every save); --verbosity=0 shows them
        logging.set_verbosity(logging.ERROR)
    Rs, kinds, ks = _check_flags()
    base = cli.load_config(FLAGS.config)
    configs = {(R, kind): grid_experiment.cell_config(base, family=FLAGS.family, R=R, attention=kind,
                                                      steps=flag("steps"), variant=FLAGS.variant,
                                                      pool=FLAGS.pool)
               for kind in kinds for R in Rs}
    for config in configs.values():  # every cell's config, before the workdir is touched
        grid_experiment.check_cell(config)
    workdir = FLAGS.workdir
    config = {"Rs": Rs, "attentions": kinds, "ks": ks, "seed": FLAGS.seed, "quick": FLAGS.quick,
              "cells": {grid_experiment.cell_name(R, k): c.to_dict() for (R, k), c in configs.items()}}
    # its own (its cells resume), writable and locked, before any training
    ownership.claim(workdir, "token_grid", config, resumes=True)
    io.write_json(os.path.join(workdir, "config.json"), config)
    metrics_path = os.path.join(workdir, "metrics.jsonl")
    io.write_text(metrics_path, "")
    t0, cells = time.perf_counter(), []
    for i, ((R, kind), config) in enumerate(configs.items()):
        name = grid_experiment.cell_name(R, kind)
        cell = grid_experiment.run_cell(config, os.path.join(workdir, name), ks, seed=FLAGS.seed)
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
    setting = (f"Dataset {FLAGS.family}/R (R = {', '.join(map(str, Rs))}); ViT {first.model.variant} "
               f"({first.model.pool} pooling), "
               f"{first.total_steps} steps of batch {first.global_batch_size} from scratch (the paper fine-tunes "
               f"a pre-trained ViT), config {FLAGS.config}. Attention: last block, mean over heads; pruning "
               f"removes k = {ks[0]}..{ks[-1]} slots per test grid.")
    rows = grid_report.rows(cells)
    io.write_json(os.path.join(workdir, "summary.json"), {"rows": rows, "cells": cells, "seconds": seconds})
    io.write_text(os.path.join(workdir, "summary.md"),
                  grid_report.summary_markdown(cells, setting, seconds, list(figures)))
    print(grid_report.markdown_table(rows), flush=True)
    print(f"{seconds:.1f}s; results in {workdir}")


if __name__ == "__main__":
    cli.run(main)
