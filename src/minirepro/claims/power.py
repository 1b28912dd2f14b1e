"""Power of a rule at its planned number of units, from a pilot's spread (protocol v3, §2).

A pilot is a run on seeds that are never reported (``minirepro claims --pilot``); its
per-unit data give each rule's spread. :func:`power` simulates the rule itself at the
planned ``n``, with the true effect at the rule's *design point*, and returns the share
of simulated draws that pass the rule's test:

- :class:`~minirepro.claims.rules.Better`: the improvement per unit is drawn normal with
  mean ``min_effect`` and the pilot's standard deviation; the power is the share of draws
  whose interval lies above 0 (the test detects the minimum effect). The rule also asks
  the mean to reach ``min_effect``, so at exactly the minimum effect it says "reproduced"
  about half the time; at 1.5 times the minimum effect a design with power 0.8 says
  "reproduced" in more than 80% of draws (tested in ``tests/unit/test_power.py``).
- :class:`~minirepro.claims.rules.Equivalent`: the difference is drawn with mean 0; the
  power is the share of draws whose ``1 - 2 alpha`` interval lies inside the margin. The
  expected half-width of that interval is reported beside it.
- :class:`~minirepro.claims.rules.NonInferior`: the improvement is drawn with mean 0; the
  share of draws whose interval's lower end lies above ``-margin``.
- :class:`~minirepro.claims.rules.Threshold`: values drawn with their mean
  ``min_effect`` beyond the bound; the share that pass (interval of the mean, or every
  value). Without a declared ``min_effect`` there is no design point: the power is
  ``None``.
- :class:`~minirepro.claims.rules.Correlation`: pairs drawn from a bivariate normal with
  correlation ``min_r``; the share whose bootstrap interval (approximated by Fisher's z)
  lies above 0.
- :class:`~minirepro.claims.rules.AllOf`: each part on its own; the claim's power is its
  weakest part's. :class:`~minirepro.claims.rules.Given`: its rule's.

A rule whose interval is a percentile bootstrap is simulated with the t interval (the
two agree closely for means of a few dozen units; the bootstrap is slower by a factor of
thousands). ``sims`` draws with a fixed seed make the number the same on every run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
MAX_N = 5000  # the largest n searched for "the n it would need"


@dataclass(frozen=True)
class Power:
    """A rule's power at ``n`` units: ``value`` (None when it cannot be computed, ``why``)."""

    value: float | None
    n: int
    design: str = ""
    needed_n: int | None = None
    half_width: float | None = None
    why: str = ""

    @property
    def enough(self) -> bool | None:
        """True at or above :data:`TARGET`, False below, None when unknown."""
        return None if self.value is None else self.value >= TARGET

    def describe(self) -> str:
        """``"power 0.86 at n = 40 (design: improvement 0.02)"`` or why there is none."""
        if self.value is None:
            return f"no power at n = {self.n}: {self.why}"
        s = f"power {self.value:.2f} at n = {self.n}"
        if self.design:
            s += f" ({self.design})"
        if self.half_width is not None:
            s += f"; expected half-width {self.half_width:.3g}"
        if self.value < TARGET:
            s += (f"; about n = {self.needed_n} would give {TARGET}" if self.needed_n
                  else f"; no n up to {MAX_N} gives {TARGET}" if self.why == "" else f"; {self.why}")
        return s

    def as_json(self) -> dict[str, Any]:
        return {"value": self.value, "n": self.n, "design": self.design, "needed_n": self.needed_n,
                "half_width": self.half_width, "why": self.why}


def _arr(x: Any) -> np.ndarray | None:
    if x is None:
        return None
    a = np.atleast_1d(np.asarray(x, dtype=float))
    return a if a.ndim == 1 and np.all(np.isfinite(a)) else None


def _sd(x: np.ndarray | None) -> float | None:
    if x is None or x.size < 2:
        return None
    return float(x.std(ddof=1))


def _t_low(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, lower and upper ends of the two-sided ``level`` t interval, per row."""
    n = draws.shape[1]
    mean = draws.mean(axis=1)
    se = draws.std(axis=1, ddof=1) / math.sqrt(n)
    q = float(_st.t.ppf(0.5 + level / 2, df=n - 1))
    return mean, mean - q * se, mean + q * se


def _normal(mean: float, sd: float, n: int, sims: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return mean + sd * rng.standard_normal((sims, n))


def _pass_share(rule: Rule, sd: float, n: int, sims: int, seed: int) -> float:
    """The share of simulated draws at the rule's design point that pass its test."""
    if n < 2 and not (isinstance(rule, Threshold) and rule.over == "every"):
        return 0.0
    if isinstance(rule, Better):
        d = _normal(rule.min_effect, sd, n, sims, seed)
        _, low, _ = _t_low(d, rule.level)
        return float(np.mean(low > 0))
    if isinstance(rule, Equivalent):
        d = _normal(0.0, sd, n, sims, seed)
        _, low, high = _t_low(d, 1 - 2 * (1 - rule.level))
        return float(np.mean((low > -rule.margin) & (high < rule.margin)))
    if isinstance(rule, NonInferior):
        d = _normal(0.0, sd, n, sims, seed)
        _, low, _ = _t_low(d, 1 - 2 * (1 - rule.level))
        return float(np.mean(low > -rule.margin))
    if isinstance(rule, Threshold):
        sign = -1.0 if rule.direction == "below" else 1.0
        v = _normal(rule.bound + sign * float(rule.min_effect or 0.0), sd, n, sims, seed)
        if rule.over == "every":
            ok = np.all(v < rule.bound, axis=1) if sign < 0 else np.all(v > rule.bound, axis=1)
            return float(np.mean(ok))
        _, low, high = _t_low(v, rule.level)
        return float(np.mean(high < rule.bound) if sign < 0 else np.mean(low > rule.bound))
    if isinstance(rule, Correlation):
        if n < 4:
            return 0.0
        rng = np.random.default_rng(seed)
        r0 = rule.min_r
        z1, z2 = rng.standard_normal((2, sims, n))
        x, y = z1, r0 * z1 + math.sqrt(1 - r0 ** 2) * z2
        xc, yc = x - x.mean(axis=1, keepdims=True), y - y.mean(axis=1, keepdims=True)
        r = (xc * yc).sum(axis=1) / np.sqrt((xc ** 2).sum(axis=1) * (yc ** 2).sum(axis=1))
        z = np.arctanh(np.clip(r, -0.999999, 0.999999))
        q = float(_st.norm.ppf(0.5 + rule.level / 2))
        return float(np.mean(z - q / math.sqrt(n - 3) > 0))
    raise TypeError(f"no power simulation for {type(rule).__name__}")


def _spread(rule: Rule, pilot: Mapping[str, Any]) -> tuple[float | None, str]:
    """The pilot's per-unit standard deviation of what the rule tests, or why there is none."""
    if isinstance(rule, Correlation):
        return 0.0, ""
    if isinstance(rule, (Better, Equivalent, NonInferior)):
        a, b = _arr(pilot.get("method")), _arr(pilot.get("baseline"))
        if a is None or b is None or a.shape != b.shape:
            return None, "the pilot has no per-unit method and baseline values"
        sd = _sd(a - b)
    elif isinstance(rule, Threshold):
        sd = _sd(_arr(pilot.get("values")))
    else:  # pragma: no cover - composite kinds are handled by the caller
        return None, f"no spread for {type(rule).__name__}"
    if sd is None:
        return None, "the pilot has fewer than 2 units"
    return sd, ""


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


def needed_n(rule: Rule, sd: float, sims: int = SIMS, seed: int = 0, target: float = TARGET) -> int | None:
    """The smallest ``n`` at which the rule reaches ``target`` power, or None up to :data:`MAX_N`."""
    lo, hi = 2, 2
    while _pass_share(rule, sd, hi, sims, seed) < target:
        lo, hi = hi, hi * 2
        if hi > MAX_N:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _pass_share(rule, sd, mid, sims, seed) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def power(rule: Rule, pilot: Mapping[str, Any] | None, n: int, sims: int = SIMS, seed: int = 0) -> Power:
    """The rule's power at ``n`` units, from the pilot's data (its ``settle`` keywords).

    ``AllOf``: the weakest part's power (each part with its own pilot data); ``Given``:
    its rule's. Returns ``Power(None, ...)`` with a reason when the pilot has no spread for
    the rule, or a threshold has no declared ``min_effect``.
    """
    if isinstance(rule, Given):
        inner = {k: v for k, v in (pilot or {}).items() if k != "preconditions"}
        return power(rule.rule, inner if pilot is not None else None, n, sims, seed)
    if isinstance(rule, AllOf):
        parts = {name: power(r, (pilot or {}).get(name) if pilot is not None else None, n, sims, seed)
                 for name, r in rule.parts.items()}
        known = {k: p for k, p in parts.items() if p.value is not None}
        if not known:
            why = "; ".join(f"{k}: {p.why}" for k, p in parts.items())
            return Power(None, n, why=why)
        name, weakest = min(known.items(), key=lambda kv: kv[1].value)
        unknown = [k for k in parts if k not in known]
        why = f"parts without a power: {', '.join(unknown)}" if unknown else ""
        return Power(weakest.value, n, f"weakest part '{name}': {weakest.design}", weakest.needed_n,
                     weakest.half_width, why)
    if pilot is None:
        return Power(None, n, why="no pilot record")
    if isinstance(rule, Threshold) and rule.min_effect is None:
        return Power(None, n, why="no minimum effect declared for the bound")
    if isinstance(rule, Better) and pilot.get("interval") is not None:
        return Power(None, n, why="the pilot's interval was computed by the chapter, not per unit")
    sd, why = _spread(rule, pilot)
    if sd is None:
        return Power(None, n, why=why)
    value = _pass_share(rule, sd, n, sims, seed)
    half = None
    if isinstance(rule, (Equivalent, NonInferior)) and n >= 2:
        half = float(_st.t.ppf(1 - (1 - rule.level), df=n - 1)) * sd / math.sqrt(n)
    need = None
    note = ""
    if value < TARGET:
        if isinstance(rule, Threshold) and rule.over == "every":
            note = "a bound on every unit gets harder with more units: use the interval of the mean"
        else:
            need = needed_n(rule, sd, sims, seed)
    return Power(value, n, _design(rule), need, half, note)


def planned_power_lines(rules: Mapping[str, Rule], pilots: Mapping[str, Any], n: Mapping[str, int]) -> str:
    """One line per claim: ``"<id>: power 0.86 at n = 40 (true improvement 0.02)"``."""
    return "\n".join(f"{cid}: {power(rule, pilots.get(cid), n[cid]).describe()}" for cid, rule in rules.items())


__all__ = ["MAX_N", "SIMS", "TARGET", "Power", "needed_n", "planned_power_lines", "power"]
