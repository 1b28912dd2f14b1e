"""The data behind each claim, pulled from the runs table (verdicts are the rules' job)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as _st

CROSS_RUN_COLUMNS: tuple[str, str, str] = ("R@1", "alignment", "gap (deg)")


def per_seed(runs: pd.DataFrame, data: str, arm: str, metric: str, phi: float | None = None) -> np.ndarray:
    """``metric`` of one arm, one value per seed (ascending seeds), at collapse angle ``phi``
    (``None``: the only angle there is). Raises if a seed is missing or repeated."""
    sel = runs[(runs["data"] == data) & (runs["arm"] == arm)]
    if phi is not None:
        sel = sel[np.isclose(sel["phi"], phi)]
    if sel.empty:
        raise KeyError(f"no runs for data={data!r}, arm={arm!r}, phi={phi}")
    if sel["seed"].duplicated().any():
        raise ValueError(f"several runs per seed for data={data!r}, arm={arm!r}: give phi")
    return sel.sort_values("seed")[metric].to_numpy(dtype=float)


def theorem_table(runs: pd.DataFrame, arm: str = "CLIP", data: str = "synthetic") -> pd.DataFrame:
    """Thm 3 per seed: the gap at every collapse angle, and the mean |Δθ - φ| over angles.

    Rows: seeds; columns: ``gap at <phi>`` for each angle and ``mean |gap - phi|`` (degrees).
    """
    sel = runs[(runs["data"] == data) & (runs["arm"] == arm)]
    wide = sel.pivot(index="seed", columns="phi", values="gap (deg)")
    dev = (wide - np.asarray(wide.columns, float)[None, :]).abs().mean(1)
    out = wide.rename(columns=lambda p: f"gap at {p:g}")
    out["mean |gap - phi|"] = dev
    return out


def cross_run_table(runs: pd.DataFrame, data: str = "synthetic") -> np.ndarray:
    """One row per run (seed x collapse angle x arm, post-hoc arms included) with the
    columns ``CROSS_RUN_COLUMNS``: the sample the correlation bootstrap resamples."""
    sel = runs[runs["data"] == data]
    return sel[list(CROSS_RUN_COLUMNS)].to_numpy(dtype=float)


def correlation_gap(rows: np.ndarray) -> float:
    """|Spearman(R@1, alignment)| - |Spearman(R@1, gap)| over runs (``rows``: ``(n, 3)``
    in the order of ``CROSS_RUN_COLUMNS``). Positive: retrieval follows alignment more."""
    rows = np.asarray(rows, float)
    if rows.ndim != 2 or rows.shape[1] != 3 or rows.shape[0] < 3:
        raise ValueError(f"need an (n >= 3, 3) table of runs, got {rows.shape}")
    r_align = _st.spearmanr(rows[:, 0], rows[:, 1]).statistic
    r_gap = _st.spearmanr(rows[:, 0], rows[:, 2]).statistic
    return float(abs(r_align) - abs(r_gap))


def correlations(rows: np.ndarray) -> dict[str, float]:
    """Spearman's correlation of R@1 with alignment and with the gap over the runs."""
    rows = np.asarray(rows, float)
    return {"R@1 vs alignment": float(_st.spearmanr(rows[:, 0], rows[:, 1]).statistic),
            "R@1 vs gap": float(_st.spearmanr(rows[:, 0], rows[:, 2]).statistic)}


def summary(runs: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Mean over seeds of ``columns`` per (data, collapse angle, arm), arms in the book's order."""
    from minirepro.papers.ssa.experiment import ARMS

    out = runs.groupby(["data", "phi", "arm"], sort=False)[columns].mean().reset_index()
    out["arm"] = pd.Categorical(out["arm"], ARMS, ordered=True)
    return out.sort_values(["data", "phi", "arm"]).reset_index(drop=True)
