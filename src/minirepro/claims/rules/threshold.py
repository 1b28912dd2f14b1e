"""A bound on a metric, on every unit or for the interval of its mean: :class:`Threshold`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from minirepro.core.stats import Interval, as_sample, paired_interval, t_interval

from .base import NOT_REPRODUCED, NOT_TESTABLE, PARTLY, REPRODUCED, Outcome, Rule, fmt_num, fmt_pct


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
                 else f"for the whole {fmt_pct(self.level)} {how} interval of its mean over seeds")
        s = f"reproduced if {self.metric} is {self.direction} {fmt_num(self.bound)}{u} {where}"
        if self.partly_bound is not None:
            s += f"; partly if it is {self.direction} {fmt_num(self.partly_bound)}{u} {where}"
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
            text = f"{'max' if self.direction == 'below' else 'min'} over the {v.size} values: {fmt_num(worst)}{u}"
            details = {"worst": worst, "n": int(v.size)}
        else:
            iv = self._interval(v)
            text = f"mean {iv.describe(3, self.unit)}"
            details = {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "n": iv.n}
            if iv.n < 2:
                return Outcome(NOT_TESTABLE, text + "; fewer than 2 seeds", details)
        text += f"; bound {fmt_num(self.bound)}{u}"
        if self.over == "every":
            details["conclusive"] = True  # no interval: the values decide
        else:  # the interval decides unless it holds the bound
            wrong_side = details["low"] >= self.bound if self.direction == "below" else details["high"] <= self.bound
            details["conclusive"] = bool(self._passes(v, self.bound) or wrong_side)
        if self._passes(v, self.bound):
            return Outcome(REPRODUCED, text, details)
        if self.partly_bound is not None and self._passes(v, self.partly_bound):
            details["conclusive"] = True  # the rule's own partial verdict, decided at the looser bound
            return Outcome(PARTLY, text + f" (within the partly bound {fmt_num(self.partly_bound)}{u})", details)
        return Outcome(NOT_REPRODUCED, text, details)
