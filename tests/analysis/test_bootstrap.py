"""Percentile bootstrap intervals on cases whose answer is known."""

import itertools

import numpy as np
import pytest

from posattn.analysis import bootstrap, hessian
from posattn.errors import ConfigError


def test_interval_of_two_units_is_the_exact_bootstrap_distribution():
    # the mean of 2 resampled units of {0, 1}: 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4, so its 2.5% and
    # 97.5% percentiles are 0 and 1, and its 30% and 70% percentiles are 0.5
    units = np.array([0.0, 1.0])
    assert bootstrap.interval(units, np.mean) == (0.0, 1.0)
    assert bootstrap.interval(units, np.mean, level=0.4) == (0.5, 0.5)


def test_interval_of_identical_units_is_the_point():
    assert bootstrap.interval(np.full((5, 3), 2.5), np.mean) == (2.5, 2.5)


def test_interval_of_a_mean_matches_its_normal_approximation_and_covers_the_truth():
    # N = 400 draws of N(3, 2^2): the 95% interval of the mean is 3 +- 1.96 * 2 / 20 up to the sample
    rng = np.random.default_rng(1)
    x = rng.normal(3.0, 2.0, 400)
    lo, hi = bootstrap.interval(x, np.mean)
    assert lo < 3.0 < hi
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size)
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.1)
    assert (lo + hi) / 2 == pytest.approx(x.mean(), abs=0.1 * half)


def test_interval_is_fixed_by_its_seed():
    x = np.random.default_rng(0).normal(size=50)
    assert bootstrap.interval(x, np.median, seed=3) == bootstrap.interval(x, np.median, seed=3)
    assert bootstrap.interval(x, np.median, seed=3) != bootstrap.interval(x, np.median, seed=4)


def test_hessian_intervals_resample_whole_minibatches():
    # 3 mini-batches of 2 eigenvalues; the NEP of a resample is the mean of its batches' shares (0, 0.5, 1)
    # over 27 equally likely resamples: P(0) = P(1) = 1/27 > 2.5%, so the 95% interval is [0, 1]; and
    # P(NEP <= 1/6) = 4/27 > 10% > P(0), so the 80% interval is [1/6, 5/6] (by symmetry)
    eigs = np.array([[1.0, 2.0], [-1.0, 4.0], [-2.0, -3.0]])
    shares = sorted(
        np.mean([[0, 0.5, 1][i] for i in pick]) for pick in itertools.product(range(3), repeat=3)
    )
    assert shares[:4] == [0, 1 / 6, 1 / 6, 1 / 6] and shares[-1] == 1
    s = hessian.summaries(eigs, resamples=20000, seed=0)
    assert s["nep"] == 0.5 and s["nep_interval"] == [0.0, 1.0]
    lo, hi = bootstrap.interval(eigs, hessian.nep, resamples=20000, level=0.8)
    assert (lo, hi) == pytest.approx((1 / 6, 5 / 6))
    assert s["ape"] == pytest.approx(7 / 3) and s["batches"] == 3 and s["count"] == 6
    lo, hi = s["ape_interval"]
    assert (
        1.5 <= lo < 7 / 3 < hi <= 4.0
    )  # APE of a resample lies between its batches' extremes (1.5 .. 4)
    # a resample of the third batch alone has no positive eigenvalue: its NaN APE is left out
    assert np.isfinite(lo) and np.isfinite(hi)


def test_sign_and_compare_state_only_separated_intervals():
    est = lambda lo, hi: {"value": (lo + hi) / 2, "lo": lo, "hi": hi}  # noqa: E731
    assert bootstrap.sign(est(0.1, 0.3)) == 1 and bootstrap.sign(est(-0.3, -0.1)) == -1
    assert bootstrap.sign(est(-0.1, 0.3)) == 0 and bootstrap.sign(est(np.nan, np.nan)) == 0
    assert (
        bootstrap.compare(est(2, 3), est(0, 1)) == 1
        and bootstrap.compare(est(0, 1), est(2, 3)) == -1
    )
    assert bootstrap.compare(est(0, 2), est(1, 3)) == 0


def test_an_interval_of_fewer_than_two_units_is_refused_not_a_certain_point():
    # one unit's resamples are all that unit: today (1.0, 1.0), which `sign` reads as a certain +1
    for units in (np.array([1.0]), np.zeros((0, 3)), np.float64(2.0)):
        with pytest.raises(ConfigError, match=r"give at least 2 units"):
            bootstrap.interval(units, np.mean)
    with pytest.raises(ConfigError, match="resamples=0 must be a positive integer"):
        bootstrap.interval(np.arange(4.0), np.mean, resamples=0)


def test_difference_of_means_gives_welchs_interval_by_its_formula_and_a_bootstrap_around_the_difference():
    from scipy import stats

    from posattn.analysis.bootstrap import difference_of_means

    a, b = np.array([81.2, 80.7, 81.9]), np.array([82.3, 81.5, 83.0, 82.6])
    out = difference_of_means(a, b)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))  # Welch-Satterthwaite
    half = stats.t.ppf(0.975, df) * np.sqrt(va + vb)
    d = b.mean() - a.mean()
    np.testing.assert_allclose(out["welch"], (d - half, d + half), rtol=1e-10)
    assert out["value"] == pytest.approx(d)
    lo, hi = out["bootstrap"]
    assert lo < d < hi and hi - lo < 2 * half  # the bootstrap over so few seeds is the narrower one
    with pytest.raises(ConfigError, match="at least 2 values in each"):
        difference_of_means([1.0], b)


def test_mean_interval_gives_students_interval_by_its_formula_and_a_bootstrap_inside_the_range():
    from scipy import stats

    x = np.array([-0.51, -0.43, -0.58])
    out = bootstrap.mean_interval(x, level=0.99)
    half = stats.t.ppf(0.995, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    np.testing.assert_allclose(out["t"], (x.mean() - half, x.mean() + half), rtol=1e-10)
    lo, hi = out["bootstrap"]
    assert x.min() <= lo < x.mean() < hi <= x.max() and out["n"] == 3
    with pytest.raises(ConfigError, match="at least 2 values"):
        bootstrap.mean_interval([1.0])


def test_contrast_of_two_samples_is_the_difference_of_means_and_of_four_a_difference_of_drops():
    from posattn.analysis.bootstrap import contrast, difference_of_means

    a, b = np.array([81.2, 80.7, 81.9]), np.array([82.3, 81.5, 83.0, 82.6])
    two = contrast([a, b], [-1, 1])
    np.testing.assert_allclose(two["welch"], difference_of_means(a, b)["welch"], rtol=1e-10)
    # a CNN's drop minus a ViT's drop, (cu - cp) - (vu - vp): the value by hand, the interval around it
    cu, cp, vu, vp = (
        np.array(v)
        for v in ([92.1, 92.4, 92.0], [85.0, 84.1, 85.6], [88.2, 88.0, 88.5], [87.9, 88.1, 87.6])
    )
    out = contrast([cu, cp, vu, vp], [1, -1, -1, 1])
    assert out["value"] == pytest.approx((cu.mean() - cp.mean()) - (vu.mean() - vp.mean()))
    for lo, hi in (out["welch"], out["bootstrap"]):
        assert 0 < lo < out["value"] < hi
    assert out["n"] == (3, 3, 3, 3)
    with pytest.raises(ConfigError, match="one weight per sample"):
        contrast([a, b], [1])
    with pytest.raises(ConfigError, match="at least 2 values in each"):
        contrast([a, [1.0]], [1, -1])
