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

from posattn import cli
from posattn.papers.lwlc23 import grid_experiment, grid_study

cli.define_config(
    "tpu_configs/token_grid.py",
    grid_experiment.SCHEMA,
    "The image config of every cell, with grid.*",
)
cli.define_workdir("where results are written")


def main(config, workdir):
    grid_study.run(config, workdir, claim=cli.claim, config_file=cli.config_file())


def entry():
    """`python -m posattn.experiments.token_grid` and the console script `posattn-token-grid` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
