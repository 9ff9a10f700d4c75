r"""JSL22's theory regime end to end: GD on Eq. (T), patch association and the three phases.

    python -m posattn.experiments.theory --workdir=/tmp/theory          # `phases` preset, < 1 min on a CPU
    posattn-theory --config=tpu_configs/theory.py:paper --config.seed=3 --workdir=DIR
    posattn-theory --config=tpu_configs/theory.py:quick --workdir=DIR  # the smoke run
    posattn-theory --config.theory.D=36 --config.theory.q=0.3 --config.gd.risk=population_mc --workdir=DIR

`--config=FILE[:PRESET]` is an ml_collections config file, by default tpu_configs/theory.py (found from any
directory), which names a preset of `posattn/theory/presets.py` (`phases`, `small`, `paper`, `fig2`;
`phases` when none is given; `quick` shrinks it to a smoke run); any field can be overridden with
`--config.FIELD=VALUE`: seed, seeds (runs seed, seed+1, ... vmapped in one
compiled call; figures show the first), overlay_N, theory.* (`TheoryConfig`) and gd.* (`GDConfig`).
Writes into --workdir: config.json, metrics.jsonl and tensorboard/ (docs/metrics.md), attention.png,
dynamics.png, test_error.png, summary.json and summary.md; with --config.gd.risk=population_exact also
overlay.png (GD on (E) at each overlay_N from the same start, beside the exact (P) run). The workdir is
the run's own (workdir.json, `posattn.ownership`): the same command on it runs again from the start, and
any other config or binary is refused. On several hosts run the same command on each; JAX detects TPU
pods, Slurm and Open MPI itself, and --coordinator_address/--num_processes/--process_id start any other
cluster (docs/distributed.md, "The theory regime").
"""

from posattn import cli
from posattn.papers.jsl22 import theory_run
from posattn.theory import presets

cli.define_config("tpu_configs/theory.py", presets.SCHEMA, "A theory config file[:PRESET]")
cli.define_workdir("where results are written")
cli.define_distributed_flags()  # one process per host of a cluster


def main(config, workdir):
    theory_run.run(config, workdir, claim=cli.claim)


def entry():
    """`python -m posattn.experiments.theory` and the console script `posattn-theory` (see pyproject.toml)."""
    cli.run(main, cpu_cores=True)  # one CPU device per core (docs/decisions.md)


if __name__ == "__main__":
    entry()
