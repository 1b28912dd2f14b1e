"""Operating characteristics of every rule kind at its planned n (protocol v3, §6).

Each test plans n with :func:`minirepro.claims.power.needed_n` (the smallest n with power
0.8 at the rule's design point), then draws fresh data many times and runs the rule's own
``decide`` (not the vectorised simulation): with the true effect at 1.5 times the minimum
effect (inside the margin for equivalence) it must say "reproduced" in at least 80% of
draws; with no effect (on or outside the margin) in at most 5%.
"""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.power import TTestPower

from minirepro.claims.power import TARGET, needed_n, power
from minirepro.claims.rules import (
    REPRODUCED,
    AllOf,
    Better,
    Correlation,
    Equivalent,
    Given,
    NonInferior,
    Threshold,
)

DRAWS = 1000
# On the boundary of a one-sided test at alpha = 0.05 the rate of "reproduced" is alpha
# itself; a share of DRAWS draws may exceed it by Monte Carlo error (3 standard errors).
AT_ALPHA = 0.05 + 3 * np.sqrt(0.05 * 0.95 / DRAWS)


def share(decide, draw, draws: int = DRAWS, seed: int = 1) -> float:
    rng = np.random.default_rng(seed)
    return float(np.mean([decide(**draw(rng)).verdict == REPRODUCED for _ in range(draws)]))


def test_better_power_matches_statsmodels_t_test_power():
    """Power of the interval above 0 at the minimum effect = a one-sided t test at alpha/2."""
    rule, sd = Better("x", min_effect=0.03), 0.05
    for n in (5, 12, 30):
        ours = power(rule, {"method": [0.0, sd * np.sqrt(2)], "baseline": [0.0, 0.0]}, n).value
        ref = TTestPower().power(effect_size=0.03 / sd, nobs=n, alpha=0.025, alternative="larger")
        assert ours == pytest.approx(ref, abs=0.02), (n, ours, ref)


def test_better_operating_characteristics():
    rule, sd = Better("x", min_effect=0.03), 0.05
    n = needed_n(rule, sd)
    assert n is not None and power(rule, {"method": [0, sd * np.sqrt(2)], "baseline": [0, 0]}, n).value >= TARGET

    def at(effect):
        return lambda rng: {"method": effect + sd * rng.standard_normal(n), "baseline": np.zeros(n)}

    assert share(rule.decide, at(1.5 * rule.min_effect)) >= 0.8
    assert share(rule.decide, at(0.0)) <= 0.05


def test_better_lower_is_better_is_oriented():
    rule, sd = Better("MSE", min_effect=0.02, higher_is_better=False), 0.03
    n = needed_n(rule, sd)
    draw = lambda rng: {"method": 1.0 - 0.03 + sd * rng.standard_normal(n), "baseline": np.ones(n)}  # noqa: E731
    assert share(rule.decide, draw) >= 0.8


def test_equivalent_operating_characteristics():
    rule, sd = Equivalent("acc", margin=0.02, trivial_name="start"), 0.03
    n = needed_n(rule, sd)
    assert n is not None

    def at(diff):
        return lambda rng: {"method": 0.5 + diff + sd * rng.standard_normal(n), "baseline": np.full(n, 0.5),
                            "trivial": np.full(n, 0.2)}

    assert share(rule.decide, at(0.0)) >= 0.8
    assert share(rule.decide, at(rule.margin)) <= AT_ALPHA
    assert share(rule.decide, at(-1.2 * rule.margin)) <= 0.05


def test_equivalent_reports_half_width_against_margin():
    """CAffNet's case: five units whose difference spreads so the interval is wider than the margin."""
    rule = Equivalent("gap", margin=0.01)
    pilot = {"method": [0.0, 0.02, -0.01, 0.015, -0.005], "baseline": [0.0] * 5, "trivial": [1.0] * 5}
    p = power(rule, pilot, 5)
    assert p.half_width > rule.margin and p.value < 0.2 and p.needed_n > 5


def test_noninferior_operating_characteristics():
    rule, sd = NonInferior("reward", margin=0.05), 0.1
    n = needed_n(rule, sd)

    def at(diff):
        return lambda rng: {"method": 1.0 + diff + sd * rng.standard_normal(n), "baseline": np.ones(n),
                            "trivial": np.zeros(n)}

    assert share(rule.decide, at(0.0)) >= 0.8
    assert share(rule.decide, at(-rule.margin)) <= AT_ALPHA
    assert share(rule.decide, at(-1.2 * rule.margin)) <= 0.05


@pytest.mark.parametrize("direction", ["below", "above"])
def test_threshold_interval_operating_characteristics(direction):
    rule, sd = Threshold("leak", 0.5, direction=direction, over="interval", min_effect=0.05), 0.08
    n = needed_n(rule, sd)
    sign = -1 if direction == "below" else 1

    def at(dist):
        return lambda rng: {"values": 0.5 + sign * dist + sd * rng.standard_normal(n)}

    assert share(rule.decide, at(1.5 * rule.min_effect)) >= 0.8
    assert share(rule.decide, at(0.0)) <= AT_ALPHA / 2 + 0.01  # two-sided interval: alpha/2 on the bound


def test_threshold_without_min_effect_has_no_power_and_every_says_why():
    assert power(Threshold("x", 1.0, over="interval"), {"values": [0.1, 0.2]}, 10).value is None
    every = Threshold("x", 1.0, over="every", min_effect=0.1)
    p = power(every, {"values": [0.5, 0.9, 0.7]}, 200)
    assert p.value < 0.8 and "every unit" in p.why


def test_correlation_operating_characteristics():
    rule = Correlation("gap", "recall", min_r=0.3, method="pearson")
    n = needed_n(rule, 0.0, sims=2000)
    assert n is not None

    def at(r):
        def draw(rng):
            z1, z2 = rng.standard_normal((2, n))
            return {"x": z1, "y": r * z1 + np.sqrt(1 - r * r) * z2}
        return draw

    assert share(rule.decide, at(0.45), draws=150) >= 0.8
    assert share(rule.decide, at(0.0), draws=150) <= 0.05


def test_allof_power_is_p_every_part_reproduced_and_null_rarely_passes():
    """v3.1: the power of a claim of several parts is P(every part reproduced): for independent
    parts the product of theirs, checked against the rule's own decide on simulated draws."""
    a, b = Better("x", 0.03), Better("y", 0.01)
    rule = AllOf({"a": a, "b": b})
    sd = 0.05
    pilot = {"a": {"method": [0, sd * np.sqrt(2)], "baseline": [0, 0]},
             "b": {"method": [0, sd * np.sqrt(2)], "baseline": [0, 0]}}
    n = 20
    p = power(rule, pilot, n)
    pa, pb = power(a, pilot["a"], n).value, power(b, pilot["b"], n).value
    assert p.value == pytest.approx(pa * pb, abs=0.02) and p.value < min(pa, pb)

    def at_design(rng):
        return {"a": {"method": 0.03 + sd * rng.standard_normal(n), "baseline": np.zeros(n)},
                "b": {"method": 0.01 + sd * rng.standard_normal(n), "baseline": np.zeros(n)}}

    assert share(rule.decide, at_design, draws=2000) == pytest.approx(p.value, abs=0.03)

    def null(rng):
        return {k: {"method": 0.05 * rng.standard_normal(20), "baseline": np.zeros(20)} for k in "ab"}

    assert share(rule.decide, null) <= 0.05


def test_given_is_not_testable_when_the_precondition_fails():
    rule = Given(Better("x", 0.01), {"raw RM above chance": Threshold("accuracy", 0.25, direction="above",
                                                                       over="interval")})
    chance = {"raw RM above chance": {"values": [0.25, 0.26, 0.24, 0.25]}}
    out = rule.decide(preconditions=chance, method=[0.5, 0.6, 0.55], baseline=[0.2, 0.25, 0.22])
    assert out.verdict == "not testable at this scale" and "raw RM above chance" in out.measured
    above = {"raw RM above chance": {"values": [0.6, 0.62, 0.61, 0.65]}}
    assert rule.decide(preconditions=above, method=[0.5, 0.6, 0.55], baseline=[0.2, 0.25, 0.22]).verdict == REPRODUCED
    assert power(rule, {"preconditions": above, "method": [0, 0.1], "baseline": [0, 0]}, 10).value is not None
