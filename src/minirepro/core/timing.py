"""Timing for speed claims: medians of repeats, ratios measured in one run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass


def median_time(fn: Callable[[], object], repeats: int = 7, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` calls after ``warmup`` calls."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    for _ in range(max(0, warmup)):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


@dataclass(frozen=True)
class Timings:
    """Median seconds per function and the ratio of the baseline's median to each."""

    medians: dict[str, float]
    baseline: str

    @property
    def speedups(self) -> dict[str, float]:
        """``median[baseline] / median[name]``: above 1 means faster than the baseline."""
        base = self.medians[self.baseline]
        return {k: base / v if v > 0 else float("inf") for k, v in self.medians.items()}


def compare_times(fns: Mapping[str, Callable[[], object]], repeats: int = 7, warmup: int = 1,
                  baseline: str | None = None) -> Timings:
    """Time several functions in one run, interleaved, and report medians and speed-ups.

    Interleaving (a, b, c, a, b, c, ...) spreads machine noise evenly over the
    functions, so the ratios are fairer than timing each in its own block.
    """
    if not fns:
        raise ValueError("compare_times needs at least one function")
    names = list(fns)
    baseline = baseline or names[0]
    if baseline not in fns:
        raise ValueError(f"baseline {baseline!r} is not among {names}")
    for _ in range(max(0, warmup)):
        for name in names:
            fns[name]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(repeats):
        for name in names:
            t0 = time.perf_counter()
            fns[name]()
            samples[name].append(time.perf_counter() - t0)
    return Timings({n: statistics.median(s) for n, s in samples.items()}, baseline)
