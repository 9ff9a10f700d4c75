r"""PK22's measurements (Hessian spectra, Fourier analysis, feature variance, frequency noise, loss
landscapes) on ResNet, vanilla ViT, AlterNet and positional-attention ViT (docs/how_vits_work.md).

  python -m posattn.experiments.how_vits_work --workdir=/tmp/pk22     # trains the four on the digits
  python -m posattn.experiments.how_vits_work --config=tpu_configs/pk22.py:quick --workdir=/tmp/pk22
  python -m posattn.experiments.how_vits_work --workdir=DIR --config.runs=RUN_DIR,RUN_DIR  # trained runs

`--config=FILE[:ARG]` (default tpu_configs/pk22.py) with fields runs, models, quick, seed and the
measurement settings (fields of `suite.Settings`; unset: PK22's code's, docs/how_vits_work.md), each
overridable as `--config.FIELD=VALUE`; `:quick` is the smoke run. With no runs,
the models of tpu_configs/how_vits_work.py (`models`) are trained (or resumed) under WORKDIR/runs/. The
workdir receives config.json, metrics.jsonl, results/MODEL.json, the figures pk22_*.png and summary.md
(PK22's claims and numbers beside ours).

One host: the measurements (Hessian power iterations, landscape grids, Fourier and noise on the
test split) run in one process; the trained runs it measures may come from a multi-host train_images
run (`--config.runs`).
"""

from posattn import cli
from posattn.papers.pk22 import how_vits_work

cli.define_config(
    "tpu_configs/pk22.py", how_vits_work.SCHEMA, "The models (or trained runs) and measurements"
)
cli.define_workdir("Directory for the results, figures and trained runs.")


def main(config, workdir):
    how_vits_work.run(config, workdir, claim=cli.claim)


def entry():
    """`python -m posattn.experiments.how_vits_work` and the console script `posattn-how-vits-work` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
