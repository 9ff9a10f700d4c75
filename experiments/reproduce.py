r"""Every claim of JSL22's theory, measured beside what the paper states, from one command.

    python -m posattn.experiments.reproduce --workdir=DIR          # full run, < 10 min on 2 CPU cores
    posattn-reproduce --config=tpu_configs/reproduce.py:quick --workdir=DIR   # small sizes, < 2 min

`--config=FILE[:ARG]` (default tpu_configs/reproduce.py) with the field seed; `:quick` is the smoke run
(small sizes, few steps).

Runs the theory core (GD on (E), `paper` preset), GD on the exact population risk (P) (`small`
preset), the GLM baseline (Theorem 3.1), the construction without patch association (Theorem 3.2),
Figure 2 (`fig2` preset), transfer (Theorem 5.1) and the sample-size sweep, then writes DIR/report.md
(claim, what the paper states, what we measured, verdict, figure) and DIR/report.json (one entry per
claim with its numbers), with the figures as PNG in DIR. `docs/theory_results.md` is a committed copy.

One host: its claim checks read every fit back on the host that runs them and were not checked over
several processes; for a seed sweep on a pod use `posattn.experiments.theory` (docs/distributed.md).
"""

from posattn import cli
from posattn.papers.jsl22 import reproduce

cli.define_config("tpu_configs/reproduce.py", reproduce.SCHEMA, "The seed and size of the run")
cli.define_workdir("where report.md, report.json and the figures are written")


def main(config, workdir):
    reproduce.run(config, workdir, claim=cli.claim)


def entry():
    """The console script (`posattn-reproduce`, see pyproject.toml)."""
    cli.run(main, cpu_cores=True)  # one CPU device per core (docs/decisions.md)


if __name__ == "__main__":
    entry()
