r"""LWLC23's shallow-ViT theory end to end: attention concentration, phase-transition maps, N* against
token noise and initial-model error, token sparsification, and the exact noiseless population.

    python -m posattn.experiments.shallow_vit --workdir=/tmp/shallow     # default: < 5 min on 2 CPU cores
    python -m posattn.experiments.shallow_vit --config=tpu_configs/shallow_vit.py:quick --workdir=/tmp/shallow
    python -m posattn.experiments.shallow_vit --workdir=DIR --config.tokens.tau=0.3 --config.Ns=10,20,40,80

`--config=FILE[:ARG]` (default tpu_configs/shallow_vit.py): every field of TokenConfig (tokens.*),
ModelConfig (model.*, attention excepted: both networks run) and SGDConfig (sgd.*), the grids (n_stars,
Ns, taus, sigmas, deltas), seed, seeds, remove, remove_step and sparsify_noisy_tokens, each overridable as
`--config.FIELD=VALUE`; `:quick` has smaller grids, fewer seeds and steps.
Writes into --workdir: config.json, metrics.jsonl (one record per stage, and the
attention history), summary.json, summary.md (each claim of the paper, its number, ours, a verdict),
phase_maps.png, boundary_sweeps.png, attention.png, sparsification.png.

One host, one device: LWLC23's one-layer models are a few thousand parameters; its sweeps vmap over
seeds in one process.
"""

from posattn import cli
from posattn.papers.lwlc23 import shallow_study

cli.define_config(
    "tpu_configs/shallow_vit.py", shallow_study.SCHEMA, "The data, model, SGD and grids"
)
cli.define_workdir("where results are written")


def main(config, workdir):
    shallow_study.run(config, workdir, claim=cli.claim)


def entry():
    """`python -m posattn.experiments.shallow_vit` and the console script `posattn-shallow-vit` (pyproject.toml)."""
    cli.run(main)


if __name__ == "__main__":
    entry()
