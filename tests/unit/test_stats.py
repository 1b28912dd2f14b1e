"""core.stats against scipy, statsmodels-free closed forms and brute force."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sst

from minirepro.core import stats


def test_t_interval_matches_scipy():
    x = np.array([0.3, 0.1, 0.5, 0.2, 0.4])
    iv = stats.t_interval(x, 0.95)
    lo, hi = sst.t.interval(0.95, df=4, loc=x.mean(), scale=sst.sem(x))
    assert iv.low == pytest.approx(lo) and iv.high == pytest.approx(hi) and iv.n == 5


def test_t_interval_three_seeds_is_wider_than_two_se():
    """With 3 seeds the 95% t quantile is 4.30, not 2: mean +- 2 SE is an ~82% interval."""
    x = np.array([1.0, 2.0, 3.0])
    iv = stats.t_interval(x)
    se = x.std(ddof=1) / math.sqrt(3)
    assert (iv.high - iv.estimate) / se == pytest.approx(4.3027, abs=1e-3)
    assert sst.t.cdf(2, df=2) - sst.t.cdf(-2, df=2) == pytest.approx(0.8165, abs=1e-3)


def test_one_value_gives_an_unbounded_interval():
    iv = stats.t_interval([0.7])
    assert iv.low == -math.inf and iv.high == math.inf


def test_bootstrap_interval_covers_the_mean_and_is_seeded():
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 1.0, size=40)
    a = stats.bootstrap_interval(x, seed=3)
    b = stats.bootstrap_interval(x, seed=3)
    assert a == b and a.low < x.mean() < a.high
    ref = sst.bootstrap((x,), np.mean, confidence_level=0.95, method="percentile",
                        random_state=3, n_resamples=4000).confidence_interval
    assert a.low == pytest.approx(ref.low, abs=0.1) and a.high == pytest.approx(ref.high, abs=0.1)


def test_bootstrap_of_a_two_column_statistic():
    rng = np.random.default_rng(0)
    u = rng.normal(size=60)
    xy = np.c_[u, u + 0.5 * rng.normal(size=60)]
    iv = stats.bootstrap_interval(xy, lambda m: np.corrcoef(m[:, 0], m[:, 1])[0, 1])
    assert 0.7 < iv.estimate < 1 and iv.low < iv.estimate < iv.high


def test_tost_against_two_one_sided_scipy_tests():
    rng = np.random.default_rng(2)
    d = rng.normal(0.01, 0.02, size=8)
    p, ci = stats.tost(d, margin=0.05)
    p1 = sst.ttest_1samp(d, -0.05, alternative="greater").pvalue
    p2 = sst.ttest_1samp(d, 0.05, alternative="less").pvalue
    assert p == pytest.approx(max(p1, p2))
    assert ci.level == pytest.approx(0.90)
    assert (p < 0.05) == (-0.05 < ci.low and ci.high < 0.05)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=3, max_size=12),
       st.floats(0.1, 3.0))
def test_tost_decision_equals_interval_inclusion(values, margin):
    d = np.asarray(values)
    if np.ptp(d) < 1e-9:
        return
    p, ci = stats.tost(d, margin)
    assert (p < 0.05) == (-margin < ci.low and ci.high < margin)


def test_seed_summary_matches_groupby_and_t():
    df = pd.DataFrame({"method": ["a"] * 4 + ["b"] * 4, "acc": [0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.6, 0.6]})
    out = stats.seed_summary(df, "method", "acc")
    assert out.loc["a", "acc mean"] == pytest.approx(0.25)
    assert out.loc["a", "acc std"] == pytest.approx(df[df.method == "a"].acc.std())
    assert out.loc["b", "n"] == 4
    iv = stats.t_interval([0.5, 0.5, 0.6, 0.6])
    assert out.loc["b", "acc lo"] == pytest.approx(iv.low)


def test_paired_differences_and_bad_input():
    assert stats.paired_differences([1, 2], [0.5, 0.5]).tolist() == [0.5, 1.5]
    with pytest.raises(ValueError, match="differ in length"):
        stats.paired_differences([1, 2], [1])
    with pytest.raises(ValueError, match="non-finite"):
        stats.t_interval([1.0, float("nan")])
    with pytest.raises(ValueError, match="1-D"):
        stats.t_interval([[1.0, 2.0]])
    with pytest.raises(ValueError, match="level"):
        stats.t_interval([1.0, 2.0], level=1.5)
    with pytest.raises(ValueError, match="margin"):
        stats.tost([0.1, 0.2], margin=0)
    with pytest.raises(ValueError, match="empty"):
        stats.seed_summary(pd.DataFrame({"m": [], "v": []}), "m", "v")


def test_sig_and_checked_never_print_minus_zero():
    assert stats.sig(-0.0001, 1) == "-0.0001"
    assert stats.sig(-0.0) == "0"
    assert str(stats.checked(-0.001, 2)) == "0.0"
    assert stats.checked(0.126, 2) == 0.13


def test_seed_summary_as_a_table_and_per_seed_wide():
    df = pd.DataFrame({"scenario": ["a"] * 4 + ["b"] * 2, "method": ["m", "m", "n", "n", "m", "m"],
                       "seed": [0, 1, 0, 1, 0, 1], "err": [1.0, 3.0, 2.0, 2.0, 5.0, 7.0]})
    flat = stats.seed_summary(df, ["scenario", "method"], "err", index=False)
    assert list(flat.columns[:2]) == ["scenario", "method"]
    row = flat[(flat.scenario == "a") & (flat.method == "m")].iloc[0]
    assert row["err mean"] == 2.0 and row["n"] == 2
    wide = stats.per_seed_wide(df, "err", scenario="a")
    assert list(wide.index) == [0, 1] and wide.loc[1, "m"] == 3.0 and wide.loc[0, "n"] == 2.0
    with pytest.raises(ValueError, match="scenario 'z'"):
        stats.per_seed_wide(df, "err", scenario="z")
