"""Percentile bootstrap intervals for the measurements of `posattn.analysis` (Efron & Tibshirani 1993, ch. 13).

A measurement is a statistic of independent units: the Hessian's mini-batches (PK22 pools the top
eigenvalues of many mini-batches into one density, so a resample of mini-batches is a resample of its
whole density), the test images of the noise, Fourier and variance tools, the landscape's mini-batches.
`interval` draws `resamples` sets of N units with replacement from the N measured ones, evaluates the
statistic on each, and returns the (1 - level) / 2 and (1 + level) / 2 percentiles of those values: the
95% percentile interval by default. The draws come from a numpy generator seeded with `seed`, so an
interval is a pure function of its data, statistic and seed.

`compare` turns two intervals into a verdict under the criterion this project fixes before its runs
(docs/how_vits_work.md, Verdicts): a difference or a sign is stated only where the intervals separate.
"""

from collections.abc import Callable

import numpy as np

from posattn.errors import ConfigError

RESAMPLES = 2000
LEVEL = 0.95
SEED = 0


def interval(
    units,
    statistic: Callable[[np.ndarray], float],
    *,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = SEED,
) -> tuple[float, float]:
    """The percentile interval (lo, hi) of `statistic` over resamples of the rows of `units` (N, ...).

    NaN values of the statistic (a resample with no positive eigenvalue, for APE) are left out of the
    percentiles; an interval of a statistic that is NaN on every resample is (NaN, NaN). ConfigError for
    fewer than 2 units (one unit's resamples are all the same: a zero-width interval that `sign` and
    `compare` would read as certain), a level outside (0, 1) or fewer than 1 resample.
    """
    units = np.asarray(units)
    if not 0 < level < 1:
        raise ConfigError(f"level={level} must be in (0, 1)")
    if isinstance(resamples, bool) or int(resamples) != resamples or resamples < 1:
        raise ConfigError(f"resamples={resamples!r} must be a positive integer")
    n = units.shape[0] if units.ndim else 0
    if n < 2:
        raise ConfigError(
            f"an interval over {n} unit(s) (units of shape {units.shape}): give at least 2 "
            "units (rows), e.g. 2 Hessian mini-batches, 2 test images, 2 landscape batches"
        )
    values = np.array(
        [statistic(units[p]) for p in resample_indices(n, resamples, seed)], np.float64
    )
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    return percentiles(values, level)


def resample_indices(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n) indices drawn with replacement: each row one bootstrap resample of n units. A study
    whose cells share their units (the seeds of a grid) resamples every cell with the same rows."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def percentiles(values, level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval (lo, hi) of bootstrap values at `level` (no NaN among them)."""
    lo, hi = np.percentile(np.asarray(values, np.float64), [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def estimate(units, statistic: Callable[[np.ndarray], float], **kwargs) -> dict[str, float]:
    """{"value": statistic(units), "lo", "hi"}: the estimate and its `interval`."""
    lo, hi = interval(units, statistic, **kwargs)
    return {"value": float(statistic(np.asarray(units))), "lo": lo, "hi": hi}


def sign(est: dict) -> int:
    """+1 if the interval lies above 0, -1 if below, 0 if it holds 0 (or is NaN): no sign is stated."""
    return agreed_sign((est["lo"], est["hi"]))


def agreed_sign(*intervals) -> int:
    """+1 where every interval (lo, hi) lies wholly above 0, -1 where every one lies wholly below, else 0:
    the sign that, say, a Welch and a bootstrap interval of one difference agree on (a verdict over seeds
    needs both: docs/how_vits_work.md and docs/image_results.md)."""
    if all(lo > 0 for lo, _ in intervals):
        return 1
    if all(hi < 0 for _, hi in intervals):
        return -1
    return 0


def compare(a: dict, b: dict) -> int:
    """+1 if a's interval lies wholly above b's, -1 if wholly below, 0 if they overlap (or either is NaN)."""
    if a["lo"] > b["hi"]:
        return 1
    if a["hi"] < b["lo"]:
        return -1
    return 0


def difference_of_means(
    values_a, values_b, *, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED
) -> dict:
    """mean(b) - mean(a) of two independent samples (e.g. one accuracy per seed of two recipes) with two
    intervals at `level`: Welch's t (unequal variances, Welch-Satterthwaite degrees of freedom) and the
    percentile bootstrap that resamples each sample within itself. {"value", "welch": (lo, hi),
    "bootstrap": (lo, hi), "n": (n_a, n_b)}. ConfigError unless each sample has at least 2 values (one
    value has no spread: no interval can be stated)."""
    from scipy import stats

    a, b = (np.asarray(v, np.float64).ravel() for v in (values_a, values_b))
    if min(a.size, b.size) < 2:
        raise ConfigError(
            f"samples of {a.size} and {b.size} values: an interval over seeds needs at least 2 "
            "values in each"
        )
    welch = stats.ttest_ind(b, a, equal_var=False).confidence_interval(level)
    rng = np.random.default_rng(seed)
    boot = b[rng.integers(0, b.size, (resamples, b.size))].mean(1) - a[
        rng.integers(0, a.size, (resamples, a.size))
    ].mean(1)
    return {
        "value": float(b.mean() - a.mean()),
        "welch": (float(welch.low), float(welch.high)),
        "bootstrap": percentiles(boot, level),
        "n": (int(a.size), int(b.size)),
    }


def contrast(
    samples, weights, *, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED
) -> dict:
    """sum_i w_i mean(samples[i]) of independent samples (e.g. a difference of two drops, each a
    difference of two groups of seeds) with two intervals at `level`: Welch's t with the
    Welch-Satterthwaite degrees of freedom of the contrast (standard error^2 = sum_i w_i^2 s_i^2 / n_i;
    with weights (-1, +1) it is `difference_of_means`'s interval), and the percentile bootstrap that
    resamples each sample within itself. {"value", "welch": (lo, hi), "bootstrap": (lo, hi), "n"}.
    ConfigError unless there is one weight per sample and each sample has at least 2 values."""
    from scipy import stats

    xs = [np.asarray(v, np.float64).ravel() for v in samples]
    w = np.asarray(weights, np.float64).ravel()
    if len(xs) != w.size or not xs:
        raise ConfigError(f"{len(xs)} samples and {w.size} weights: give one weight per sample")
    if min(x.size for x in xs) < 2:
        raise ConfigError(
            f"samples of {[x.size for x in xs]} values: an interval over seeds needs at least 2 "
            "values in each"
        )
    value = float(sum(wi * x.mean() for wi, x in zip(w, xs)))
    terms = np.array([wi**2 * x.var(ddof=1) / x.size for wi, x in zip(w, xs)])
    se = float(np.sqrt(terms.sum()))
    df = terms.sum() ** 2 / sum(t**2 / (x.size - 1) for t, x in zip(terms, xs))
    half = float(stats.t.ppf((1 + level) / 2, df)) * se if se > 0 else 0.0
    rng = np.random.default_rng(seed)
    boot = sum(wi * x[rng.integers(0, x.size, (resamples, x.size))].mean(1) for wi, x in zip(w, xs))
    return {
        "value": value,
        "welch": (value - half, value + half),
        "bootstrap": percentiles(boot, level),
        "n": tuple(int(x.size) for x in xs),
    }


def mean_interval(
    values, *, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED
) -> dict:
    """The mean of one sample (e.g. one number per seed) with two intervals at `level`: Student's t and
    the percentile bootstrap of the mean. {"value", "t": (lo, hi), "bootstrap": (lo, hi), "n"}.
    ConfigError unless the sample has at least 2 values."""
    from scipy import stats

    x = np.asarray(values, np.float64).ravel()
    if x.size < 2:
        raise ConfigError(
            f"a sample of {x.size} values: an interval over seeds needs at least 2 values"
        )
    t = stats.ttest_1samp(x, 0.0).confidence_interval(level)
    boot = x[resample_indices(x.size, resamples, seed)].mean(1)
    return {
        "value": float(x.mean()),
        "t": (float(t.low), float(t.high)),
        "bootstrap": percentiles(boot, level),
        "n": int(x.size),
    }
