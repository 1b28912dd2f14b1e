"""Paired comparisons of a method with a baseline over units aligned by seed:
:class:`Better` (superiority with a minimum effect), :class:`Equivalent` (TOST with a margin)
and :class:`NonInferior` (one-sided, with a margin)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from minirepro.core.stats import Interval, as_sample, paired_interval, sig, t_interval, tost

from .base import NOT_REPRODUCED, NOT_TESTABLE, PARTLY, REPRODUCED, Outcome, Rule, fmt_num, fmt_pct


@dataclass(frozen=True)
class Better(Rule):
    """Paired superiority across seeds with a minimum effect.

    ``decide(method=[...], baseline=[...])`` takes per-seed values aligned by seed
    (or ``decide(interval=Interval)`` for a statistic whose interval the chapter
    computed, e.g. a bootstrap of a difference of correlations). The improvement is
    ``method - baseline`` when ``higher_is_better`` else ``baseline - method``.

    Verdicts (protocol v3.1): *reproduced* if the interval of the mean improvement lies
    above 0 and reaches ``min_effect`` (its upper end is at least the minimum effect: a
    real improvement, and one as large as claimed is not excluded); *partly* if the
    interval lies above 0 but below ``min_effect`` (a real effect, shown smaller than
    claimed); *not testable at this scale* with fewer than 2 seeds, or when ``bound``
    (the best value any method could reach, per seed) leaves the baseline less than
    ``min_effect`` of room; *not reproduced* otherwise. The outcome's
    ``details["conclusive"]`` says whether the interval decides: it does unless it holds
    both 0 and ``min_effect`` (then only a powered design makes "not reproduced" a finding;
    :func:`minirepro.claims.pool.decide`).

    With the true improvement at ``min_effect``, "reproduced" is (nearly) the event "the
    interval lies above 0", so the rule's power is the power of its test.
    """

    metric: str
    min_effect: float
    higher_is_better: bool = True
    method_name: str = "the method"
    baseline_name: str = "the baseline"
    level: float = 0.95
    interval: str = "t"
    unit: str = ""

    def __post_init__(self) -> None:
        if not (self.min_effect >= 0 and math.isfinite(self.min_effect)):
            raise ValueError(f"min_effect must be a finite number >= 0, got {self.min_effect}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must be in (0, 1), got {self.level}")
        if self.interval not in ("t", "bootstrap"):
            raise ValueError(f"interval must be 't' or 'bootstrap', got {self.interval!r}")

    def sentence(self) -> str:
        direction = "higher" if self.higher_is_better else "lower"
        u = f" {self.unit}" if self.unit else ""
        how = "Student t" if self.interval == "t" else "percentile bootstrap"
        return (f"Paired over seeds, {self.method_name} must beat {self.baseline_name} on "
                f"{self.metric} ({direction} is better): reproduced if the {fmt_pct(self.level)} "
                f"{how} interval of the mean improvement lies above 0 and reaches "
                f"{fmt_num(self.min_effect)}{u}; partly if the interval lies above 0 but below "
                f"{fmt_num(self.min_effect)}{u}; not testable with fewer than 2 seeds; not "
                f"reproduced otherwise.")

    def design_problem(self, n_seeds: int | None) -> str | None:
        if n_seeds is not None and n_seeds < 2:
            return f"{n_seeds} seed(s): a paired interval needs at least 2, so this rule cannot give 'reproduced'"
        return None

    def decide(self, method: Sequence[float] | None = None, baseline: Sequence[float] | None = None,
               interval: Interval | None = None, bound: Sequence[float] | None = None) -> Outcome:
        if interval is None:
            if method is None or baseline is None:
                raise TypeError("Better.decide needs method= and baseline= (per-seed values) or interval=")
            a, b = as_sample(method, "method"), as_sample(baseline, "baseline")
            gain = a - b if self.higher_is_better else b - a
            iv = paired_interval(gain, np.zeros_like(gain), self.level, self.interval)
        else:
            iv = interval
        u = f" {self.unit}" if self.unit else ""
        text = f"improvement {iv.describe(3, self.unit)}; min effect {fmt_num(self.min_effect)}{u}"
        details = {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "n": iv.n,
                   "level": iv.level, "min_effect": self.min_effect}
        if iv.n < 2 or not math.isfinite(iv.low):
            return Outcome(NOT_TESTABLE, text + "; fewer than 2 seeds", details)
        if bound is not None and baseline is not None:
            best, base = as_sample(bound, "bound"), as_sample(baseline, "baseline")
            room = float(np.mean(best - base if self.higher_is_better else base - best))
            details["room"] = room
            if room < self.min_effect:
                return Outcome(NOT_TESTABLE, text + f"; the baseline is within {fmt_num(room)}{u} of the "
                               "best possible value, less than the minimum effect", details)
        details["conclusive"] = not (iv.low <= 0 and iv.high >= self.min_effect)
        if iv.low > 0 and iv.high >= self.min_effect:
            return Outcome(REPRODUCED, text, details)
        if iv.low > 0:
            return Outcome(PARTLY, text + " (real, but the interval lies below the minimum effect)", details)
        return Outcome(NOT_REPRODUCED, text, details)


class _PairedMargin(Rule):
    """What :class:`Equivalent` and :class:`NonInferior` share: a margin, per-unit samples of
    the method, the baseline and a trivial reference aligned by unit, and the power check
    against the trivial reference (the method must differ from it by more than the margin,
    or "on par" cannot be told from "did nothing")."""

    def _check_fields(self, what: str) -> None:
        if not (self.margin > 0 and math.isfinite(self.margin)):  # type: ignore[attr-defined]
            raise ValueError(f"{what} margin must be a positive finite number, got {self.margin}")  # type: ignore[attr-defined]
        if not 0.5 < self.level < 1:  # type: ignore[attr-defined]
            raise ValueError(f"level must be in (0.5, 1), got {self.level}")  # type: ignore[attr-defined]

    def design_problem(self, n_seeds: int | None) -> str | None:
        if n_seeds is not None and n_seeds < 2:
            return f"{n_seeds} seed(s): a paired interval needs at least 2, so this rule cannot give 'reproduced'"
        return None

    @staticmethod
    def _samples(method: Sequence[float], baseline: Sequence[float],
                 trivial: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a, b, z = as_sample(method, "method"), as_sample(baseline, "baseline"), as_sample(trivial, "trivial")
        if not (a.shape == b.shape == z.shape):
            raise ValueError(f"method, baseline and trivial must be aligned by seed: {a.size}, {b.size}, {z.size}")
        return a, b, z

    def _powered(self, a: np.ndarray, z: np.ndarray) -> tuple[Interval, bool]:
        power = t_interval(a - z, self.level)  # type: ignore[attr-defined]
        return power, bool(power.n >= 2 and power.excludes(0.0) and abs(power.estimate) > self.margin)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Equivalent(_PairedMargin):
    """"On par": TOST with a margin, and a power check against a trivial baseline.

    ``decide(method=[...], baseline=[...], trivial=[...])``: per-seed values aligned by
    seed. ``trivial`` is what "doing nothing" scores (the start point, a constant
    predictor); the power check passes when ``method - trivial`` has an interval
    excluding 0 and a mean beyond the margin.

    Verdicts: *not testable at this scale* if the power check fails or there are
    fewer than 2 seeds; *reproduced* if the ``1 - 2 alpha`` interval of
    ``method - baseline`` lies inside ``(-margin, margin)`` (TOST at ``alpha = 1 - level``);
    *partly* if only the mean difference lies inside the margin (equivalence not
    shown with confidence); *not reproduced* otherwise.
    """

    metric: str
    margin: float
    method_name: str = "the method"
    baseline_name: str = "the baseline"
    trivial_name: str = "the trivial baseline"
    level: float = 0.95
    unit: str = ""

    def __post_init__(self) -> None:
        self._check_fields("equivalence")

    def sentence(self) -> str:
        u = f" {self.unit}" if self.unit else ""
        inner = round(100 * (1 - 2 * (1 - self.level)))
        return (f"{self.method_name} is on par with {self.baseline_name} on {self.metric}: "
                f"reproduced if the {inner}% t interval of the paired difference lies within "
                f"+-{fmt_num(self.margin)}{u} (TOST at {fmt_pct(1 - self.level)}); partly if only the mean "
                f"difference does; not reproduced otherwise; not testable if {self.method_name} "
                f"is not measurably more than {fmt_num(self.margin)}{u} away from {self.trivial_name} "
                f"(no power to tell 'on par' from 'did nothing') or with fewer than 2 seeds.")

    def decide(self, method: Sequence[float], baseline: Sequence[float],
               trivial: Sequence[float]) -> Outcome:
        a, b, z = self._samples(method, baseline, trivial)
        u = f" {self.unit}" if self.unit else ""
        p, ci = tost(a - b, self.margin, self.level)
        power, powered = self._powered(a, z)
        text = (f"difference {ci.describe(3, self.unit)}, margin +-{fmt_num(self.margin)}{u}, TOST p={sig(p, 2)}; "
                f"vs {self.trivial_name}: {fmt_num(power.estimate)}{u}")
        details = {"estimate": ci.estimate, "low": ci.low, "high": ci.high, "n": ci.n, "p_tost": p,
                   "margin": self.margin, "power_estimate": power.estimate, "powered": powered}
        details["conclusive"] = bool((-self.margin < ci.low and ci.high < self.margin)
                                     or ci.low >= self.margin or ci.high <= -self.margin)
        if a.size < 2 or not powered:
            return Outcome(NOT_TESTABLE, text + " (no power: not distinguishable from doing nothing)"
                           if a.size >= 2 else text + "; fewer than 2 seeds", details)
        if -self.margin < ci.low and ci.high < self.margin:
            return Outcome(REPRODUCED, text, details)
        if abs(ci.estimate) < self.margin:
            return Outcome(PARTLY, text + " (mean within the margin, interval not)", details)
        return Outcome(NOT_REPRODUCED, text, details)


@dataclass(frozen=True)
class NonInferior(_PairedMargin):
    """"On par or better": a one-sided test that the method is not worse by more than a margin.

    ``decide(method=[...], baseline=[...], trivial=[...])``: per-seed values aligned by seed.
    The improvement is oriented by ``higher_is_better``. Verdicts: *not testable at this
    scale* with fewer than 2 seeds or when the power check fails (as in
    :class:`Equivalent`: the method must differ from ``trivial`` by more than the margin);
    *reproduced* if the lower end of the ``1 - 2 alpha`` t interval of the improvement lies
    above ``-margin``; *partly* if only the mean does; *not reproduced* otherwise.
    """

    metric: str
    margin: float
    higher_is_better: bool = True
    method_name: str = "the method"
    baseline_name: str = "the baseline"
    trivial_name: str = "the trivial baseline"
    level: float = 0.95
    unit: str = ""

    def __post_init__(self) -> None:
        self._check_fields("non-inferiority")

    def sentence(self) -> str:
        u = f" {self.unit}" if self.unit else ""
        inner = round(100 * (1 - 2 * (1 - self.level)))
        direction = "higher" if self.higher_is_better else "lower"
        return (f"{self.method_name} is on par with or better than {self.baseline_name} on "
                f"{self.metric} ({direction} is better): reproduced if the lower end of the {inner}% t "
                f"interval of the paired improvement lies above -{fmt_num(self.margin)}{u}; partly if only "
                f"the mean does; not reproduced otherwise; not testable if {self.method_name} is not "
                f"measurably more than {fmt_num(self.margin)}{u} away from {self.trivial_name} or with "
                f"fewer than 2 seeds.")

    def decide(self, method: Sequence[float], baseline: Sequence[float],
               trivial: Sequence[float]) -> Outcome:
        a, b, z = self._samples(method, baseline, trivial)
        u = f" {self.unit}" if self.unit else ""
        gain = a - b if self.higher_is_better else b - a
        ci = t_interval(gain, 1 - 2 * (1 - self.level))
        power, powered = self._powered(a, z)
        text = (f"improvement {ci.describe(3, self.unit)}, margin -{fmt_num(self.margin)}{u}; "
                f"vs {self.trivial_name}: {fmt_num(power.estimate)}{u}")
        details = {"estimate": ci.estimate, "low": ci.low, "high": ci.high, "n": ci.n,
                   "margin": self.margin, "power_estimate": power.estimate, "powered": powered}
        details["conclusive"] = bool(ci.low > -self.margin or ci.high <= -self.margin)
        if a.size < 2:
            return Outcome(NOT_TESTABLE, text + "; fewer than 2 seeds", details)
        if not powered:
            return Outcome(NOT_TESTABLE, text + " (no power: not distinguishable from doing nothing)", details)
        if ci.low > -self.margin:
            return Outcome(REPRODUCED, text, details)
        if ci.estimate > -self.margin:
            return Outcome(PARTLY, text + " (mean above the margin, interval not)", details)
        return Outcome(NOT_REPRODUCED, text, details)
