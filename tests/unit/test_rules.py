"""Each rule kind gives each verdict on constructed data, and refuses bad input."""

from __future__ import annotations

import numpy as np
import pytest

from minirepro.claims import results
from minirepro.claims.rules import (
    NOT_REPRODUCED,
    NOT_TESTABLE,
    PARTLY,
    REPRODUCED,
    AllOf,
    Better,
    Equivalent,
    Threshold,
)

B = Better("accuracy", min_effect=0.02, method_name="A", baseline_name="B")


def test_better_each_verdict():
    base = np.array([0.50, 0.52, 0.48, 0.51, 0.49])
    assert B.decide(method=base + 0.05, baseline=base).verdict == REPRODUCED
    assert B.decide(method=base + [0.010, 0.011, 0.009, 0.010, 0.012], baseline=base).verdict == PARTLY
    assert B.decide(method=base + [0.05, -0.05, 0.04, -0.04, 0.0], baseline=base).verdict == NOT_REPRODUCED
    assert B.decide(method=[0.9], baseline=[0.1]).verdict == NOT_TESTABLE


def test_better_lower_is_better_and_bound():
    r = Better("MSE", min_effect=0.01, higher_is_better=False)
    base = np.array([0.20, 0.22, 0.21])
    assert r.decide(method=base - 0.05, baseline=base).verdict == REPRODUCED
    assert r.decide(method=base + 0.05, baseline=base).verdict == NOT_REPRODUCED
    # the baseline already sits at the optimum: no room for the minimum effect
    out = r.decide(method=base, baseline=base, bound=base - 0.001)
    assert out.verdict == NOT_TESTABLE and "best possible" in out.measured


def test_noise_that_passed_the_old_two_se_rule_does_not_pass():
    """Three seeds of pure noise: the old rule "mean gain > 2 SE" says better; the t rule does not."""
    gain = np.array([0.030, 0.009, 0.012])  # mean 0.017, SE 0.0066: 2.6 SE above 0
    se = gain.std(ddof=1) / np.sqrt(3)
    assert gain.mean() > 2 * se  # the old rule would have called it reproduced
    out = Better("score", min_effect=0.01).decide(method=gain, baseline=np.zeros(3))
    assert out.verdict == NOT_REPRODUCED  # the 95% t interval (t=4.30) crosses 0
    assert out.details["low"] < 0


def test_better_bootstrap_and_precomputed_interval():
    from minirepro.core.stats import Interval
    r = Better("tau", min_effect=0.1, interval="bootstrap")
    rng = np.random.default_rng(0)
    base = rng.normal(0, 0.01, 10)
    assert r.decide(method=base + 0.3, baseline=base).verdict == REPRODUCED
    assert r.decide(interval=Interval(0.2, 0.05, 0.35, 0.95, 200, "bootstrap")).verdict == REPRODUCED
    assert r.decide(interval=Interval(0.2, -0.05, 0.35, 0.95, 200, "bootstrap")).verdict == NOT_REPRODUCED


def test_equivalent_each_verdict():
    r = Equivalent("recall", margin=0.02, trivial_name="the start point")
    base = np.array([0.30, 0.31, 0.29, 0.30, 0.32])
    start = base - 0.10
    tight = base + np.array([0.001, -0.002, 0.0, 0.002, -0.001])
    assert r.decide(method=tight, baseline=base, trivial=start).verdict == REPRODUCED
    loose = base + np.array([0.03, -0.03, 0.02, -0.025, 0.01])
    assert r.decide(method=loose, baseline=base, trivial=start).verdict == PARTLY
    assert r.decide(method=base + 0.08, baseline=base, trivial=start).verdict == NOT_REPRODUCED
    # both methods never left the shared start: "on par" says nothing
    out = r.decide(method=tight, baseline=base, trivial=tight - 0.001)
    assert out.verdict == NOT_TESTABLE and "no power" in out.measured


def test_threshold_every_and_interval():
    r = Threshold("max violation", 1e-9, partly_bound=1e-6)
    assert r.decide(values=[1e-14, 2e-15]).verdict == REPRODUCED
    assert r.decide(values=[1e-14, 1e-7]).verdict == PARTLY
    assert r.decide(values=[1e-3, 0]).verdict == NOT_REPRODUCED
    above = Threshold("Jaccard gap", 0.0, direction="above", over="interval")
    assert above.decide(values=[0.1, 0.12, 0.11]).verdict == REPRODUCED
    assert above.decide(values=[0.1, -0.1, 0.05]).verdict == NOT_REPRODUCED
    assert above.decide(values=[0.1]).verdict == NOT_TESTABLE
    with pytest.raises(ValueError, match="looser"):
        Threshold("x", 1.0, partly_bound=0.5)


def test_allof_partly_must_be_a_majority():
    parts = {"a": Threshold("x", 1.0), "b": Threshold("y", 1.0), "c": Threshold("z", 1.0)}
    with pytest.raises(ValueError, match="majority"):
        AllOf(parts, partly_min=1)
    r = AllOf(parts, partly_min=2)
    ok, bad = {"values": [0.5]}, {"values": [2.0]}
    assert r.decide(a=ok, b=ok, c=ok).verdict == REPRODUCED
    assert r.decide(a=ok, b=ok, c=bad).verdict == PARTLY
    assert r.decide(a=ok, b=bad, c=bad).verdict == NOT_REPRODUCED
    with pytest.raises(TypeError, match="missing"):
        r.decide(a=ok, b=ok)


def test_design_problem_is_flagged_at_declaration():
    results.reset()
    c = results.declare_claim("one-seed", "A beats B.", "-", rule=B, n_seeds=1)
    assert c.flag and "cannot give 'reproduced'" in c.flag
    c2 = results.declare_claim("five-seeds", "A beats B.", "-", rule=B, n_seeds=5)
    assert c2.flag is None
    results.reset()


def test_claim_with_rule_refuses_a_hand_verdict_and_records_details(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIREPRO_RESULTS", str(tmp_path / "r.json"))
    results.reset()
    c = results.declare_claim("gain", "A beats B.", "+3 points", rule=B, kind="paper")
    with pytest.raises(TypeError, match="rule object"):
        c.settle("0.05", "reproduced")
    c.settle(method=[0.6, 0.62, 0.61], baseline=[0.5, 0.52, 0.5])
    assert c.verdict == REPRODUCED and "improvement" in c.measured and c.details["n"] == 3
    chk = results.declare_claim("cost", "The layer is cheap.", "-", kind="check",
                                rule=Threshold("seconds per call", 1.0), machine_dependent=True)
    chk.settle(values=[0.1])
    assert "gain: reproduced" in results.verdict_lines() and "cost" not in results.verdict_lines()
    import json
    rec = json.loads((tmp_path / "r.json").read_text())
    assert {c["kind"] for c in rec["claims"]} == {"paper", "check"}
    assert "_rule" not in rec["claims"][0]
    with pytest.raises(ValueError, match="kind"):
        results.declare_claim("x", "s", "-", rule=B, kind="bogus")
    results.reset()


def test_metric_tolerances_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIREPRO_RESULTS", str(tmp_path / "r.json"))
    results.reset()
    results.record_metric("loss", 1.234, rtol=0.05)
    results.record_metric("count", 7)
    assert results.tolerances() == {"loss": {"rtol": 0.05, "atol": 0.0}}
    with pytest.raises(ValueError, match="rtol"):
        results.record_metric("bad", 1.0, rtol=-1)
    results.reset()


def test_declare_seeds_refuses_overlap(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIREPRO_RESULTS", str(tmp_path / "r.json"))
    results.reset()
    results.declare_seeds(range(5), tuning=[100])
    import json
    assert json.loads((tmp_path / "r.json").read_text())["seeds"] == {"reported": [0, 1, 2, 3, 4],
                                                                     "tuning": [100]}
    with pytest.raises(ValueError, match="both tuning and reported"):
        results.declare_seeds([0, 1], tuning=[1])
    with pytest.raises(ValueError, match="at least one"):
        results.declare_seeds([])
    results.reset()


def test_noninferior_each_verdict_and_a_win_is_reproduced():
    from minirepro.claims.rules import NonInferior
    r = NonInferior("MSE", margin=0.02, higher_is_better=False, trivial_name="the RQ start")
    base = np.array([0.30, 0.31, 0.29, 0.30, 0.32])
    start = base + 0.2
    assert r.decide(method=base - 0.05, baseline=base, trivial=start).verdict == REPRODUCED  # a win
    noisy = base + np.array([0.03, -0.04, 0.035, -0.03, 0.02])
    assert r.decide(method=noisy, baseline=base, trivial=start).verdict == PARTLY
    assert r.decide(method=base + 0.1, baseline=base, trivial=start).verdict == NOT_REPRODUCED
    assert r.decide(method=base, baseline=base, trivial=base + 0.001).verdict == NOT_TESTABLE


def test_a_known_flag_is_kept_with_the_rule_s_own():
    results.reset()
    c = results.declare_claim("qp", "A beats B.", "-", rule=B, n_seeds=1, flag="B sits at the optimum")
    assert c.flag.startswith("B sits at the optimum; 1 seed(s)")
    results.reset()


def test_threshold_bootstrap_interval_stays_inside_the_range_of_a_share():
    """A share per unit near 1 (coverage of 5 items per arena): the t interval of its mean leaves
    [0, 1]; the percentile bootstrap stays inside, matches scipy's percentile bootstrap, decides
    by its lower end, says not testable with one unit, and survives its spec."""
    from scipy import stats as st

    from minirepro.claims.rules import rule_from_spec

    shares = np.array([1.0, 1.0, 0.8, 1.0, 1.0])
    t_rule = Threshold("coverage", 0.85, "above", over="interval")
    b_rule = Threshold("coverage", 0.85, "above", over="interval", interval="bootstrap")
    assert t_rule.decide(shares).details["high"] > 1.0
    out = b_rule.decide(shares)
    assert 0.0 <= out.details["low"] <= out.details["high"] <= 1.0
    ref = st.bootstrap((shares,), np.mean, confidence_level=0.95, method="percentile", n_resamples=4000,
                       random_state=0).confidence_interval
    assert out.details["low"] == pytest.approx(ref.low, abs=0.02)
    assert out.verdict == ("reproduced" if out.details["low"] > 0.85 else "not reproduced")
    assert Threshold("coverage", 0.7, "above", over="interval", interval="bootstrap").decide(shares).verdict == "reproduced"
    assert b_rule.decide([0.9]).verdict == "not testable at this scale"
    assert rule_from_spec(b_rule.spec()) == b_rule and "percentile-bootstrap" in b_rule.sentence()
    assert rule_from_spec({k: v for k, v in t_rule.spec().items() if k != "interval"}) == t_rule  # old specs
    with pytest.raises(ValueError, match="interval"):
        Threshold("x", 1.0, interval="wilson")
