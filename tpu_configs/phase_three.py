r"""Why alpha falls in phase III where JSL22 says it grows: the exact population dynamics at several q.

Command (from any directory: the binaries find tpu_configs/ in the checkout or the installed package,
`posattn.cli.find_config_file`):

  python -m posattn.experiments.phase_three --workdir=DIR              # `small` preset, q = 0.4, 0.2, 0.1
  python -m posattn.experiments.phase_three --config=tpu_configs/phase_three.py:quick --workdir=DIR
  python -m posattn.experiments.phase_three --config.q=0.4,0.1 --config.steps=500 --workdir=DIR

Hardware: one CPU. Expected wall-clock: about a minute (`:quick`, 100 steps: seconds). Expected result
(docs/theory_results.md, "Phase III"): alpha peaks early and falls for every q, and the drift of alpha
at the end comes from the few patterns the model still misclassifies.

Fields: preset (the problem; its q is replaced by each of q), q (the spurious-feature probabilities),
steps (GD steps on (P); 0: the preset's); this file changes none of them.
"""

import ml_collections


def get_config(arg=None):
    if arg:
        raise ValueError(f"unknown config argument {arg!r}: this file takes only `quick`")
    # the binary's defaults, unchanged; `schema` names whose (posattn.cli.Schema.kind), so another binary refuses it
    return ml_collections.ConfigDict({"schema": "phase_three"})
