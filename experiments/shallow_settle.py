r"""The pre-registered settling runs of LWLC23's three open results (tpu_configs/shallow_settle.py states
their criteria; docs/shallow_vit_results.md, "Settling runs", their results):

    python -m experiments.shallow_settle --config=tpu_configs/shallow_settle.py:boundary --workdir=DIR
    python -m experiments.shallow_settle --config=tpu_configs/shallow_settle.py:sparsify --workdir=DIR
    python -m experiments.shallow_settle --config=tpu_configs/shallow_settle.py:init_error --workdir=DIR

`:STUDY,quick` shrinks the study to a smoke run (`:quick` alone: the boundary study). Every field is
overridable as --config.FIELD=VALUE.
Writes into --workdir: config.json, one parts/NAME.npz per finished part (the raw per-seed outcomes; a
rerun with the same config skips them, so a stopped run resumes), results.json, summary.md and a figure.
`--config.parts_from=DIR` also reads parts saved elsewhere and `--config.analyze_only=True` computes none,
so a study still running (or stopped) can be summarised from what it saved.

One host, one device: the models are a few thousand parameters; every study vmaps its seeds in one process.
"""

from posattn import cli
from posattn.papers.lwlc23 import settle_study

cli.define_config(
    "tpu_configs/shallow_settle.py:boundary", settle_study.SCHEMA, "The study and its grids"
)
cli.define_workdir("where results are written")


def main(config, workdir):
    settle_study.run(config, workdir, claim=cli.claim)


def entry():
    cli.run(main)


if __name__ == "__main__":
    entry()
