r"""LWLC23's shallow-ViT theory end to end: attention concentration, phase-transition maps, N* against token
noise and initial-model error, token sparsification, and the exact noiseless population.

Command (from any directory: the binaries find tpu_configs/ in the checkout or the installed package,
`posattn.cli.find_config_file`):

  python -m posattn.experiments.shallow_vit --workdir=/tmp/shallow            # this file
  python -m posattn.experiments.shallow_vit --config=tpu_configs/shallow_vit.py:quick --workdir=/tmp/smoke
  python -m posattn.experiments.shallow_vit --workdir=DIR --config.tokens.tau=0.3 --config.seeds=10

Hardware: one CPU (2 cores). Wall clock on 2 quiet cores (2026-11-26): 264 s with an empty compilation
cache (`:quick`: smaller grids, 4 seeds, T = ceil(6 / (alpha_* eta)): 37 s with an empty cache;
docs/shallow_vit_results.md, Cost). Expected result (docs/shallow_vit_results.md): summary.md gives each
claim of LWLC23 with the paper's number, ours and a verdict (attention concentrating on label-relevant
tokens, the phase boundary N* falling with alpha_* and rising with the token noise and initial error,
sparsification keeping accuracy).

Fields: tokens.* (TokenConfig), model.* (ModelConfig), sgd.* (SGDConfig), seed, seeds, n_stars, Ns,
taus, init_errors, remove, remove_step, sparsify_noisy_tokens; this file changes none of them.
"""

import ml_collections


def get_config(arg=None):
    if arg:
        raise ValueError(f"unknown config argument {arg!r}: this file takes only `quick`")
    # the binary's defaults, unchanged; `schema` names whose (posattn.cli.Schema.kind), so another binary refuses it
    return ml_collections.ConfigDict({"schema": "shallow_vit"})
