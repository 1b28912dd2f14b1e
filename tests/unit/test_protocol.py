"""Verdict protocol v3.1 end to end: a decided interval stays decided, power is P(reproduced)
of the whole rule, fragile is decided under one rule, nested units are resampled by cluster;
and the rules' tests kill mutants of the rules (each mutant below makes the suite fail)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pytest

from minirepro.claims import ledger, pool, rules, tables
from minirepro.claims import power as power_mod
from minirepro.claims.pool import decide, pool_claim
from minirepro.claims.power import TARGET, power
from minirepro.claims.rules import (
    NOT_REPRODUCED,
    NOT_TESTABLE,
    PARTLY,
    REPRODUCED,
    AllOf,
    Better,
    Correlation,
    Equivalent,
    NonInferior,
)

RNG_DRAWS = 1500


def _share(rule, draw, draws: int = RNG_DRAWS, seed: int = 3) -> float:
    rng = np.random.default_rng(seed)
    return float(np.mean([rule.decide(**draw(rng)).verdict == REPRODUCED for _ in range(draws)]))


def _pilot(sd: float, n: int = 40, seed: int = 11) -> dict[str, list[float]]:
    """A pilot whose paired differences have standard deviation exactly ``sd``."""
    z = np.random.default_rng(seed).standard_normal(n)
    z = (z - z.mean()) / z.std(ddof=1)
    return {"method": list(sd * z), "baseline": [0.0] * n}


# --- the checks the mutation tests run (each also a test of its own) -----------------------

def check_better_power_is_p_reproduced() -> None:
    """Power of a Better rule = the share of draws at the minimum effect its own decide reproduces."""
    rule, sd, n = Better("acc", min_effect=0.03), 0.05, 12
    p = power(rule, _pilot(sd), n).value
    sim = _share(rule, lambda rng: {"method": 0.03 + sd * rng.standard_normal(n), "baseline": np.zeros(n)})
    assert p == pytest.approx(sim, abs=0.04), (p, sim)


def check_better_regions() -> None:
    """An interval above 0 that reaches the minimum effect reproduces; one above 0 below it is
    partly; one holding 0 and the minimum effect is inconclusive; below the minimum effect is decided."""
    rule = Better("acc", min_effect=0.02)
    base = np.zeros(5)
    out = rule.decide(method=[0.05, 0.06, 0.04, 0.05, 0.055], baseline=base)
    assert out.verdict == REPRODUCED and out.details["conclusive"]
    out = rule.decide(method=[0.010, 0.011, 0.009, 0.010, 0.012], baseline=base)
    assert out.verdict == PARTLY and out.details["conclusive"]
    out = rule.decide(method=[0.05, -0.05, 0.04, -0.04, 0.0], baseline=base)
    assert out.verdict == NOT_REPRODUCED and out.details["conclusive"] is False
    out = rule.decide(method=[-0.09, -0.08, -0.085, -0.1, -0.07], baseline=base)
    assert out.verdict == NOT_REPRODUCED and out.details["conclusive"]
    # a point estimate at the minimum effect is not enough without an interval above 0
    out = rule.decide(method=[0.2, -0.1, 0.15, -0.12, 0.0], baseline=base)
    assert out.details["estimate"] >= 0.02 and out.verdict == NOT_REPRODUCED


def check_noninferior_is_oriented() -> None:
    rule = NonInferior("MSE", margin=0.01, higher_is_better=False)
    base, triv = np.full(6, 1.0), np.full(6, 2.0)
    worse = base + 0.2 + 0.001 * np.arange(6)  # far worse on a lower-is-better metric
    assert rule.decide(method=worse, baseline=base, trivial=triv).verdict == NOT_REPRODUCED
    better = base - 0.2 + 0.001 * np.arange(6)
    assert rule.decide(method=better, baseline=base, trivial=triv).verdict == REPRODUCED


def check_equivalent_power_uses_the_tost_interval() -> None:
    """Equivalent's power is simulated with the 1 - 2 alpha (90%) interval its decide uses."""
    rule, sd, n = Equivalent("acc", margin=0.02), 0.03, 30
    pilot = {**_pilot(sd, n=40), "trivial": [-1.0] * 40}
    p = power(rule, pilot, n).value

    def at_zero(rng):
        return {"method": sd * rng.standard_normal(n), "baseline": np.zeros(n), "trivial": np.full(n, -1.0)}

    assert p == pytest.approx(_share(rule, at_zero), abs=0.04)


def check_margin_power_includes_the_trivial_check() -> None:
    """When the method sits within the margin of doing nothing, the rule cannot reproduce, and
    its power says so (it used to leave the trivial-baseline check out)."""
    rule, sd, n = NonInferior("acc", margin=0.05), 0.02, 30
    pilot = {**_pilot(sd, n=40), "trivial": list(np.array(_pilot(sd, n=40)["method"]) * 0 + 0.0)}
    assert power(rule, pilot, n).value < 0.1
    far = {**_pilot(sd, n=40), "trivial": [-1.0] * 40}
    assert power(rule, far, n).value > 0.9


def check_gate_keeps_decided_intervals() -> None:
    """A decided interval stays decided whatever the power; an inconclusive one is not testable
    only when underpowered, and not reproduced when powered."""
    rule = Better("acc", min_effect=0.02)
    noisy = _pilot(0.1)  # power at n = 5 near 0
    wrong_way = {"method": [-0.09, -0.12, -0.06, -0.08, -0.085], "baseline": [0.0] * 5}
    out, pw = decide(rule, wrong_way, noisy)
    assert pw.value < TARGET and out.verdict == NOT_REPRODUCED
    big = {"method": [0.38, 0.30, 0.45, 0.41, 0.36], "baseline": [0.0] * 5}
    out, pw = decide(rule, big, noisy)
    assert pw.value < TARGET and out.verdict == REPRODUCED
    unclear = {"method": [0.05, -0.05, 0.04, -0.04, 0.01], "baseline": [0.0] * 5}
    out, pw = decide(rule, unclear, noisy)
    assert out.verdict == NOT_TESTABLE and "underpowered" in out.measured and pw.needed_n > 5
    quiet = _pilot(0.001)  # power at n = 5 near 1
    out, pw = decide(rule, unclear, quiet)
    assert pw.value >= TARGET and out.verdict == NOT_REPRODUCED


def check_allof_power_is_the_whole_rule() -> None:
    a, b = Better("x", 0.03), Better("y", 0.03)
    rule = AllOf({"a": a, "b": b})
    pilot = {"a": _pilot(0.05), "b": _pilot(0.05, seed=12)}
    whole, part = power(rule, pilot, 15).value, power(a, pilot["a"], 15).value
    assert whole == pytest.approx(part * power(b, pilot["b"], 15).value, abs=0.02) and whole < part - 0.05


CHECKS: list[Callable[[], None]] = [
    check_better_regions, check_noninferior_is_oriented, check_gate_keeps_decided_intervals,
    check_allof_power_is_the_whole_rule, check_margin_power_includes_the_trivial_check,
    check_better_power_is_p_reproduced, check_equivalent_power_uses_the_tost_interval,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda f: f.__name__)
def test_check(check):
    check()


# --- mutants of the rules: each must make some check fail ------------------------------------

@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _better_ignores_interval(self, method=None, baseline=None, interval=None, bound=None):
    out = _ORIGINAL_BETTER(self, method, baseline, interval, bound)
    verdict = REPRODUCED if out.details.get("estimate", -1) >= self.min_effect else NOT_REPRODUCED
    return rules.Outcome(verdict, out.measured, out.details)


def _better_ignores_min_effect(self, method=None, baseline=None, interval=None, bound=None):
    out = _ORIGINAL_BETTER(self, method, baseline, interval, bound)
    verdict = REPRODUCED if out.details.get("low", -1) > 0 else NOT_REPRODUCED
    return rules.Outcome(verdict, out.measured, {**out.details, "conclusive": True})


def _noninferior_ignores_direction(self, method, baseline, trivial):
    return _ORIGINAL_NONINF(rules.NonInferior(self.metric, self.margin, True, self.method_name,
                                              self.baseline_name, self.trivial_name, self.level, self.unit),
                            method, baseline, trivial)


def _equivalent_power_at_95(rule, spread, n, sims, seed):
    if isinstance(rule, Equivalent):
        sp = spread if isinstance(spread, power_mod.Spread) else power_mod.Spread(float(spread))
        d = power_mod._normal(0.0, sp.sd, n, sims, seed)
        _, low, high = power_mod._t_ends(d, rule.level)  # the mutant: 95%, not 1 - 2 alpha
        return float(np.mean((low > -rule.margin) & (high < rule.margin)))
    return _ORIGINAL_PASS(rule, spread, n, sims, seed)


def _gate_overrides_decided(rule, data, pilot, gate=True, search=True):
    out, pw = _ORIGINAL_DECIDE(rule, data, pilot, gate, search)
    if gate and pw is not None and pw.value is not None and pw.value < TARGET and out.verdict != NOT_TESTABLE:
        return rules.Outcome(NOT_TESTABLE, out.measured + "; underpowered", out.details), pw
    return out, pw


def _allof_weakest_part(rule, pilot, n, sims, seed, scale=1.0):
    if isinstance(rule, AllOf):
        parts = [_ORIGINAL_SHARE(p, (pilot or {}).get(k), n, sims, seed, scale)[0] for k, p in rule.parts.items()]
        return min(x for x in parts if x is not None), ""
    return _ORIGINAL_SHARE(rule, pilot, n, sims, seed, scale)


def _power_ignores_trivial(rule, sp, d, n, rng):
    return np.ones(d.shape[0], dtype=bool)


_ORIGINAL_BETTER = rules.Better.decide
_ORIGINAL_NONINF = rules.NonInferior.decide
_ORIGINAL_PASS = power_mod._pass_share
_ORIGINAL_DECIDE = pool.decide
_ORIGINAL_SHARE = power_mod._share_of

MUTANTS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "Better ignores its interval": lambda: _patched(rules.Better, "decide", _better_ignores_interval),
    "Better ignores its minimum effect": lambda: _patched(rules.Better, "decide", _better_ignores_min_effect),
    "Equivalent simulated at 95%": lambda: _patched(power_mod, "_pass_share", _equivalent_power_at_95),
    "NonInferior ignores direction": lambda: _patched(rules.NonInferior, "decide", _noninferior_ignores_direction),
    "the gate overrides decided intervals": lambda: _patched(pool, "decide", _gate_overrides_decided),
    "AllOf power is its weakest part": lambda: _patched(power_mod, "_share_of", _allof_weakest_part),
    "margin power leaves out the trivial check": lambda: _patched(power_mod, "_trivial_passes",
                                                                    _power_ignores_trivial),
}


def _run_checks() -> list[str]:
    failed = []
    for check in CHECKS:
        try:
            check()
        except Exception:  # an assertion, or an error the mutant causes
            failed.append(check.__name__)
    return failed


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_mutant_of_the_rules_is_caught(name, monkeypatch):
    # the checks call pool.decide through the module, so patch that name where they look it up
    with MUTANTS[name]():
        if name == "the gate overrides decided intervals":
            monkeypatch.setitem(globals(), "decide", pool.decide)
        failed = _run_checks()
    assert failed, f"mutant {name!r} survived every check"


# --- units nested in clusters ------------------------------------------------------------------

def test_cluster_bootstrap_counts_clusters_and_widens_the_interval():
    """Ten seeds of eight runs each, where runs of a seed share the seed's draw: the cluster
    bootstrap counts ten units, and gives (nearly) the interval of the ten distinct pairs
    resampled alone, far wider than treating the 80 runs as independent."""
    rng = np.random.default_rng(5)
    x10 = rng.standard_normal(10)
    y10 = 0.5 * x10 + rng.standard_normal(10)
    x, y = np.repeat(x10, 8), np.repeat(y10, 8)
    cluster = np.repeat(np.arange(10), 8)
    rule = Correlation("x", "y", min_r=0.2, method="pearson")
    naive = rule.decide(x=x, y=y)
    clustered = rule.decide(x=x, y=y, cluster=cluster)
    alone = rule.decide(x=x10, y=y10, seed=1)
    assert rule.n_units(x=x, y=y, cluster=cluster) == 10 and clustered.details["n"] == 10
    width = lambda o: o.details["high"] - o.details["low"]  # noqa: E731
    assert width(clustered) > 1.5 * width(naive)
    assert width(clustered) == pytest.approx(width(alone), rel=0.15)


def test_correlation_power_counts_the_design_effect():
    rule = Correlation("x", "y", min_r=0.3, method="pearson")
    rng = np.random.default_rng(2)
    seeds = np.repeat(np.arange(20), 10)
    shared = np.repeat(rng.standard_normal(20), 10)
    pilot_nested = {"x": list(shared + 0.1 * rng.standard_normal(200)),
                    "y": list(shared + 0.1 * rng.standard_normal(200)), "cluster": list(seeds)}
    pilot_flat = {"x": list(rng.standard_normal(200)), "y": list(rng.standard_normal(200))}
    flat = power(rule, pilot_flat, 200).value  # 200 independent units
    nested = power(rule, pilot_nested, 20).value  # 20 seeds of 10 near-copies
    assert flat > 0.95 and nested < 0.5


# --- the n needed, with its range ----------------------------------------------------------------

def test_needed_n_comes_with_a_range_that_narrows_with_a_larger_pilot():
    rule = Better("acc", min_effect=0.02)
    small = power(rule, _pilot(0.05, n=5), 5)
    large = power(rule, _pilot(0.05, n=60), 5)
    assert small.needed_n == pytest.approx(large.needed_n, rel=0.15)
    for p in (small, large):
        lo, hi = p.needed_range
        assert lo <= p.needed_n <= hi
    assert small.needed_range[1] / small.needed_range[0] > 2 * large.needed_range[1] / large.needed_range[0] - 1
    assert "90% range" in small.describe()


# --- end to end: a synthetic pilot, a recorded run, replications, the verdict -------------------

def _claim(rule, data: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": "c", "kind": "paper", "spec": rule.spec(), "data": data, "verdict": "x", "measured": "m"}


def test_end_to_end_from_a_synthetic_pilot_to_the_verdict():
    rule = Better("acc", min_effect=0.05)
    rng = np.random.default_rng(8)
    sd = 0.08
    pilot = {"claims": {"c": {"method": list(sd * rng.standard_normal(8)), "baseline": [0.0] * 8}}}

    def run(effect: float, n: int = 5) -> dict[str, list[float]]:
        return {"method": list(effect + sd * rng.standard_normal(n)), "baseline": [0.0] * n}

    def entry(head, reps):
        return {"params": {"seed": 0}, "claims": [_claim(rule, head)]}, {
            "param": "seed", "current": True,
            "runs": [{"value": 1000 * (i + 1), "ok": True, "claims": {"c": {"verdict": "?", "data": d}}}
                     for i, d in enumerate(reps)]}

    # a real effect of twice the minimum over 30 units: reproduced, power planned from the pilot
    e, reps = entry(run(0.1), [run(0.1) for _ in range(5)])
    out = pool_claim(e["claims"][0], e, reps, pilot)
    assert out["n_units"] == 30 and out["verdict"] == REPRODUCED and out["decided"]
    expected = power(rule, pilot["claims"]["c"], 30).value
    assert out["power"]["value"] == pytest.approx(expected) and out["k"] == 5
    assert not out["fragile"]
    # no effect at all: the pooled interval holds 0; powered at 30 units, so not reproduced
    e, reps = entry(run(0.0), [run(0.0) for _ in range(5)])
    out = pool_claim(e["claims"][0], e, reps, pilot)
    if out["power"]["value"] >= TARGET:
        assert out["verdict"] in (NOT_REPRODUCED, PARTLY) or out["decided"]
    # two replications that decide the other way make a decided verdict fragile
    e, reps = entry(run(0.12, 20), [run(0.12, 20), run(0.12, 20), run(0.12, 20), run(-0.3), run(-0.3)])
    out = pool_claim(e["claims"][0], e, reps, pilot)
    again = out["replications"]
    assert out["verdict"] == REPRODUCED and again == {REPRODUCED: 3, NOT_REPRODUCED: 2} and out["fragile"]
    # one contradicting replication is not enough to call it fragile
    e, reps = entry(run(0.12, 20), [run(0.12, 20), run(0.12, 20), run(0.12, 20), run(0.12, 20), run(-0.3)])
    assert not pool_claim(e["claims"][0], e, reps, pilot)["fragile"]


# --- the whole ledger ----------------------------------------------------------------------------

def _leaf_region(spec: Mapping[str, Any], d: Mapping[str, Any]) -> str | None:
    """From the rule's spec and a leaf's interval alone: "in", "out" or None (inconclusive or
    not an interval rule). Independent of the rule code's own ``conclusive`` flag."""
    lo, hi = d.get("low"), d.get("high")
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    kind = spec["kind"]
    if kind in ("Better", "Correlation"):
        m = spec.get("min_effect", spec.get("min_r"))
        return "in" if lo > 0 else ("out" if hi < m else None)
    if kind == "Equivalent":
        m = spec["margin"]
        return "in" if (-m < lo and hi < m) else ("out" if lo >= m or hi <= -m else None)
    if kind == "NonInferior":
        m = spec["margin"]
        return "in" if lo > -m else ("out" if hi <= -m else None)
    if kind == "Threshold" and spec.get("over") == "interval":
        b = spec["bound"]
        if spec["direction"] == "below":
            return "in" if hi < b else ("out" if lo >= b else None)
        return "in" if lo > b else ("out" if hi <= b else None)
    return None


def _leaves(spec: Mapping[str, Any], details: Mapping[str, Any]) -> Iterator[tuple[Mapping, Mapping]]:
    if spec["kind"] == "AllOf":
        for name, part in spec["parts"].items():
            if isinstance(details.get(name), Mapping):
                yield from _leaves(part, details[name])
    elif spec["kind"] == "Given":
        if details.get("preconditions_met") is not False:
            yield from _leaves(spec["rule"], details)
    else:
        yield spec, details


def test_no_paper_claim_is_not_testable_while_its_pooled_interval_decides():
    """Over the whole ledger: a leaf interval that lies in the claim's region or excludes it is
    never turned into "not testable at this scale" (withdrawn records apart)."""
    bad = []
    for e in ledger.load():
        if e.get("withdrawn"):
            continue
        for c in e["claims"]:
            if c.get("kind", "paper") != "paper" or not c.get("spec") or not c.get("pooled"):
                continue
            spec, details = c["spec"], c.get("details") or {}
            for leaf_spec, d in _leaves(spec, details):
                verdict = d.get("verdict", c["verdict"])
                if _leaf_region(leaf_spec, d) is not None and d.get("gated"):
                    bad.append((e["chapter"], c["id"], verdict))
                if (leaf_spec is spec and _leaf_region(leaf_spec, d) is not None
                        and c["verdict"] == NOT_TESTABLE and "underpowered" in str(c.get("measured"))):
                    bad.append((e["chapter"], c["id"], c["verdict"]))
    assert not bad, bad


def test_every_paper_claim_with_power_reports_p_reproduced_of_the_whole_rule():
    for r in tables.rows(kind="paper"):
        p = r["power_detail"]
        if p and p.get("value") is not None:
            assert p["kind"] == "P(reproduced) of the whole rule" and 0 <= p["value"] <= 1, r["id"]


def test_no_paper_claim_that_needs_a_cause_is_unknown():
    unknown = [(r["chapter"], r["id"]) for r in tables.rows(kind="paper") if r["cause"] == "unknown"]
    assert not unknown, unknown
