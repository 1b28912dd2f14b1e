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

Two more kinds complete protocol v3 (``shared/VERDICT_PROTOCOL.md``):

:class:`Correlation`
    a correlation over units (rows of ``x``, ``y``) with a bootstrap interval that must
    lie above 0, and a minimum correlation.
:class:`Given`
    a rule with preconditions: each precondition (a rule on the baseline or the
    substrate, e.g. "the raw reward model is above chance") must be reproduced, or the
    claim is *not testable at this scale*, naming the skill and its measured level.

Every rule has a :meth:`Rule.spec` (its kind and fields, as JSON) that
:func:`rule_from_spec` turns back into the rule, so that the ledger can decide a
claim again on the units of every replication (:mod:`minirepro.claims.pool`), and a
power at its planned number of units (:mod:`minirepro.claims.power`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
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

    def spec(self) -> dict[str, Any]:
        """The rule as JSON: ``{"kind": <class name>, <field>: <value>, ...}`` (parts nested)."""
        out: dict[str, Any] = {"kind": type(self).__name__}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, Rule):
                v = v.spec()
            elif isinstance(v, Mapping):
                v = {k: (r.spec() if isinstance(r, Rule) else r) for k, r in v.items()}
            out[f.name] = v
        return out

    def n_units(self, **data: Any) -> int:
        """How many units ``data`` holds for this rule (the length of its per-unit arrays)."""
        for key in ("method", "values", "x"):
            if data.get(key) is not None:
                return int(np.atleast_1d(np.asarray(data[key], dtype=float)).size)
        iv = data.get("interval")
        return int(getattr(iv, "n", 0) or 0)

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
                f"{self.metric} ({direction} is better): reproduced if the {_level(self.level)} "
                f"{how} interval of the mean improvement lies above 0 and reaches "
                f"{_num(self.min_effect)}{u}; partly if the interval lies above 0 but below "
                f"{_num(self.min_effect)}{u}; not testable with fewer than 2 seeds; not "
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
        text = f"improvement {iv.describe(3, self.unit)}; min effect {_num(self.min_effect)}{u}"
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
                f"+-{_num(self.margin)}{u} (TOST at {_level(1 - self.level)}); partly if only the mean "
                f"difference does; not reproduced otherwise; not testable if {self.method_name} "
                f"is not measurably more than {_num(self.margin)}{u} away from {self.trivial_name} "
                f"(no power to tell 'on par' from 'did nothing') or with fewer than 2 seeds.")

    def decide(self, method: Sequence[float], baseline: Sequence[float],
               trivial: Sequence[float]) -> Outcome:
        a, b, z = self._samples(method, baseline, trivial)
        u = f" {self.unit}" if self.unit else ""
        p, ci = tost(a - b, self.margin, self.level)
        power, powered = self._powered(a, z)
        text = (f"difference {ci.describe(3, self.unit)}, margin +-{_num(self.margin)}{u}, TOST p={sig(p, 2)}; "
                f"vs {self.trivial_name}: {_num(power.estimate)}{u}")
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
                f"interval of the paired improvement lies above -{_num(self.margin)}{u}; partly if only "
                f"the mean does; not reproduced otherwise; not testable if {self.method_name} is not "
                f"measurably more than {_num(self.margin)}{u} away from {self.trivial_name} or with "
                f"fewer than 2 seeds.")

    def decide(self, method: Sequence[float], baseline: Sequence[float],
               trivial: Sequence[float]) -> Outcome:
        a, b, z = self._samples(method, baseline, trivial)
        u = f" {self.unit}" if self.unit else ""
        gain = a - b if self.higher_is_better else b - a
        ci = t_interval(gain, 1 - 2 * (1 - self.level))
        power, powered = self._powered(a, z)
        text = (f"improvement {ci.describe(3, self.unit)}, margin -{_num(self.margin)}{u}; "
                f"vs {self.trivial_name}: {_num(power.estimate)}{u}")
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


@dataclass(frozen=True)
class Threshold(Rule):
    """A bound on a metric: ``below`` or ``above`` ``bound``.

    ``over="every"``: every per-seed value must satisfy the bound (strictly).
    ``over="interval"``: the ``level`` interval of the mean must lie on the right side: a
    Student t interval (``interval="t"``), or a percentile bootstrap over the units
    (``interval="bootstrap"``), which stays inside the values' range: use it for a share or a
    rate per unit, whose t interval can leave [0, 1].
    ``partly_bound`` (optional, looser than ``bound``) defines *partly*: the same test
    passes against it. Otherwise *not reproduced*.

    ``min_effect`` (optional, >= 0): how far beyond the bound the claim expects the metric,
    stated before the run (from the paper, or a reason written beside it). The rule's
    power (:mod:`minirepro.claims.power`) is computed with the true mean that far beyond
    the bound; without it a paper claim has no declared power.
    """

    metric: str
    bound: float
    direction: str = "below"
    over: str = "every"
    partly_bound: float | None = None
    level: float = 0.95
    unit: str = ""
    min_effect: float | None = None
    interval: str = "t"

    def __post_init__(self) -> None:
        if self.interval not in ("t", "bootstrap"):
            raise ValueError(f"interval must be 't' or 'bootstrap', got {self.interval!r}")
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
        if self.min_effect is not None and not (self.min_effect >= 0 and math.isfinite(self.min_effect)):
            raise ValueError(f"min_effect must be a finite number >= 0, got {self.min_effect}")

    def _interval(self, values: np.ndarray) -> Interval:
        if self.interval == "t":
            return t_interval(values, self.level)
        return paired_interval(values, np.zeros_like(values), self.level, "bootstrap")

    def _passes(self, values: np.ndarray, bound: float) -> bool:
        if self.over == "every":
            return bool(np.all(values < bound) if self.direction == "below" else np.all(values > bound))
        iv = self._interval(values)
        return iv.high < bound if self.direction == "below" else iv.low > bound

    def sentence(self) -> str:
        u = f" {self.unit}" if self.unit else ""
        how = "t" if self.interval == "t" else "percentile-bootstrap"
        where = ("on every seed" if self.over == "every"
                 else f"for the whole {_level(self.level)} {how} interval of its mean over seeds")
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
            text = f"{'max' if self.direction == 'below' else 'min'} over the {v.size} values: {_num(worst)}{u}"
            details = {"worst": worst, "n": int(v.size)}
        else:
            iv = self._interval(v)
            text = f"mean {iv.describe(3, self.unit)}"
            details = {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "n": iv.n}
            if iv.n < 2:
                return Outcome(NOT_TESTABLE, text + "; fewer than 2 seeds", details)
        text += f"; bound {_num(self.bound)}{u}"
        if self.over == "every":
            details["conclusive"] = True  # no interval: the values decide
        else:  # the interval decides unless it holds the bound
            wrong_side = details["low"] >= self.bound if self.direction == "below" else details["high"] <= self.bound
            details["conclusive"] = bool(self._passes(v, self.bound) or wrong_side)
        if self._passes(v, self.bound):
            return Outcome(REPRODUCED, text, details)
        if self.partly_bound is not None and self._passes(v, self.partly_bound):
            details["conclusive"] = True  # the rule's own partial verdict, decided at the looser bound
            return Outcome(PARTLY, text + f" (within the partly bound {_num(self.partly_bound)}{u})", details)
        return Outcome(NOT_REPRODUCED, text, details)


@dataclass(frozen=True)
class AllOf(Rule):
    """A claim of several parts, each with its own rule.

    ``decide(part_a={...}, part_b={...})``: one keyword per part, holding that part's
    data as a dict. Reproduced when every part is reproduced; partly when at least
    ``partly_min`` parts are (``partly_min`` must be a strict majority of the parts,
    or ``None`` for no "partly"); otherwise not reproduced when a part was tested and
    failed (not reproduced or partly), and not testable when no part failed but some
    part could not be tested (a claim cannot be refuted by a part that was not tested).
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
        return (f"Reproduced if all {k} parts are reproduced; {partly}; not testable if no part failed "
                f"but one could not be tested; not reproduced otherwise. {inner}")

    def design_problem(self, n_seeds: int | None) -> str | None:
        probs = [f"{n}: {p}" for n, r in self.parts.items() if (p := r.design_problem(n_seeds))]
        return "; ".join(probs) or None

    def decide(self, **parts: Mapping[str, Any]) -> Outcome:
        unknown, missing = set(parts) - set(self.parts), set(self.parts) - set(parts)
        if unknown or missing:
            raise TypeError(f"AllOf.decide: parts {sorted(self.parts)} expected; "
                            f"unknown {sorted(unknown)}, missing {sorted(missing)}")
        return self.combine({name: rule.decide(**parts[name]) for name, rule in self.parts.items()})

    def combine(self, outs: Mapping[str, Outcome]) -> Outcome:
        """The claim's outcome from its parts' outcomes (see the class docstring)."""
        n_rep = sum(o.verdict == REPRODUCED for o in outs.values())
        failed = any(o.verdict in (PARTLY, NOT_REPRODUCED) for o in outs.values())
        text = "; ".join(f"{name}: {o.verdict} ({o.measured})" for name, o in outs.items())
        details = {name: {"verdict": o.verdict, **o.details} for name, o in outs.items()}
        if n_rep == len(outs):
            return Outcome(REPRODUCED, text, details)
        if self.partly_min is not None and n_rep >= self.partly_min:
            return Outcome(PARTLY, text, details)
        return Outcome(NOT_REPRODUCED if failed else NOT_TESTABLE, text, details)

    def n_units(self, **parts: Any) -> int:
        return min(rule.n_units(**parts[name]) for name, rule in self.parts.items() if name in parts)


@dataclass(frozen=True)
class Correlation(Rule):
    """A correlation over units: ``decide(x=[...], y=[...])``, one pair per unit.

    Reproduced if the ``level`` percentile-bootstrap interval of the correlation lies above
    0 and reaches ``min_r``; partly if the interval lies above 0 but below ``min_r``; not
    testable with fewer than 4 units (or 4 clusters); not reproduced otherwise (protocol
    v3.1, as :class:`Better`). ``method``: ``"pearson"`` or ``"spearman"``.

    ``decide(x=[...], y=[...], cluster=[...])``: with ``cluster`` (one label per unit, e.g.
    the seed a run belongs to) the bootstrap resamples whole clusters (units that share a
    seed are not independent), and the units counted are the clusters.
    """

    x_name: str
    y_name: str
    min_r: float
    method: str = "spearman"
    level: float = 0.95

    def __post_init__(self) -> None:
        if self.method not in ("pearson", "spearman"):
            raise ValueError(f"method must be 'pearson' or 'spearman', got {self.method!r}")
        if not 0 <= self.min_r < 1:
            raise ValueError(f"min_r must be in [0, 1), got {self.min_r}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must be in (0, 1), got {self.level}")

    def sentence(self) -> str:
        return (f"The {self.method} correlation between {self.x_name} and {self.y_name} over units: "
                f"reproduced if its {_level(self.level)} bootstrap interval lies above 0 and reaches "
                f"{_num(self.min_r)}; partly if the interval lies above 0 but below it; "
                "not testable with fewer than 4 units; not reproduced otherwise.")

    def statistic(self, xy: np.ndarray) -> float:
        """The correlation of the two columns of ``xy`` (nan when one is constant)."""
        return float(self._r(xy[None, :, 0], xy[None, :, 1])[0])

    def _r(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Row-wise correlation of ``x`` and ``y`` (shape ``(B, n)``), ranks first for spearman."""
        if self.method == "spearman":
            from scipy.stats import rankdata

            x, y = rankdata(x, axis=1), rankdata(y, axis=1)
        xc, yc = x - x.mean(axis=1, keepdims=True), y - y.mean(axis=1, keepdims=True)
        den = np.sqrt((xc ** 2).sum(axis=1) * (yc ** 2).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, (xc * yc).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)

    def n_units(self, **data: Any) -> int:
        if data.get("cluster") is not None:
            return int(np.unique(np.asarray(data["cluster"])).size)
        return super().n_units(**data)

    def decide(self, x: Sequence[float], y: Sequence[float], n_boot: int = 4000, seed: int = 0,
               cluster: Sequence[Any] | None = None) -> Outcome:
        a, b = as_sample(x, "x"), as_sample(y, "y")
        if a.shape != b.shape:
            raise ValueError(f"x and y must be aligned by unit: {a.size} vs {b.size}")
        rng = np.random.default_rng(seed)
        if cluster is not None:
            labels = np.asarray(cluster)
            if labels.shape != a.shape:
                raise ValueError(f"cluster must give one label per unit: {labels.size} vs {a.size}")
            groups = [np.flatnonzero(labels == g) for g in np.unique(labels)]
            details: dict[str, Any] = {"n": len(groups), "n_rows": int(a.size), "min_r": self.min_r}
            if len(groups) < 4:
                details["estimate"] = self.statistic(np.column_stack([a, b])) if a.size >= 3 else float("nan")
                return Outcome(NOT_TESTABLE, f"{len(groups)} clusters; fewer than 4", details)
            picks = rng.integers(0, len(groups), size=(n_boot, len(groups)))
            if len({g.size for g in groups}) == 1:
                idx = np.stack(groups)[picks].reshape(n_boot, -1)  # whole clusters resampled together
            else:  # unequal clusters: one resample at a time
                boots_u = np.array([self.statistic(np.column_stack([a[j], b[j]])) for j in
                                    (np.concatenate([groups[k] for k in row]) for row in picks)])
                idx = None
        else:
            details = {"n": int(a.size), "min_r": self.min_r}
            if a.size < 4:
                details["estimate"] = self.statistic(np.column_stack([a, b])) if a.size >= 3 else float("nan")
                return Outcome(NOT_TESTABLE, f"{a.size} units; fewer than 4", details)
            idx = rng.integers(0, a.size, size=(n_boot, a.size))
        r = self.statistic(np.column_stack([a, b]))
        boots = self._r(a[idx], b[idx]) if idx is not None else boots_u  # percentile bootstrap
        boots = boots[np.isfinite(boots)]
        if not math.isfinite(r) or boots.size == 0:
            return Outcome(NOT_TESTABLE, "a variable is constant: no correlation", details)
        alpha = (1 - self.level) / 2
        lo, hi = (float(q) for q in np.quantile(boots, [alpha, 1 - alpha]))
        iv = Interval(r, lo, hi, self.level, int(details["n"]), "bootstrap" if cluster is None else "cluster bootstrap")
        details.update(estimate=r, low=lo, high=hi, conclusive=not (lo <= 0 and hi >= self.min_r))
        text = f"{self.method} r {iv.describe(3)}; min r {_num(self.min_r)}"
        if cluster is not None:
            text += f" ({a.size} units in {details['n']} clusters, resampled by cluster)"
        if iv.low > 0 and iv.high >= self.min_r:
            return Outcome(REPRODUCED, text, details)
        if iv.low > 0:
            return Outcome(PARTLY, text + " (real, but the interval lies below the minimum)", details)
        return Outcome(NOT_REPRODUCED, text, details)


@dataclass(frozen=True)
class Given(Rule):
    """A rule with preconditions: what the miniature must be able to show at all.

    ``decide(preconditions={name: data, ...}, **rule_data)``. Each precondition is a rule
    (usually a :class:`Threshold` on the baseline or the substrate: "the raw reward model's
    accuracy is above chance, with its interval"). If any precondition is not reproduced
    the verdict is *not testable at this scale*, naming the precondition and its
    measurement; otherwise the verdict is ``rule``'s.
    """

    rule: Rule
    preconditions: Mapping[str, Rule]

    def __post_init__(self) -> None:
        if not self.preconditions:
            raise ValueError("Given needs at least one precondition")
        if isinstance(self.rule, Given):
            raise ValueError("nest preconditions in one Given, not a Given in a Given")

    def sentence(self) -> str:
        pre = "; ".join(f"[{name}] {r.sentence()}" for name, r in self.preconditions.items())
        return (f"{self.rule.sentence()} Not testable unless every precondition is reproduced: {pre}")

    def design_problem(self, n_seeds: int | None) -> str | None:
        return self.rule.design_problem(n_seeds)

    def check(self, preconditions: Mapping[str, Mapping[str, Any]]) -> tuple[bool, str, dict[str, Any]]:
        """``(met, text, details)`` of the preconditions on their data."""
        unknown, missing = set(preconditions) - set(self.preconditions), set(self.preconditions) - set(preconditions)
        if unknown or missing:
            raise TypeError(f"Given.decide: preconditions {sorted(self.preconditions)} expected; "
                            f"unknown {sorted(unknown)}, missing {sorted(missing)}")
        outs = {name: r.decide(**preconditions[name]) for name, r in self.preconditions.items()}
        unmet = [f"{name} ({o.measured})" for name, o in outs.items() if o.verdict != REPRODUCED]
        details = {name: {"verdict": o.verdict, **o.details} for name, o in outs.items()}
        text = ("precondition not met: " + "; ".join(unmet)) if unmet else \
            "preconditions met: " + "; ".join(f"{n} ({o.measured})" for n, o in outs.items())
        return not unmet, text, details

    def decide(self, preconditions: Mapping[str, Mapping[str, Any]], **data: Any) -> Outcome:
        met, text, pre_details = self.check(preconditions)
        out = self.rule.decide(**data)
        details = {**out.details, "preconditions": pre_details, "preconditions_met": met}
        if not met:
            return Outcome(NOT_TESTABLE, f"{text}; measured: {out.measured}", details)
        return Outcome(out.verdict, f"{out.measured}; {text}", details)

    def n_units(self, **data: Any) -> int:
        return self.rule.n_units(**{k: v for k, v in data.items() if k != "preconditions"})


RULE_KINDS: dict[str, type[Rule]] = {}


def rule_from_spec(spec: Mapping[str, Any]) -> Rule:
    """The rule that :meth:`Rule.spec` wrote (parts and preconditions rebuilt)."""
    if not RULE_KINDS:
        RULE_KINDS.update({c.__name__: c for c in (Better, Equivalent, NonInferior, Threshold, AllOf,
                                                   Correlation, Given)})
    spec = dict(spec)
    kind = spec.pop("kind", None)
    if kind not in RULE_KINDS:
        raise ValueError(f"unknown rule kind {kind!r}; expected one of {', '.join(sorted(RULE_KINDS))}")
    if kind == "AllOf":
        spec["parts"] = {k: rule_from_spec(v) for k, v in spec["parts"].items()}
    if kind == "Given":
        spec["rule"] = rule_from_spec(spec["rule"])
        spec["preconditions"] = {k: rule_from_spec(v) for k, v in spec["preconditions"].items()}
    return RULE_KINDS[kind](**spec)


__all__ = ["NOT_REPRODUCED", "NOT_TESTABLE", "PARTLY", "REPRODUCED", "VERDICTS", "AllOf", "Better",
           "Correlation", "Equivalent", "Given", "NonInferior", "Outcome", "Rule", "Threshold",
           "rule_from_spec"]
