r"""JSL22's theory regime (Section 2, Eq. (T)): GD on the simplified ViT, patch association and the three
phases, on one of the presets of posattn/theory/presets.py (`phases` by default; `small`, `paper`, `fig2`).

Command (from any directory: the binaries find tpu_configs/ in the checkout or the installed package,
`posattn.cli.find_config_file`):

  python -m posattn.experiments.theory --workdir=/tmp/theory        # this file, preset `phases`
  posattn-theory --config=tpu_configs/theory.py:paper --config.seed=3 --workdir=DIR
  posattn-theory --config=tpu_configs/theory.py:quick --workdir=/tmp/theory-smoke   # N = 2,000, 200 steps
  posattn-theory --config.theory.D=36 --config.theory.q=0.3 --config.gd.risk=population_exact --workdir=DIR

Hardware: one CPU (2 cores are enough; `--config.seeds=8` spreads the seeds over the devices of a TPU or
GPU host). Expected wall-clock: `phases` 12-13 s on 2 quiet cores (compile included), `paper` ~100 s,
`:quick` a few seconds. Expected result (`phases`, README): test error on the phase-I plateau near the best
GLM's 13.2%, patch association from step ~175, final test error ~3.1% against a label-noise rate of 1.3%;
four of the proof sketch's five phase statements hold (docs/theory_results.md says why "alpha grows again
in phase III" does not).

The argument is a preset name, optionally with `quick`; fields: preset, seed, seeds, overlay_N, theory.*
(`TheoryConfig`) and gd.* (`GDConfig`), every one overridable with `--config.FIELD=VALUE`. This file
returns only the preset's name (and `schema`, whose config it is): the library owns the numbers
(posattn/theory/presets.py).
"""

import ml_collections


def get_config(arg=None):
    # `schema` names whose config this is (posattn.cli.Schema.kind), so another binary refuses it
    return ml_collections.ConfigDict({"schema": "theory", **({"preset": arg} if arg else {})})
