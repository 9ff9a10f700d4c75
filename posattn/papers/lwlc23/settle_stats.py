"""The statistics of LWLC23's settling runs (`posattn.papers.lwlc23.settle`): the boundary N* of a
success rate, power fits of N* against alpha_*, and percentile intervals over seed resamples, with their
pre-registered reading (`direction`).

Every interval is a percentile bootstrap over seeds (`posattn.analysis.bootstrap`): the seeds of a
study are resampled with replacement, the same resample for every cell (the cells of one seed share its
key: `bootstrap.resample_indices`), and every N*, fit and difference is recomputed on each resample.
"""

import math

import numpy as np

from posattn.analysis import bootstrap
from posattn.shallow import phase_map
from posattn.shallow.config import TWO_E


def interval(samples, point) -> dict:
    """{"value": point, "lo", "hi"}: the 95% percentile interval of the finite bootstrap samples, and the
    share of samples that were not finite (a boundary beyond the grid, a fit that failed)."""
    s = np.asarray(samples, float)
    ok = np.isfinite(s)
    lo, hi = bootstrap.percentiles(s[ok]) if ok.any() else (math.nan, math.nan)
    return {"value": float(point), "lo": lo, "hi": hi, "censored": float(1 - ok.mean())}


def boundaries(success_RxCxN: np.ndarray, Ns_CxN, level: float) -> np.ndarray:
    """N* of every row c (success rate over seeds crossing `level` along its N grid); NaN (censored) when
    the rate never reaches `level` or already does at the grid's first N (N* at or below it)."""
    rate_CxN = success_RxCxN.mean(0)
    return np.array(
        [
            math.nan if rate[0] >= level else phase_map.boundary(Ns, rate, level)
            for Ns, rate in zip(Ns_CxN, rate_CxN)
        ]
    )


def boot_boundaries(
    success_RxCxN: np.ndarray, Ns_CxN, level: float, resamples: np.ndarray
) -> np.ndarray:
    """(B, C): N* of every row on every seed resample."""
    return np.stack([boundaries(success_RxCxN[idx], Ns_CxN, level) for idx in resamples])


def shifted_power_fit(alpha, n_star, alpha0_min: float = -0.5, grid: int = 400) -> dict:
    """Least squares of log N* = log c - q log(alpha_* - alpha_0) over alpha_0 < min(alpha_*) (a grid
    of `grid` values from alpha0_min, a line fit in logs at each): {"q", "alpha0", "c"}; NaN with
    fewer than 3 finite boundaries."""
    alpha, n_star = np.asarray(alpha, float), np.asarray(n_star, float)
    ok = np.isfinite(n_star)
    if ok.sum() < 3:
        return {"q": math.nan, "alpha0": math.nan, "c": math.nan}
    a, y = alpha[ok], np.log(n_star[ok])
    best = None
    for a0 in np.linspace(alpha0_min, a.min() - 1e-3, grid):
        x = np.log(a - a0)
        slope, icpt = np.polyfit(x, y, 1)
        sse = ((y - icpt - slope * x) ** 2).sum()
        if best is None or sse < best[0]:
            best = (sse, -slope, a0, math.exp(icpt))
    return {"q": float(best[1]), "alpha0": float(best[2]), "c": float(best[3])}


def power_fit(alpha, n_star, alpha0: float = 0.0) -> float:
    """q of log N* = log c - q log(alpha_* - alpha0) with alpha0 fixed (NaN with < 2 usable rows)."""
    alpha, n_star = np.asarray(alpha, float), np.asarray(n_star, float)
    ok = np.isfinite(n_star) & (alpha > alpha0)
    if ok.sum() < 2:
        return math.nan
    return float(-np.polyfit(np.log(alpha[ok] - alpha0), np.log(n_star[ok]), 1)[0])


def boundary_study(
    success_RxCxN, Ns_CxN, alpha_C, level: float, resamples: np.ndarray, alpha_conf: float
) -> dict:
    """One (network, alpha_#) row set: N* of every alpha_* with its interval, the fit
    N* = c (alpha_* - alpha_0)^-q with intervals on q and alpha_0, and the exponent with alpha_0 fixed
    at 0 and at 2e alpha_# (where every alpha_* exceeds it)."""
    point = boundaries(success_RxCxN, Ns_CxN, level)
    boot = boot_boundaries(success_RxCxN, Ns_CxN, level, resamples)
    fit = shifted_power_fit(alpha_C, point)
    fits = [shifted_power_fit(alpha_C, b) for b in boot]
    margin = TWO_E * alpha_conf
    out = {
        "alpha_star": [float(a) for a in alpha_C],
        "N_star": [interval(boot[:, c], point[c]) for c in range(len(point))],
        "q": interval([f["q"] for f in fits], fit["q"]),
        "alpha0": interval([f["alpha0"] for f in fits], fit["alpha0"]),
        "c": fit["c"],
        "q_at_alpha0_0": interval([power_fit(alpha_C, b) for b in boot], power_fit(alpha_C, point)),
        "two_e_alpha_conf": margin,
    }
    if margin > 0 and min(alpha_C) > margin:
        out["q_at_alpha0_2e"] = interval(
            [power_fit(alpha_C, b, margin) for b in boot], power_fit(alpha_C, point, margin)
        )
    return out


def difference(boot_a, boot_b, a, b) -> dict:
    """The interval of a - b from paired bootstrap samples."""
    return interval(np.asarray(boot_a) - np.asarray(boot_b), a - b)


def direction(iv: dict) -> str:
    """Pre-registered reading of an interval of a difference: above 0, below 0, or containing it."""
    if math.isnan(iv["value"]):
        return "not measured (censored)"
    return "grows" if iv["lo"] > 0 else "falls" if iv["hi"] < 0 else "flat (interval contains 0)"
