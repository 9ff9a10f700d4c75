r"""The pre-registered settling runs of LWLC23's three open results (docs/shallow_vit_results.md,
"Settling runs"), one study per argument:

  python -m experiments.shallow_settle --config=tpu_configs/shallow_settle.py:boundary --workdir=DIR
  python -m experiments.shallow_settle --config=tpu_configs/shallow_settle.py:sparsify --workdir=DIR
  python -m experiments.shallow_settle --config=tpu_configs/shallow_settle.py:init_error --workdir=DIR
  python -m experiments.shallow_settle --config=tpu_configs/shallow_settle.py:boundary,quick --workdir=DIR

Pre-registered before any of these runs (this file, the binary's defaults and the docs section were
committed first; the sizes are shrunk from the issue's to what 2 shared, heavily loaded CPU cores can
finish in about an hour, and say so):
- Algorithm: LWLC23's SGD, one step size eta = 0.2 for W_Q, W_K, W_V, W_O, batch 8, T =
  ceil(10 / (alpha_* eta)) iterations; the proper initial model (sigma = delta = 0.1 unless swept);
  d = 16, M = 6, m = m_a = m_b = 16, alpha_# = 1/30 unless swept.
- Success of a run: zero test error on its 500 fresh test samples (Theorem 1's target).
- Boundary N* of a row: where the success rate over seeds first reaches LEVEL = 0.5 along its N grid
  (log-linear interpolation between grid points); censored (beyond the grid) when it never does.
- N grid: a coarse pass (N = 4, 16, 64, 256, 1024, 4096, 8 seeds), then each row on its own geometric
  window of ratio 1.2 from N*_coarse / 2 to 2 N*_coarse (9 points) with the study's seeds. A row's top
  (largest N) must reach success 1; a row whose top does not is named in the summary.
- Intervals: 95% percentile bootstrap over seeds (1000 resamples, one resample for every cell of a study).
- Boundary study (L = 60, tau = 1, 40 seeds): alpha_# in {0, 2/60, 4/60}, n_* in {9, 12, 18, 24}, the ViT
  and the attention-free network; fit N* = c (alpha_* - alpha_0)^-q by least squares in logs (alpha_0 on
  a grid below min alpha_*). Verdict: q's interval against the paper's 2 (ViT) and 4 (attention-free);
  alpha_0's interval against 0 and 2e alpha_#.
- Init-error study (L = 30, tau = 1, alpha_* = 0.3, 64 seeds): sigma in {0, 1/6, 0.5, 1} at delta = 0 and
  delta in {0.25, 0.49, 1} at sigma = 0. Verdict per value: "grows" when the interval of N*(value) -
  N*(0) lies above 0, "falls" when below, "flat" when it contains 0; inside the theorem's regime
  (sigma <= 1/6 ~ 1/M, delta <= 0.49) and beyond it.
- Sparsification study (tau = 0.5, N = 200, alpha_* = 0.3, 16 seeds): L in {30, 60, 100}, noisy tokens in
  {5, 10, 20}, noisy type any or irrelevant only, noisy bound 1.0 (< sqrt 2, the patterns' separation)
  or 2.0 (beyond it); removing k in {0, n/2, n} tokens (n = the noisy count) by each policy at test time
  (one model per seed; random, irrelevant, noisy, attention) for every L, and at training time (one
  model per policy and k; random, irrelevant, noisy) for L = 60. "Flat random removal" (the paper's
  0.077 -> 0.074) when the interval of loss(k = n) / loss(0) under random removal lies inside
  [2/3, 3/2]; a policy "lowers" / "raises" the test hinge loss when the interval of loss(k = n) - loss(0)
  lies below / above 0, else "no change".

Hardware: one CPU; every study vmaps its seeds. Measured times are in docs/shallow_vit_results.md.
"""

import ml_collections

STUDIES = ("boundary", "sparsify", "init_error")


def get_config(arg=None):
    arg = arg or "boundary"  # the file alone (and its smoke run, `:quick`) is the boundary study
    if arg not in STUDIES:
        raise ValueError(
            f"config argument {arg!r}: choose one of {STUDIES} (optionally with ,quick)"
        )
    c = ml_collections.ConfigDict({"study": arg, "tokens": {}, "model": {}, "sgd": {}})
    if arg == "sparsify":
        c.tokens.tau = 0.5
    return c
