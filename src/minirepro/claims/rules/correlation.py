"""A correlation over units with a (cluster) bootstrap interval: :class:`Correlation`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minirepro.core.stats import Interval, as_sample

from .base import NOT_REPRODUCED, NOT_TESTABLE, PARTLY, REPRODUCED, Outcome, Rule, fmt_num, fmt_pct


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
                f"reproduced if its {fmt_pct(self.level)} bootstrap interval lies above 0 and reaches "
                f"{fmt_num(self.min_r)}; partly if the interval lies above 0 but below it; "
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
        text = f"{self.method} r {iv.describe(3)}; min r {fmt_num(self.min_r)}"
        if cluster is not None:
            text += f" ({a.size} units in {details['n']} clusters, resampled by cluster)"
        if iv.low > 0 and iv.high >= self.min_r:
            return Outcome(REPRODUCED, text, details)
        if iv.low > 0:
            return Outcome(PARTLY, text + " (real, but the interval lies below the minimum)", details)
        return Outcome(NOT_REPRODUCED, text, details)
