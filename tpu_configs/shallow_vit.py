r"""LWLC23's shallow-ViT theory end to end: attention concentration, phase-transition maps, N* against token
noise and initial-model error, token sparsification, and the exact noiseless population.

Command (from any directory: the binaries find tpu_configs/ in the checkout or the installed package,
`posattn.cli.find_config_file`):

  python -m posattn.experiments.shallow_vit --workdir=/tmp/shallow            # this file
  python -m posattn.experiments.shallow_vit --config=tpu_configs/shallow_vit.py:quick --workdir=/tmp/smoke
  python -m posattn.experiments.shallow_vit --config=tpu_configs/shallow_vit.py:easy --workdir=/tmp/easy
  python -m posattn.experiments.shallow_vit --workdir=DIR --config.tokens.tau=0.3 --config.seeds=10

The default is regime I1 of issue 50's search (docs/shallow_vit_results.md, "Issue 50"): d = 16, M = 6,
m = 16, L = 30, token noise tau = 1.5, alpha_# = 0, an initial model with errors sigma = delta = 2, T =
ceil(10 / (alpha_* eta)), N = 128 where one model is trained; its grids reach the paper's N* of tens to
hundreds of samples. `:easy` is the earlier default (tau = 0.5, sigma = delta = 0.1, alpha_# = 1/30, T =
ceil(12 / (alpha_* eta))), where the task is learned from a handful of samples.

Hardware: one CPU (2 cores). Wall clock (2026-11-29, an empty compilation cache): 100 s, `:quick` 14 s
(docs/shallow_vit_results.md, Cost). Expected result (docs/shallow_vit_results.md): summary.md gives each
claim of LWLC23 with the paper's number, ours and a verdict (attention concentrating on label-relevant
tokens, the phase boundary N* falling with alpha_* and rising with the token noise and initial error,
sparsification keeping accuracy).

Fields: tokens.* (TokenConfig), model.* (ModelConfig), sgd.* (SGDConfig), seed, seeds, n_stars, Ns,
taus, sigmas, deltas, remove, remove_step, sparsify_noisy_tokens; this file changes none of them, and
`easy` these.
"""

import ml_collections

EASY = {
    "tokens": {"tau": 0.5, "alpha_conf": 1 / 30},
    "model": {"sigma": 0.1, "delta": 0.1},
    "sgd": {"t_scale": 12.0, "N": 200},
    "n_stars": (6, 8, 10, 12),
    "Ns": (4, 6, 9, 14, 20, 30, 45, 68, 100, 150, 640),
    "taus": (0.0, 0.5, 1.0),
    "sigmas": (0.0, 1.0),
    "deltas": (0.0, 1.0),
}


def get_config(arg=None):
    if arg not in (None, "", "easy"):
        raise ValueError(
            f"unknown config argument {arg!r}: this file takes `easy` and `quick` (e.g. easy,quick)"
        )
    # the binary's defaults (regime I1); `schema` names whose (posattn.cli.Schema.kind), so another
    # binary refuses it
    c = ml_collections.ConfigDict({"schema": "shallow_vit"})
    if arg == "easy":
        c.update(EASY)
    return c
