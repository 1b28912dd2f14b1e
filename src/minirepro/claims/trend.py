"""Scale trends: a claim's effect measured at three or more sizes, and its direction tested.

A chapter's plan (``book/claims/robustness_policy.yml``) may name a trend::

    tasm:
      param: seed
      trend:
        param: n_episodes          # the chapter's natural axis (a notebook parameter)
        values: [40, 160, 640]     # smoke, book and larger, toward the full preset
        claims:                    # claim id (or "id/part" of a claim of several parts)
          merge-beats-prune-spread/TASM merge vs prune: 0.05   # the paper's effect, or null
        log: true                  # the axis grows geometrically (the slope is per doubling)

``minirepro claims --trend`` runs the chapter once at each value (book scale otherwise)
and records each claim's effect (its rule's estimate with the interval the rule used) in
``book/claims/trend/<slug>.json``. Nothing here runs a chapter: :func:`slope` reads that
record (its figure is :func:`minirepro.claims.chapter_view.trend_figure`). The slope of the
effect against the size (per doubling when ``log``) has a parametric-bootstrap interval: each
point is redrawn from a normal with its own estimate and standard error (from its interval),
and the line refitted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import stats as _st

from minirepro.core.stats import Interval


def effect_of(claim: Mapping[str, Any], part: str | None = None) -> dict[str, float] | None:
    """``{"estimate", "low", "high", "n"}`` of a settled claim (or of one of its parts)."""
    d = claim.get("details") or {}
    if part is not None:
        d = d.get(part) or {}
    if "estimate" not in d:
        return None
    try:
        return {k: float(d[k]) for k in ("estimate", "low", "high") if k in d} | {"n": int(d.get("n", 0))}
    except (TypeError, ValueError):
        return None


def _se(point: Mapping[str, float], level: float = 0.95) -> float:
    lo, hi = point.get("low"), point.get("high")
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return float("nan")
    return (hi - lo) / (2 * float(_st.norm.ppf(0.5 + level / 2)))


def slope(points: list[Mapping[str, float]], log: bool = True, level: float = 0.95, n_boot: int = 4000,
          seed: int = 0) -> Interval:
    """The slope of the effect against the size (against log2 of it when ``log``: the change per
    doubling), with a parametric-bootstrap interval that carries each point's own uncertainty.

    Raises:
        ValueError: fewer than 3 points, or a point without a finite interval.
    """
    if len(points) < 3:
        raise ValueError(f"a trend needs at least 3 sizes, got {len(points)}")
    x = np.array([p["value"] for p in points], dtype=float)
    x = np.log2(x) if log else x
    y = np.array([p["estimate"] for p in points], dtype=float)
    se = np.array([_se(p, level) for p in points], dtype=float)
    if not np.all(np.isfinite(se)):
        raise ValueError("every point of a trend needs a finite interval")
    fit = float(np.polyfit(x, y, 1)[0])
    rng = np.random.default_rng(seed)
    ys = y + se * rng.standard_normal((n_boot, y.size))
    xc = x - x.mean()
    boots = (ys - ys.mean(axis=1, keepdims=True)) @ xc / float(xc @ xc)
    lo, hi = np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2])
    return Interval(fit, float(lo), float(hi), level, len(points), "parametric bootstrap")


def direction(iv: Interval, toward: float | None, at_largest: float) -> str:
    """``"toward the paper"``, ``"away from the paper"`` or ``"flat"`` (the slope's interval
    contains 0). Without a paper value, the sign of the slope (``"growing"``, ``"shrinking"``)."""
    if iv.low <= 0 <= iv.high:
        return "flat"
    if toward is None:
        return "growing" if iv.estimate > 0 else "shrinking"
    return "toward the paper" if (toward - at_largest) * iv.estimate > 0 else "away from the paper"


def series(record: Mapping[str, Any], key: str) -> list[dict[str, float]]:
    """The recorded points of one trend key (``"claim"`` or ``"claim/part"``), by size."""
    pts = [p for p in (record.get("claims") or {}).get(key, []) if p.get("estimate") is not None]
    return sorted(pts, key=lambda p: p["value"])


__all__ = ["direction", "effect_of", "series", "slope"]
