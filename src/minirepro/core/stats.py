"""Statistics every chapter shares: seed summaries, paired differences, intervals, TOST.

One place for the arithmetic behind the book's verdicts, so every chapter computes
"mean over seeds with a 95 % interval" the same way and every rule in
:mod:`minirepro.claims.rules` stands on the same tested functions.

Conventions:

- A *sample* is a 1-D array of per-seed values (one number per seed, the seeds being
  the replicates). Paired samples are aligned by seed.
- Intervals are two-sided at ``level`` (0.95 by default). The t interval uses the
  t quantile with ``n - 1`` degrees of freedom, never a normal "2 SE": with 3 seeds
  the 95 % t quantile is 4.30, and "mean +- 2 SE" is only an 82 % interval.
- The bootstrap is the percentile bootstrap with a seeded generator, so an
  interval is the same on every run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st


@dataclass(frozen=True)
class Interval:
    """An estimate with a two-sided interval: ``estimate`` in ``[low, high]`` at ``level``."""

    estimate: float
    low: float
    high: float
    level: float
    n: int
    method: str

    def excludes(self, value: float) -> bool:
        """True when ``value`` lies outside the closed interval."""
        return value < self.low or value > self.high

    def describe(self, digits: int = 3, unit: str = "") -> str:
        """``"0.012 [95% CI 0.004, 0.020], n=5"`` with ``digits`` significant digits."""
        u = f" {unit}" if unit else ""
        return (f"{sig(self.estimate, digits)}{u} [{round(100 * self.level)}% CI "
                f"{sig(self.low, digits)}, {sig(self.high, digits)}], n={self.n}")


def as_sample(x: Sequence[float] | np.ndarray, name: str = "sample", min_n: int = 1) -> np.ndarray:
    """``x`` as a finite 1-D float array of at least ``min_n`` values, or a clear error."""
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one value per seed (1-D), got shape {arr.shape}")
    if arr.size < min_n:
        raise ValueError(f"{name} needs at least {min_n} value(s), got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} holds a non-finite value: {arr.tolist()}")
    return arr


def paired_differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """``a - b`` per seed; the two samples must be aligned by seed and equally long."""
    a_, b_ = as_sample(a, "a"), as_sample(b, "b")
    if a_.shape != b_.shape:
        raise ValueError(f"paired samples differ in length: {a_.size} vs {b_.size}")
    return a_ - b_


def t_interval(x: Sequence[float], level: float = 0.95) -> Interval:
    """Mean of ``x`` with the Student-t interval ``mean +- t_{level, n-1} * s / sqrt(n)``.

    With one value the interval is unbounded (``-inf, inf``): one seed says nothing
    about the spread. With zero spread it collapses to the mean.
    """
    _check_level(level)
    arr = as_sample(x, min_n=1)
    n, mean = arr.size, float(arr.mean())
    if n < 2:
        return Interval(mean, -math.inf, math.inf, level, n, "t")
    se = float(arr.std(ddof=1)) / math.sqrt(n)
    q = float(_st.t.ppf(0.5 + level / 2, df=n - 1))
    return Interval(mean, mean - q * se, mean + q * se, level, n, "t")


def bootstrap_interval(x: Sequence[float] | np.ndarray, statistic: Callable[[np.ndarray], float] = np.mean,
                       level: float = 0.95, n_boot: int = 4000, seed: int = 0) -> Interval:
    """Percentile bootstrap interval of ``statistic`` over resamples of the rows of ``x``.

    ``x`` may be 1-D (one value per replicate) or 2-D (one row per replicate, for a
    statistic of several columns such as a correlation); rows are resampled together.
    """
    _check_level(level)
    arr = np.asarray(x, dtype=float)
    if arr.ndim not in (1, 2) or arr.shape[0] < 2:
        raise ValueError(f"bootstrap needs at least 2 replicates (rows), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("bootstrap sample holds a non-finite value")
    rng = np.random.default_rng(seed)
    n = arr.shape[0]
    idx = rng.integers(0, n, size=(n_boot, n))
    boots = np.array([statistic(arr[i]) for i in idx], dtype=float)
    boots = boots[np.isfinite(boots)]
    if boots.size == 0:
        raise ValueError("the statistic is not finite on any bootstrap resample")
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boots, [alpha, 1 - alpha])
    return Interval(float(statistic(arr)), float(lo), float(hi), level, n, "bootstrap")


def paired_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95,
                    method: str = "t", n_boot: int = 4000, seed: int = 0) -> Interval:
    """Interval for the mean of the paired differences ``a - b`` (``method`` "t" or "bootstrap")."""
    d = paired_differences(a, b)
    if method == "t":
        return t_interval(d, level)
    if method == "bootstrap":
        if d.size < 2:
            return Interval(float(d.mean()), -math.inf, math.inf, level, d.size, "bootstrap")
        return bootstrap_interval(d, np.mean, level, n_boot, seed)
    raise ValueError(f"unknown interval method {method!r}; expected 't' or 'bootstrap'")


def tost(d: Sequence[float], margin: float, level: float = 0.95) -> tuple[float, Interval]:
    """Two one-sided t tests of ``|mean(d)| < margin`` (equivalence), at ``alpha = 1 - level``.

    Returns the TOST p-value (the larger of the two one-sided p-values) and the
    ``1 - 2 alpha`` t interval of the mean (90 % for ``level=0.95``): equivalence holds at
    ``alpha`` exactly when that interval lies inside ``(-margin, margin)``.
    """
    if not margin > 0:
        raise ValueError(f"equivalence margin must be positive, got {margin}")
    arr = as_sample(d, "differences", min_n=1)
    alpha = 1 - level
    ci = t_interval(arr, 1 - 2 * alpha)
    n = arr.size
    if n < 2:
        return 1.0, ci
    se = float(arr.std(ddof=1)) / math.sqrt(n)
    mean = float(arr.mean())
    if se == 0:
        p = 0.0 if abs(mean) < margin else 1.0
        return p, ci
    p_low = float(_st.t.sf((mean + margin) / se, df=n - 1))   # H0: mean <= -margin
    p_high = float(_st.t.cdf((mean - margin) / se, df=n - 1))  # H0: mean >= +margin
    return max(p_low, p_high), ci


def seed_summary(df, by: str | Sequence[str], value: str | Sequence[str], level: float = 0.95,
                 index: bool = True):
    """Mean, standard deviation, n and the t interval of ``value`` per group of ``by``.

    ``df`` is a long table with one row per (group, seed). Returns a DataFrame indexed
    by ``by`` with columns ``<value> mean``, ``<value> std``, ``<value> lo``,
    ``<value> hi`` and ``n`` (the number of seeds); with ``index=False`` the groups are
    columns named as ``by`` instead (a table ready to show or filter).
    """
    import pandas as pd

    values = [value] if isinstance(value, str) else list(value)
    if df.empty:
        raise ValueError("seed_summary got an empty table")
    missing = [c for c in ([by] if isinstance(by, str) else list(by)) + values if c not in df.columns]
    if missing:
        raise KeyError(f"seed_summary: columns {missing} not in the table ({list(df.columns)})")
    rows = {}
    for key, grp in df.groupby(by, sort=False):
        row: dict[str, float] = {}
        for v in values:
            iv = t_interval(grp[v].to_numpy(dtype=float), level)
            row[f"{v} mean"] = iv.estimate
            row[f"{v} std"] = float(grp[v].std(ddof=1)) if len(grp) > 1 else float("nan")
            row[f"{v} lo"], row[f"{v} hi"] = iv.low, iv.high
        row["n"] = len(grp)
        rows[key] = row
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.index.name = by if isinstance(by, str) else None
    if index:
        return out
    keys = [by] if isinstance(by, str) else list(by)
    if len(keys) > 1:
        out.index = pd.MultiIndex.from_tuples(out.index, names=keys)
    return out.reset_index()


def per_seed_wide(df, column: str, columns: str = "method", **where):
    """``column`` of ``df`` with one row per seed and one column per ``columns`` value, for
    the rows where every ``where`` column equals its value (aligned for paired rules).

    Raises:
        ValueError: no row matches ``where``.
    """
    t = df
    for k, v in where.items():
        t = t[t[k] == v]
    if t.empty:
        raise ValueError(f"no rows for {', '.join(f'{k} {v!r}' for k, v in where.items())}")
    return t.pivot(index="seed", columns=columns, values=column).sort_index()


def sig(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits as text (``"-0"`` never appears)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    s = f"{x:.{digits}g}"
    return "0" if s in ("-0", "-0.0") else s


def checked(x: float, decimals: int = 2) -> float:
    """``x`` rounded to ``decimals`` places, with ``-0.0`` made ``0.0``: for checked output."""
    return round(float(x), decimals) + 0.0


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
