"""Verdict rules: objects that state a claim's test in words and decide it from the data.

A chapter declares each claim with a rule object *before* the experiment runs
(``results.declare_claim(..., rule=Better(...))``) and settles it with the data
(``claim.settle(method=..., baseline=...)``). The rule writes the sentence shown on
the page and computes the verdict, so each threshold exists in exactly one place.

The kinds:

:class:`Better`
    paired superiority across seeds: the interval of the mean paired improvement
    (Student t or percentile bootstrap) must lie above 0 and the mean improvement
    must reach a stated minimum effect, in the metric's own units.
:class:`Equivalent`
    "on par": two one-sided tests (TOST) with a stated margin, plus a power check:
    the method must differ from a trivial or start-point baseline by more than the
    margin, or the comparison cannot tell "on par" from "did nothing".
:class:`NonInferior`
    "on par or better": one-sided, the interval of the improvement must lie above
    ``-margin``, with the same power check as ``Equivalent``.
:class:`Threshold`
    a bound that must hold on every seed (``over="every"``) or for the interval
    of the mean (``over="interval"``), with an optional looser bound that defines "partly".
:class:`AllOf`
    a claim with several parts: reproduced when every part is; partly when at least
    ``partly_min`` parts are, which must be a majority, never "any one of many".

Every rule gives one of the four verdicts in :data:`VERDICTS` and a ``measured``
text with the interval it used. ``design_problem(n_seeds)`` says, at declaration,
when a rule cannot give "reproduced" in the chapter's setting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minirepro.core.stats import Interval, as_sample, paired_interval, sig, t_interval, tost

VERDICTS: tuple[str, ...] = ("reproduced", "partly", "not reproduced", "not testable at this scale")
REPRODUCED, PARTLY, NOT_REPRODUCED, NOT_TESTABLE = VERDICTS


@dataclass(frozen=True)
class Outcome:
    """What a rule decided: the verdict, the measured text, and the numbers behind it."""

    verdict: str
    measured: str
    details: dict[str, Any] = field(default_factory=dict)


class Rule:
    """Base class: a rule has a sentence, a decision and a design check."""

    def sentence(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def decide(self, **data: Any) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError

    def design_problem(self, n_seeds: int | None) -> str | None:
        """Why this rule cannot reach "reproduced" with ``n_seeds`` seeds, or ``None``."""
        return None

    def __str__(self) -> str:
        return self.sentence()


def _num(x: float) -> str:
    return sig(x, 3)


def _level(level: float) -> str:
    return f"{round(100 * level)}%"


@dataclass(frozen=True)
class Better(Rule):
    """Paired superiority across seeds with a minimum effect.

    ``decide(method=[...], baseline=[...])`` takes per-seed values aligned by seed
    (or ``decide(interval=Interval)`` for a statistic whose interval the chapter
    computed, e.g. a bootstrap of a difference of correlations). The improvement is
    ``method - baseline`` when ``higher_is_better`` else ``baseline - method``.

    Verdicts: *reproduced* if the interval of the mean improvement lies above 0 and
    the mean improvement is at least ``min_effect``; *partly* if the interval lies
    above 0 but the mean is below ``min_effect`` (a real but smaller effect);
    *not testable at this scale* with fewer than 2 seeds, or when ``bound`` (the best
    value any method could reach, per seed) leaves the baseline less than
    ``min_effect`` of room; *not reproduced* otherwise.
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
                f"{self.metric} ({direction} is better): reproduced if the {_level(self.level)} "
                f"{how} interval of the mean improvement lies above 0 and the mean improvement is "
                f"at least {_num(self.min_effect)}{u}; partly if the interval lies above 0 but the "
                f"mean improvement is smaller; not testable with fewer than 2 seeds; not "
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
        text = f"improvement {iv.describe(3)}{u}; min effect {_num(self.min_effect)}{u}"
        details = {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "n": iv.n,
                   "level": iv.level, "min_effect": self.min_effect}
        if iv.n < 2 or not math.isfinite(iv.low):
            return Outcome(NOT_TESTABLE, text + "; fewer than 2 seeds", details)
        if bound is not None and baseline is not None:
            best, base = as_sample(bound, "bound"), as_sample(baseline, "baseline")
            room = float(np.mean(best - base if self.higher_is_better else base - best))
            details["room"] = room
            if room < self.min_effect:
                return Outcome(NOT_TESTABLE, text + f"; the baseline is within {_num(room)}{u} of the "
                               "best possible value, less than the minimum effect", details)
        if iv.low > 0 and iv.estimate >= self.min_effect:
            return Outcome(REPRODUCED, text, details)
        if iv.low > 0:
            return Outcome(PARTLY, text + " (real but below the minimum effect)", details)
        return Outcome(NOT_REPRODUCED, text, details)


@dataclass(frozen=True)
class Equivalent(Rule):
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
        if not (self.margin > 0 and math.isfinite(self.margin)):
            raise ValueError(f"equivalence margin must be a positive finite number, got {self.margin}")
        if not 0.5 < self.level < 1:
            raise ValueError(f"level must be in (0.5, 1), got {self.level}")

    def sentence(self) -> str:
        u = f" {self.unit}" if self.unit else ""
        inner = round(100 * (1 - 2 * (1 - self.level)))
        return (f"{self.method_name} is on par with {self.baseline_name} on {self.metric}: "
                f"reproduced if the {inner}% t interval of the paired difference lies within "
                f"+-{_num(self.margin)}{u} (TOST at {_level(1 - self.level)}); partly if only the mean "
                f"difference does; not reproduced otherwise; not testable if {self.method_name} "
                f"is not measurably more than {_num(self.margin)}{u} away from {self.trivial_name} "
                f"(no power to tell 'on par' from 'did nothing') or with fewer than 2 seeds.")

    def design_problem(self, n_seeds: int | None) -> str | None:
        if n_seeds is not None and n_seeds < 2:
            return f"{n_seeds} seed(s): TOST needs at least 2, so this rule cannot give 'reproduced'"
        return None

    def decide(self, method: Sequence[float], baseline: Sequence[float],
               trivial: Sequence[float]) -> Outcome:
        a, b, z = as_sample(method, "method"), as_sample(baseline, "baseline"), as_sample(trivial, "trivial")
        if not (a.shape == b.shape == z.shape):
            raise ValueError(f"method, baseline and trivial must be aligned by seed: {a.size}, {b.size}, {z.size}")
        u = f" {self.unit}" if self.unit else ""
        p, ci = tost(a - b, self.margin, self.level)
        power = t_interval(a - z, self.level)
        powered = power.n >= 2 and power.excludes(0.0) and abs(power.estimate) > self.margin
        text = (f"difference {ci.describe(3)}{u}, margin +-{_num(self.margin)}{u}, TOST p={sig(p, 2)}; "
                f"vs {self.trivial_name}: {_num(power.estimate)}{u}")
        details = {"estimate": ci.estimate, "low": ci.low, "high": ci.high, "n": ci.n, "p_tost": p,
                   "margin": self.margin, "power_estimate": power.estimate, "powered": powered}
        if a.size < 2 or not powered:
            return Outcome(NOT_TESTABLE, text + " (no power: not distinguishable from doing nothing)"
                           if a.size >= 2 else text + "; fewer than 2 seeds", details)
        if -self.margin < ci.low and ci.high < self.margin:
            return Outcome(REPRODUCED, text, details)
        if abs(ci.estimate) < self.margin:
            return Outcome(PARTLY, text + " (mean within the margin, interval not)", details)
        return Outcome(NOT_REPRODUCED, text, details)


@dataclass(frozen=True)
class NonInferior(Rule):
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
        if not (self.margin > 0 and math.isfinite(self.margin)):
            raise ValueError(f"non-inferiority margin must be a positive finite number, got {self.margin}")
        if not 0.5 < self.level < 1:
            raise ValueError(f"level must be in (0.5, 1), got {self.level}")

    def sentence(self) -> str:
        u = f" {self.unit}" if self.unit else ""
        inner = round(100 * (1 - 2 * (1 - self.level)))
        direction = "higher" if self.higher_is_better else "lower"
        return (f"{self.method_name} is on par with or better than {self.baseline_name} on "
                f"{self.metric} ({direction} is better): reproduced if the lower end of the {inner}% t "
                f"interval of the paired improvement lies above -{_num(self.margin)}{u}; partly if only "
                f"the mean does; not reproduced otherwise; not testable if {self.method_name} is not "
                f"measurably more than {_num(self.margin)}{u} away from {self.trivial_name} or with "
                f"fewer than 2 seeds.")

    def design_problem(self, n_seeds: int | None) -> str | None:
        if n_seeds is not None and n_seeds < 2:
            return f"{n_seeds} seed(s): a paired interval needs at least 2, so this rule cannot give 'reproduced'"
        return None

    def decide(self, method: Sequence[float], baseline: Sequence[float],
               trivial: Sequence[float]) -> Outcome:
        a, b, z = as_sample(method, "method"), as_sample(baseline, "baseline"), as_sample(trivial, "trivial")
        if not (a.shape == b.shape == z.shape):
            raise ValueError(f"method, baseline and trivial must be aligned by seed: {a.size}, {b.size}, {z.size}")
        u = f" {self.unit}" if self.unit else ""
        gain = a - b if self.higher_is_better else b - a
        ci = t_interval(gain, 1 - 2 * (1 - self.level))
        power = t_interval(a - z, self.level)
        powered = power.n >= 2 and power.excludes(0.0) and abs(power.estimate) > self.margin
        text = (f"improvement {ci.describe(3)}{u}, margin -{_num(self.margin)}{u}; "
                f"vs {self.trivial_name}: {_num(power.estimate)}{u}")
        details = {"estimate": ci.estimate, "low": ci.low, "high": ci.high, "n": ci.n,
                   "margin": self.margin, "power_estimate": power.estimate, "powered": powered}
        if a.size < 2:
            return Outcome(NOT_TESTABLE, text + "; fewer than 2 seeds", details)
        if not powered:
            return Outcome(NOT_TESTABLE, text + " (no power: not distinguishable from doing nothing)", details)
        if ci.low > -self.margin:
            return Outcome(REPRODUCED, text, details)
        if ci.estimate > -self.margin:
            return Outcome(PARTLY, text + " (mean above the margin, interval not)", details)
        return Outcome(NOT_REPRODUCED, text, details)


@dataclass(frozen=True)
class Threshold(Rule):
    """A bound on a metric: ``below`` or ``above`` ``bound``.

    ``over="every"``: every per-seed value must satisfy the bound (strictly).
    ``over="interval"``: the ``level`` t interval of the mean must lie on the right side.
    ``partly_bound`` (optional, looser than ``bound``) defines *partly*: the same test
    passes against it. Otherwise *not reproduced*.
    """

    metric: str
    bound: float
    direction: str = "below"
    over: str = "every"
    partly_bound: float | None = None
    level: float = 0.95
    unit: str = ""

    def __post_init__(self) -> None:
        if self.direction not in ("below", "above"):
            raise ValueError(f"direction must be 'below' or 'above', got {self.direction!r}")
        if self.over not in ("every", "interval"):
            raise ValueError(f"over must be 'every' or 'interval', got {self.over!r}")
        if not math.isfinite(self.bound):
            raise ValueError(f"bound must be finite, got {self.bound}")
        if self.partly_bound is not None:
            looser = self.partly_bound > self.bound if self.direction == "below" else self.partly_bound < self.bound
            if not looser:
                raise ValueError(f"partly_bound {self.partly_bound} must be looser than bound {self.bound}")

    def _passes(self, values: np.ndarray, bound: float) -> bool:
        if self.over == "every":
            return bool(np.all(values < bound) if self.direction == "below" else np.all(values > bound))
        iv = t_interval(values, self.level)
        return iv.high < bound if self.direction == "below" else iv.low > bound

    def sentence(self) -> str:
        u = f" {self.unit}" if self.unit else ""
        where = ("on every seed" if self.over == "every"
                 else f"for the whole {_level(self.level)} t interval of its mean over seeds")
        s = f"reproduced if {self.metric} is {self.direction} {_num(self.bound)}{u} {where}"
        if self.partly_bound is not None:
            s += f"; partly if it is {self.direction} {_num(self.partly_bound)}{u} {where}"
        return s + "; not reproduced otherwise."

    def design_problem(self, n_seeds: int | None) -> str | None:
        if self.over == "interval" and n_seeds is not None and n_seeds < 2:
            return f"{n_seeds} seed(s): an interval of the mean needs at least 2"
        return None

    def decide(self, values: Sequence[float] | float) -> Outcome:
        v = as_sample(np.atleast_1d(np.asarray(values, dtype=float)), "values")
        u = f" {self.unit}" if self.unit else ""
        if self.over == "every":
            worst = float(v.max() if self.direction == "below" else v.min())
            text = f"{'max' if self.direction == 'below' else 'min'} over {v.size} seed(s) {_num(worst)}{u}"
            details = {"worst": worst, "n": int(v.size)}
        else:
            iv = t_interval(v, self.level)
            text = f"mean {iv.describe(3)}{u}"
            details = {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "n": iv.n}
            if iv.n < 2:
                return Outcome(NOT_TESTABLE, text + "; fewer than 2 seeds", details)
        text += f"; bound {_num(self.bound)}{u}"
        if self._passes(v, self.bound):
            return Outcome(REPRODUCED, text, details)
        if self.partly_bound is not None and self._passes(v, self.partly_bound):
            return Outcome(PARTLY, text + f" (within the partly bound {_num(self.partly_bound)}{u})", details)
        return Outcome(NOT_REPRODUCED, text, details)


@dataclass(frozen=True)
class AllOf(Rule):
    """A claim of several parts, each with its own rule.

    ``decide(part_a={...}, part_b={...})``: one keyword per part, holding that part's
    data as a dict. Reproduced when every part is reproduced; partly when at least
    ``partly_min`` parts are (``partly_min`` must be a strict majority of the parts,
    or ``None`` for no "partly"); not testable when every part is; not reproduced otherwise.
    """

    parts: Mapping[str, Rule]
    partly_min: int | None = None

    def __post_init__(self) -> None:
        if len(self.parts) < 2:
            raise ValueError("AllOf needs at least two parts; use the part's rule directly")
        k = len(self.parts)
        if self.partly_min is not None and not (k / 2 < self.partly_min < k):
            raise ValueError(f"partly_min must be a strict majority below all ({k // 2 + 1}..{k - 1}) "
                             f"of {k} parts, got {self.partly_min}")

    def sentence(self) -> str:
        inner = " ".join(f"[{name}] {rule.sentence()}" for name, rule in self.parts.items())
        k = len(self.parts)
        partly = (f"partly if at least {self.partly_min} of the {k} parts are reproduced"
                  if self.partly_min else "no partial verdict")
        return f"Reproduced if all {k} parts are reproduced; {partly}; not reproduced otherwise. {inner}"

    def design_problem(self, n_seeds: int | None) -> str | None:
        probs = [f"{n}: {p}" for n, r in self.parts.items() if (p := r.design_problem(n_seeds))]
        return "; ".join(probs) or None

    def decide(self, **parts: Mapping[str, Any]) -> Outcome:
        unknown, missing = set(parts) - set(self.parts), set(self.parts) - set(parts)
        if unknown or missing:
            raise TypeError(f"AllOf.decide: parts {sorted(self.parts)} expected; "
                            f"unknown {sorted(unknown)}, missing {sorted(missing)}")
        outs = {name: rule.decide(**parts[name]) for name, rule in self.parts.items()}
        n_rep = sum(o.verdict == REPRODUCED for o in outs.values())
        text = "; ".join(f"{name}: {o.verdict} ({o.measured})" for name, o in outs.items())
        details = {name: {"verdict": o.verdict, **o.details} for name, o in outs.items()}
        if n_rep == len(outs):
            return Outcome(REPRODUCED, text, details)
        if all(o.verdict == NOT_TESTABLE for o in outs.values()):
            return Outcome(NOT_TESTABLE, text, details)
        if self.partly_min is not None and n_rep >= self.partly_min:
            return Outcome(PARTLY, text, details)
        return Outcome(NOT_REPRODUCED, text, details)


__all__ = ["NOT_REPRODUCED", "NOT_TESTABLE", "PARTLY", "REPRODUCED", "VERDICTS", "AllOf", "Better",
           "Equivalent", "NonInferior", "Outcome", "Rule", "Threshold"]
