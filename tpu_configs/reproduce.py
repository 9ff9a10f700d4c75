r"""Every claim of JSL22's theory, measured beside what the paper states (docs/theory_results.md).

Command (from any directory: the binaries find tpu_configs/ in the checkout or the installed package,
`posattn.cli.find_config_file`):

  python -m posattn.experiments.reproduce --workdir=DIR                   # this file: the full run
  posattn-reproduce --config=tpu_configs/reproduce.py:quick --workdir=DIR  # small sizes: a smoke run
  posattn-reproduce --config.seed=1 --workdir=DIR

Hardware: one CPU (2 cores). Expected wall-clock: < 10 minutes for the full run, < 2 minutes for `:quick`
(2 quiet cores, compile included). Expected result: docs/theory_results.md, a committed copy of the full
run's report.md (each claim, the paper's statement, our number and a verdict).

Fields (posattn.papers.jsl22.reproduce.SCHEMA): seed (of every run) and quick (the small plan); this
file changes none of them.
"""

import ml_collections


def get_config(arg=None):
    if arg:
        raise ValueError(f"unknown config argument {arg!r}: this file takes only `quick`")
    # the binary's defaults, unchanged; `schema` names whose (posattn.cli.Schema.kind), so another binary refuses it
    return ml_collections.ConfigDict({"schema": "reproduce"})
