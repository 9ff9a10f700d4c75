"""Issue 50, item 2 on I1, part 3 (docs/shallow_vit_results.md, pre-registered): does the attention of
relevant queries concentrate on relevant tokens as LWLC23's Prop. 2 and Figure 4 say (0.54 -> 0.91 by
iteration 50)? The mean over seeds of the attention mass at the start, at iteration 50 and at the end,
each with a 95% percentile bootstrap over the seeds, and the verdict on the end and the rise.

    python -c "from posattn.papers.lwlc23 import concentration as c; print(c.table(c.measure()))"
"""

import numpy as np

from posattn.analysis import bootstrap
from posattn.papers.lwlc23 import published
from posattn.papers.lwlc23.report import ATTENTION_TARGET
from posattn.shallow import dynamics, grid
from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig

# I1 (regime_search.AMENDMENT_3) at alpha_* = 9/30, alpha_# = 0, N = 256 (above its N* of 81).
TOKENS = TokenConfig(d=16, M=6, L=30, alpha_star=9 / 30, alpha_conf=0.0, tau=1.5)
MODEL = ModelConfig(m_a=16, m_b=16, m=16, sigma=2.0, delta=2.0, w_o_std=0.1)
SGD = SGDConfig(batch=8, eta=0.2, t_scale=10.0, n_test=500, success="error", N=256, eval_every=10)
RESAMPLES = 1000  # pre-registered


def _interval(v_R: np.ndarray, resamples: np.ndarray) -> list[float]:
    """[mean, 2.5%, 97.5%] of the mean of `v_R` over its seeds, by `resamples`."""
    boot = v_R[resamples].mean(1)
    return [float(v_R.mean()), *np.percentile(boot, [2.5, 97.5]).tolist()]


def measure(seeds: int = 32, tokens=TOKENS, model=MODEL, sgd=SGD) -> dict:
    """The attention mass over `seeds` runs: intervals at the start, at the evaluation nearest
    iteration 50, at the end, and of the rise (end - start)."""
    _, history = dynamics.seed_histories(
        grid.seed_keys(0, seeds), tokens=tokens, model=model, sgd=sgd
    )
    mass_RxE = np.asarray(history["attention_mass"])
    step_E = np.asarray(history["step"])[0]
    i50 = int(np.abs(step_E - published.ATTENTION_MASS["step"][-1]).argmin())
    resamples = bootstrap.resample_indices(seeds, RESAMPLES, 0)
    return {
        "seeds": seeds,
        "steps": [0, int(step_E[i50]), int(step_E[-1])],
        "start": _interval(mass_RxE[:, 0], resamples),
        "middle": _interval(mass_RxE[:, i50], resamples),
        "end": _interval(mass_RxE[:, -1], resamples),
        "rise": _interval(mass_RxE[:, -1] - mass_RxE[:, 0], resamples),
    }


def verdict(end: list[float], rise: list[float], target: float = ATTENTION_TARGET) -> str:
    """The pre-registered reading: reproduced when the end's interval lies above `target` and the rise's
    above 0; not reproduced when the end's lies wholly below `target` or the rise's at or below 0."""
    if end[1] > target and rise[1] > 0:
        return "reproduced"
    if end[2] < target or rise[2] <= 0:
        return "not reproduced"
    return "undecided"


def table(result: dict) -> str:
    """The markdown rows of docs/shallow_vit_results.md's part 3."""
    paper = published.ATTENTION_MASS["mass"]
    iv = lambda v: f"{v[0]:.2f} [{v[1]:.2f}, {v[2]:.2f}]"
    s = result["steps"]
    return "\n".join(
        [
            f"| | iteration {s[0]} | iteration {s[1]} | end (iteration {s[2]}) | rise | verdict |",
            "|---|---|---|---|---|---|",
            f"| LWLC23 | {paper[0]} | {paper[-1]} | {paper[-1]} | +{paper[-1] - paper[0]:.2f} | |",
            f"| ours, {result['seeds']} seeds [95%] | {iv(result['start'])} | {iv(result['middle'])} | "
            f"{iv(result['end'])} | {iv(result['rise'])} | {verdict(result['end'], result['rise'])} |",
        ]
    )
