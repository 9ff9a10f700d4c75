r"""Why alpha falls in phase III where JSL22 says it grows: the exact population dynamics at several q.

    python -m posattn.experiments.phase_three --workdir=DIR            # `small` preset, q = 0.4, 0.2, 0.1
    python -m posattn.experiments.phase_three --config=tpu_configs/phase_three.py:quick --workdir=DIR

`--config=FILE[:ARG]` (default tpu_configs/phase_three.py) with fields preset, q and steps, each
overridable as `--config.FIELD=VALUE`; `:quick` runs 100 steps.

Runs GD on the exact population risk (P) as its reduced recursions (`population.reduced`, v on span(w*))
from the same start for each q, and splits the drift of alpha, -dR/dalpha, between the patterns the model
misclassifies and the others (`reduced.alpha_drift_split`). Writes
summary.json, summary.md and phase_three.png (docs/theory_results.md, "Phase III").

One host, one device: the exact population recursions hold a few vectors per step, nothing a second
host would share.
"""

from posattn import cli
from posattn.papers.jsl22 import phase_three

cli.define_config(
    "tpu_configs/phase_three.py", phase_three.SCHEMA, "The problem and the q to compare"
)
cli.define_workdir("where results are written")


def main(config, workdir):
    phase_three.run(config, workdir, claim=cli.claim)


def entry():
    """`python -m posattn.experiments.phase_three` and the console script `posattn-phase-three` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
