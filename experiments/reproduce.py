r"""Every claim of JSL22's theory, measured beside what the paper states, from one command.

    python -m posattn.experiments.reproduce --workdir=DIR          # full run, < 10 min on 2 CPU cores
    posattn-reproduce --config=tpu_configs/reproduce.py:quick --workdir=DIR   # small sizes, < 2 min

`--config=FILE[:ARG]` (default tpu_configs/reproduce.py) with fields seed and quick (`--quick`, the older
spelling, still works).

Runs the theory core (GD on (E), `paper` preset), GD on the exact population risk (P) (`small`
preset), the GLM baseline (Theorem 3.1), the construction without patch association (Theorem 3.2),
Figure 2 (`fig2` preset), transfer (Theorem 5.1) and the sample-size sweep, then writes DIR/report.md
(claim, what the paper states, what we measured, verdict, figure) and DIR/report.json (one entry per
claim with its numbers), with the figures as PNG in DIR. `docs/theory_results.md` is a committed copy.

One host: its claim checks read every fit back on the host that runs them and were not checked over
several processes; for a seed sweep on a pod use `posattn.experiments.theory` (docs/distributed.md).
"""

import dataclasses
import os
import time

import ml_collections
from absl import flags

from posattn import cli, io
from posattn import mesh as mesh_lib
from posattn.errors import ConfigError, check_seed
from posattn.papers.jsl22 import report, reproduce
from posattn.plots import theory as figures
from posattn.theory import keys

FLAGS = flags.FLAGS
# seed: of every run; quick: small sizes and few steps (a smoke run of every claim), what `:quick` sets
SCHEMA = cli.Schema(
    "a reproduce config (seed, quick)",
    lambda fields: ml_collections.ConfigDict({"seed": 0, "quick": False}),
    lambda c: c.update(quick=True),
    "reproduce",
)
_CONFIG = cli.define_config("tpu_configs/reproduce.py", SCHEMA, "The seed and size of the run")
flags.DEFINE_string(
    "workdir", None, "where report.md, report.json and the figures are written", required=True
)


def main(argv):
    mesh_lib.use_cpu_cores()  # first, before JAX starts: one CPU device per core (docs/decisions.md)
    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments {argv[1:]}: pass everything as --flags")
    config = _CONFIG.value
    plan = reproduce.QUICK if config.quick else reproduce.Plan()
    check_seed(config.seed)  # its key is made after the claim: a dry run compiles nothing
    workdir = FLAGS.workdir
    # its own, writable and locked, before any work
    cli.claim(workdir, "reproduce", {"seed": config.seed, "quick": config.quick})
    key = keys.seed_key(config.seed)

    def write_figures(claim_figures):
        for name, figure in claim_figures.items():
            figures.write_png(figure, os.path.join(workdir, name))

    t0 = time.perf_counter()
    records, seconds = reproduce.run_claims(key, plan, on_figures=write_figures)
    total = time.perf_counter() - t0
    results = {
        "seed": config.seed,
        "quick": config.quick,
        "plan": dataclasses.asdict(plan),
        "seconds": seconds,
        **records,
    }
    rows = report.verdicts(results)
    results["claims"] = rows
    results["total_seconds"] = total
    # report.json last, written atomically: its presence means the run completed.
    io.write_text(
        os.path.join(workdir, "report.md"),
        report.report_markdown(rows, results, total, config.quick),
    )
    io.write_json(os.path.join(workdir, "report.json"), results)
    for r in rows:
        print(f"{r['verdict']:>15}  {r['claim']}: {r['measured']}")
    print(f"{total:.0f}s; report in {workdir}/report.md")


def entry():
    """The console script (`posattn-reproduce`, see pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
