"""Power of a rule at its planned number of units, from a pilot's spread (protocol v3.1, §2).

A pilot is a run on units that are never reported (``minirepro claims --pilot``); its
per-unit data give each rule its spread. :func:`power` simulates the rule at the planned
``n`` with the true effect at the rule's *design point* (the minimum effect, or a true
difference of 0 for a margin) and returns **the share of simulated draws in which the
whole rule says "reproduced"** — every part and every check, not only its headline test:

- :class:`~minirepro.claims.rules.Better`: the improvement per unit is drawn normal with
  mean ``min_effect`` and the pilot's standard deviation; "reproduced" is the event that
  the interval lies above 0 and reaches ``min_effect``.
- :class:`~minirepro.claims.rules.Equivalent` / :class:`~minirepro.claims.rules.NonInferior`:
  the difference is drawn with mean 0; "reproduced" needs the ``1 - 2 alpha`` interval
  inside the margin (above ``-margin``) *and* the rule's check against the trivial
  baseline (``method - trivial`` drawn with the pilot's mean and spread, correlated with
  the difference as in the pilot): its interval must exclude 0 and its mean lie beyond
  the margin. The expected half-width of the interval is reported beside it.
- :class:`~minirepro.claims.rules.Threshold`: values drawn with their mean ``min_effect``
  beyond the bound; the share that pass (interval of the mean, or every value). Without
  a declared ``min_effect`` there is no design point: the power is ``None``.
- :class:`~minirepro.claims.rules.Correlation`: pairs drawn from a bivariate normal with
  correlation ``min_r``; "reproduced" when the Fisher-z interval lies above 0 and reaches
  ``min_r``. Units nested in clusters (the pilot's ``cluster``) count through Kish's
  design effect ``1 + (m - 1) rho_x rho_y`` (``m`` units a cluster, ``rho`` the
  intra-cluster correlations the pilot shows).
- :class:`~minirepro.claims.rules.AllOf`: the probability that every part is reproduced,
  the parts taken as independent (the product of theirs).
  :class:`~minirepro.claims.rules.Given`: its rule's, times the probability that each
  precondition passes at the level the pilot measured.

A rule whose interval is a percentile bootstrap is simulated with the t interval (the two
agree closely for means of a few dozen units; the bootstrap is slower by a factor of
thousands). ``sims`` draws with a fixed seed make the number the same on every run.

The *n it would need* (``needed_n``) comes with a 90% range (``needed_range``): the pilot's
standard deviation is itself uncertain (a chi-square interval on ``n_pilot - 1`` degrees of
freedom), and a five-unit pilot leaves the n needed uncertain by a factor of several.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as _st

from minirepro.claims.rules import (
    AllOf,
    Better,
    Correlation,
    Equivalent,
    Given,
    NonInferior,
    Rule,
    Threshold,
)

TARGET = 0.8  # the power a design must reach (protocol v3)
SIMS = 4000
SEARCH_SIMS = 1000  # draws per step of the search for the n needed
MAX_N = 5000  # the largest n searched for "the n it would need"
RANGE = 0.90  # the range shown for the n needed, from the pilot's spread uncertainty


@dataclass(frozen=True)
class Power:
    """A rule's power at ``n`` units: ``value`` = P(the whole rule says "reproduced") at its
    design point (None when it cannot be computed, ``why``)."""

    value: float | None
    n: int
    design: str = ""
    needed_n: int | None = None
    half_width: float | None = None
    why: str = ""
    needed_range: tuple[int | None, int | None] | None = None

    @property
    def enough(self) -> bool | None:
        """True at or above :data:`TARGET`, False below, None when unknown."""
        return None if self.value is None else self.value >= TARGET

    def describe(self) -> str:
        """``"power 0.86 at n = 40 (design: improvement 0.02)"`` or why there is none."""
        if self.value is None:
            return f"no power at n = {self.n}: {self.why}"
        s = f"P(reproduced) {self.value:.2f} at n = {self.n}"
        if self.design:
            s += f" ({self.design})"
        if self.half_width is not None:
            s += f"; expected half-width {self.half_width:.3g}"
        if self.value < TARGET:
            if self.needed_n:
                s += f"; about n = {self.needed_n} would give {TARGET}"
                if self.needed_range:
                    lo, hi = self.needed_range
                    s += (f" ({round(100 * RANGE)}% range {lo if lo else '?'}–"
                          f"{hi if hi else f'> {MAX_N}'} from the pilot's spread)")
            else:
                s += f"; no n up to {MAX_N} gives {TARGET}" if self.why == "" else f"; {self.why}"
        return s

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "n": self.n, "design": self.design, "needed_n": self.needed_n,
                "needed_range": list(self.needed_range) if self.needed_range else None,
                "half_width": self.half_width, "why": self.why, "kind": "P(reproduced) of the whole rule"}


def _arr(x: Any) -> np.ndarray | None:
    if x is None:
        return None
    a = np.atleast_1d(np.asarray(x, dtype=float))
    return a if a.ndim == 1 and np.all(np.isfinite(a)) else None


def _sd(x: np.ndarray | None) -> float | None:
    if x is None or x.size < 2:
        return None
    return float(x.std(ddof=1))


def _t_ends(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, lower and upper ends of the two-sided ``level`` t interval, per row."""
    n = draws.shape[1]
    mean = draws.mean(axis=1)
    se = draws.std(axis=1, ddof=1) / math.sqrt(n)
    q = float(_st.t.ppf(0.5 + level / 2, df=n - 1))
    return mean, mean - q * se, mean + q * se



def _normal(mean: float, sd: float, n: int, sims: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return mean + sd * rng.standard_normal((sims, n))


@dataclass(frozen=True)
class Spread:
    """What a pilot says about a leaf rule's data: the per-unit standard deviation ``sd`` of
    what the rule tests; for a margin rule the trivial check's mean ``triv_mean``, its spread
    ``triv_sd`` and its correlation ``rho`` with the difference; for a correlation the design
    effect ``deff`` of units nested in clusters. ``pilot_n``: the pilot's units."""

    sd: float
    triv_mean: float | None = None
    triv_sd: float | None = None
    rho: float = 0.0
    deff: float = 1.0
    pilot_n: int = 0
    per_cluster: float = 1.0  # units a cluster (a correlation's n counts clusters)


def _trivial_passes(rule: Equivalent | NonInferior, sp: Spread, d: np.ndarray, n: int,
                    rng: np.random.Generator) -> np.ndarray:
    """Per draw, whether the rule's check against the trivial baseline passes."""
    if sp.triv_mean is None or sp.triv_sd is None:
        return np.ones(d.shape[0], dtype=bool)  # no trivial data in the pilot: the check is not simulated
    z = (d - d.mean(axis=1, keepdims=True)) / sp.sd if sp.sd > 0 else np.zeros_like(d)
    e = rng.standard_normal(d.shape)
    t = sp.triv_mean + sp.triv_sd * (sp.rho * z + math.sqrt(max(0.0, 1 - sp.rho ** 2)) * e)
    mean, low, high = _t_ends(t, rule.level)
    return ((low > 0) | (high < 0)) & (np.abs(mean) > rule.margin)


def _pass_share(rule: Rule, spread: float | Spread, n: int, sims: int, seed: int) -> float:
    """P(the leaf ``rule`` says "reproduced") at its design point, ``n`` units, by simulation."""
    sp = spread if isinstance(spread, Spread) else Spread(float(spread))
    sd = sp.sd
    if n < 2 and not (isinstance(rule, Threshold) and rule.over == "every"):
        return 0.0
    if isinstance(rule, Better):
        d = _normal(rule.min_effect, sd, n, sims, seed)
        _, low, high = _t_ends(d, rule.level)
        return float(np.mean((low > 0) & (high >= rule.min_effect)))
    if isinstance(rule, Equivalent):
        d = _normal(0.0, sd, n, sims, seed)
        _, low, high = _t_ends(d, 1 - 2 * (1 - rule.level))
        ok = (low > -rule.margin) & (high < rule.margin)
        return float(np.mean(ok & _trivial_passes(rule, sp, d, n, np.random.default_rng(seed + 1))))
    if isinstance(rule, NonInferior):
        d = _normal(0.0, sd, n, sims, seed)
        _, low, _ = _t_ends(d, 1 - 2 * (1 - rule.level))
        ok = low > -rule.margin
        return float(np.mean(ok & _trivial_passes(rule, sp, d, n, np.random.default_rng(seed + 1))))
    if isinstance(rule, Threshold):
        sign = -1.0 if rule.direction == "below" else 1.0
        v = _normal(rule.bound + sign * float(rule.min_effect or 0.0), sd, n, sims, seed)
        if rule.over == "every":
            ok = np.all(v < rule.bound, axis=1) if sign < 0 else np.all(v > rule.bound, axis=1)
            return float(np.mean(ok))
        _, low, high = _t_ends(v, rule.level)
        return float(np.mean(high < rule.bound) if sign < 0 else np.mean(low > rule.bound))
    if isinstance(rule, Correlation):
        n_eff = n * sp.per_cluster / max(sp.deff, 1.0)  # clusters x units a cluster / design effect
        if n_eff < 4:
            return 0.0
        rng = np.random.default_rng(seed)
        m = int(round(n_eff))
        r0 = rule.min_r
        z1, z2 = rng.standard_normal((2, sims, m))
        x, y = z1, r0 * z1 + math.sqrt(1 - r0 ** 2) * z2
        xc, yc = x - x.mean(axis=1, keepdims=True), y - y.mean(axis=1, keepdims=True)
        r = (xc * yc).sum(axis=1) / np.sqrt((xc ** 2).sum(axis=1) * (yc ** 2).sum(axis=1))
        z = np.arctanh(np.clip(r, -0.999999, 0.999999))
        q = float(_st.norm.ppf(0.5 + rule.level / 2))
        low, high = np.tanh(z - q / math.sqrt(m - 3)), np.tanh(z + q / math.sqrt(m - 3))
        return float(np.mean((low > 0) & (high >= r0)))
    raise TypeError(f"no power simulation for {type(rule).__name__}")


def _icc(values: np.ndarray, labels: np.ndarray) -> float:
    """One-way ANOVA estimate of the intra-cluster correlation, clipped to [0, 1]."""
    groups = [values[labels == g] for g in np.unique(labels)]
    k, n = len(groups), values.size
    if k < 2 or n <= k:
        return 0.0
    m0 = (n - sum(g.size ** 2 for g in groups) / n) / (k - 1)
    grand = values.mean()
    msb = sum(g.size * (g.mean() - grand) ** 2 for g in groups) / (k - 1)
    msw = sum(((g - g.mean()) ** 2).sum() for g in groups) / (n - k)
    den = msb + (m0 - 1) * msw
    return float(np.clip((msb - msw) / den, 0.0, 1.0)) if den > 0 else 0.0


def _spread(rule: Rule, pilot: Mapping[str, Any]) -> tuple[Spread | None, str]:
    """The pilot's :class:`Spread` of what the rule tests, or why there is none."""
    if isinstance(rule, Correlation):
        x, y, cl = _arr(pilot.get("x")), _arr(pilot.get("y")), pilot.get("cluster")
        if cl is None or x is None or y is None:
            return Spread(0.0), ""
        labels = np.asarray(cl)
        m = x.size / max(1, np.unique(labels).size)
        deff = 1.0 + (m - 1.0) * _icc(x, labels) * _icc(y, labels)
        return Spread(0.0, deff=deff, pilot_n=int(np.unique(labels).size), per_cluster=float(m)), ""
    if isinstance(rule, (Better, Equivalent, NonInferior)):
        a, b = _arr(pilot.get("method")), _arr(pilot.get("baseline"))
        if a is None or b is None or a.shape != b.shape:
            return None, "the pilot has no per-unit method and baseline values"
        d = a - b
        sd = _sd(d)
        if sd is None:
            return None, "the pilot has fewer than 2 units"
        if isinstance(rule, (Equivalent, NonInferior)):
            z = _arr(pilot.get("trivial"))
            if z is not None and z.shape == a.shape:
                t = a - z
                t_sd = _sd(t) or 0.0
                rho = float(np.corrcoef(d, t)[0, 1]) if sd > 0 and t_sd > 0 else 0.0
                return Spread(sd, float(t.mean()), t_sd, 0.0 if not math.isfinite(rho) else rho,
                              pilot_n=int(a.size)), ""
        return Spread(sd, pilot_n=int(a.size)), ""
    if isinstance(rule, Threshold):
        v = _arr(pilot.get("values"))
        sd = _sd(v)
        if sd is None:
            return None, "the pilot has fewer than 2 units"
        return Spread(sd, pilot_n=int(v.size)), ""
    return None, f"no spread for {type(rule).__name__}"  # pragma: no cover - composites: the caller


def _design(rule: Rule) -> str:
    if isinstance(rule, Better):
        return f"true improvement {rule.min_effect:.3g}"
    if isinstance(rule, (Equivalent, NonInferior)):
        return f"true difference 0, margin {rule.margin:.3g}"
    if isinstance(rule, Threshold):
        return f"true mean {rule.min_effect:.3g} {rule.direction} the bound {rule.bound:.3g}"
    if isinstance(rule, Correlation):
        return f"true correlation {rule.min_r:.3g}"
    return ""


def _search(share: Callable[[int], float], target: float = TARGET) -> int | None:
    """The smallest ``n >= 2`` with ``share(n) >= target`` (doubling, then bisection), or
    None up to :data:`MAX_N`."""
    lo, hi = 2, 2
    while share(hi) < target:
        lo, hi = hi, hi * 2
        if hi > MAX_N:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if share(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def needed_n(rule: Rule, sd: float | Spread, sims: int = SIMS, seed: int = 0, target: float = TARGET) -> int | None:
    """The smallest ``n`` at which the leaf rule reaches ``target`` P(reproduced), or None up to :data:`MAX_N`."""
    return _search(lambda n: _pass_share(rule, sd, n, sims, seed), target)


# --- the whole rule ---------------------------------------------------------------------------

Leaf = tuple[Rule, "Spread | None", str]  # a leaf rule, its spread, and why it has none


def _share_of(rule: Rule, pilot: Mapping[str, Any] | None, n: int, sims: int, seed: int,
              scale: float = 1.0) -> tuple[float | None, str]:
    """P(the whole ``rule`` says "reproduced") at ``n`` units, or ``(None, why)``; ``scale``
    multiplies every pilot standard deviation (for the range of the n needed)."""
    if isinstance(rule, Given):
        inner = {k: v for k, v in (pilot or {}).items() if k != "preconditions"} if pilot is not None else None
        p, why = _share_of(rule.rule, inner, n, sims, seed, scale)
        pre = (pilot or {}).get("preconditions") if pilot is not None else None
        if p is None or not pre:
            return p, why
        for i, (name, r) in enumerate(rule.preconditions.items()):
            met = _precondition_share(r, pre.get(name), sims, seed + 101 + i)
            if met is not None:
                p *= met
        return p, why
    if isinstance(rule, AllOf):
        total, missing = 1.0, []
        for i, (name, part) in enumerate(rule.parts.items()):
            sub = (pilot or {}).get(name) if pilot is not None else None
            p, why = _share_of(part, sub, n, sims, seed + 7 * i, scale)
            if p is None:
                missing.append(f"{name}: {why}")
            else:
                total *= p
        if missing:
            return None, "parts without a power: " + "; ".join(missing)
        return total, ""
    if pilot is None:
        return None, "no pilot record"
    if isinstance(rule, Threshold) and rule.min_effect is None:
        return None, "no minimum effect declared for the bound"
    if isinstance(rule, Better) and pilot.get("interval") is not None:
        return None, "the pilot's interval was computed by the chapter, not per unit"
    sp, why = _spread(rule, pilot)
    if sp is None:
        return None, why
    if scale != 1.0:
        sp = Spread(sp.sd * scale, sp.triv_mean, None if sp.triv_sd is None else sp.triv_sd * scale,
                    sp.rho, sp.deff, sp.pilot_n, sp.per_cluster)
    return _pass_share(rule, sp, n, sims, seed), ""


def _precondition_share(rule: Rule, data: Mapping[str, Any] | None, sims: int, seed: int) -> float | None:
    """P(a precondition passes) at the level and spread its pilot measured (its own n)."""
    if data is None or not isinstance(rule, Threshold):
        return None
    v = _arr(data.get("values"))
    if v is None or v.size < 2:
        return None
    shifted = Threshold(rule.metric, rule.bound, rule.direction, rule.over, None, rule.level, rule.unit,
                        min_effect=abs(float(v.mean()) - rule.bound), interval=rule.interval)
    on_side = (v.mean() < rule.bound) if rule.direction == "below" else (v.mean() > rule.bound)
    if not on_side:
        return 0.0
    return _pass_share(shifted, Spread(_sd(v) or 0.0), int(v.size), sims, seed)


def _pilot_n(rule: Rule, pilot: Mapping[str, Any] | None) -> int:
    """The smallest pilot n over the rule's leaves (the df of its spread's uncertainty)."""
    if pilot is None:
        return 0
    if isinstance(rule, Given):
        return _pilot_n(rule.rule, {k: v for k, v in pilot.items() if k != "preconditions"})
    if isinstance(rule, AllOf):
        ns = [_pilot_n(p, pilot.get(k)) for k, p in rule.parts.items()]
        ns = [x for x in ns if x]
        return min(ns) if ns else 0
    for key in ("method", "values", "x"):
        a = _arr(pilot.get(key))
        if a is not None:
            return int(a.size)
    return 0


def power(rule: Rule, pilot: Mapping[str, Any] | None, n: int, sims: int = SIMS, seed: int = 0,
          search: bool = True) -> Power:
    """P(the whole rule says "reproduced") at ``n`` units and its design point, from the
    pilot's data (its ``settle`` keywords, per part for :class:`AllOf`).

    Returns ``Power(None, ...)`` with a reason when the pilot has no spread for some part,
    or a threshold has no declared ``min_effect``. Below :data:`TARGET`, ``needed_n`` is the
    n that would reach it and ``needed_range`` its 90% range from the pilot's spread
    (``search=False``: the value alone, for a decision that needs only it).
    """
    value, why = _share_of(rule, pilot, n, sims, seed)
    if value is None:
        return Power(None, n, why=why)
    design = _design(rule)
    if isinstance(rule, Given):
        design = _design(rule.rule) + "; preconditions at their pilot levels"
        base = rule.rule
    else:
        base = rule
    if isinstance(base, AllOf):
        design = "every part: " + "; ".join(f"{k}: {_design(p)}" for k, p in base.parts.items())
    half = None
    if isinstance(base, (Equivalent, NonInferior)) and n >= 2 and pilot is not None:
        sp, _ = _spread(base, {k: v for k, v in pilot.items() if k != "preconditions"})
        if sp is not None:
            half = float(_st.t.ppf(1 - (1 - base.level), df=n - 1)) * sp.sd / math.sqrt(n)
    need, rng_, note = None, None, ""
    if value < TARGET and search:
        if isinstance(base, Threshold) and base.over == "every":
            note = "a bound on every unit gets harder with more units: use the interval of the mean"
        else:
            def at(scale: float) -> int | None:
                return _search(lambda m: _share_of(rule, pilot, m, SEARCH_SIMS, seed, scale)[0] or 0.0)
            need = at(1.0)
            k = _pilot_n(rule, pilot)
            if k >= 2 and not isinstance(base, Correlation):
                df = k - 1
                lo_scale = math.sqrt(df / _st.chi2.ppf(0.5 + RANGE / 2, df))
                hi_scale = math.sqrt(df / _st.chi2.ppf(0.5 - RANGE / 2, df))
                rng_ = (at(lo_scale), at(hi_scale))
    return Power(value, n, design, need, half, note, rng_)


__all__ = ["MAX_N", "RANGE", "SIMS", "Spread", "TARGET", "Power", "needed_n", "power"]
