"""The data behind each claim, pulled from the runs table (verdicts are the rules' job)."""

from __future__ import annotations

import numpy as np
import pandas as pd

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
    """Thm 3 per seed: at every collapse angle the gap and the smallest principal angle φ_min of the
    subspaces the embeddings fill (99 % of the variance), and the means over angles of
    |Δθ - φ| (the constructed angle) and of |Δθ - φ_min| (the learned one).

    Rows: seeds; columns ``gap at <phi>``, ``phi_min at <phi>``, ``mean |gap - phi|`` and
    ``mean |gap - phi_min|`` (degrees).
    """
    sel = runs[(runs["data"] == data) & (runs["arm"] == arm)]
    gap = sel.pivot(index="seed", columns="phi", values="gap (deg)")
    learned = sel.pivot(index="seed", columns="phi", values="phi_min (deg)")
    out = pd.concat([gap.rename(columns=lambda p: f"gap at {p:g}"),
                     learned.rename(columns=lambda p: f"phi_min at {p:g}")], axis=1)
    out["mean |gap - phi|"] = (gap - np.asarray(gap.columns, float)[None, :]).abs().mean(1)
    out["mean |gap - phi_min|"] = (gap - learned).abs().mean(1)
    return out


def within_cells(runs: pd.DataFrame, columns: list[str], arms: tuple[str, ...] = ("CLIP", "gap penalty", "SSA"),
                 data: str = "synthetic") -> pd.DataFrame:
    """The runs of the trained ``arms`` with each of ``columns`` centred within its cell (arm x
    collapse angle): what is left is how the seeds of one design differ, so arms and angles that
    move a metric by design cannot make a correlation. One row per run, in a fixed order."""
    sel = runs[(runs["data"] == data) & runs["arm"].isin(arms)].sort_values(["arm", "phi", "seed"])
    if sel.empty:
        raise KeyError(f"no runs of {arms} on {data!r}")
    cells = sel.groupby(["arm", "phi"])[columns]
    if (cells.size() < 2).any():
        raise ValueError("centring within cells needs at least 2 seeds per (arm, angle)")
    return (sel[columns] - cells.transform("mean")).reset_index(drop=True)


def cell_seeds(runs: pd.DataFrame, arms: tuple[str, ...] = ("CLIP", "gap penalty", "SSA"),
               data: str = "synthetic") -> np.ndarray:
    """The seed of each row of :func:`within_cells` (same selection, same order): the cluster
    each run belongs to, since the runs of one seed (its arms and angles) share its data draw
    and are not independent units."""
    sel = runs[(runs["data"] == data) & runs["arm"].isin(arms)].sort_values(["arm", "phi", "seed"])
    if sel.empty:
        raise KeyError(f"no runs of {arms} on {data!r}")
    return sel["seed"].to_numpy()


def correlation_text(details: dict) -> str:
    """A correlation part's outcome for the page: ``"r = 0.31 (95% interval, seeds resampled:
    0.20 to 0.39)"``, or the estimate alone when too few seeds give no interval."""
    r = details.get("estimate", float("nan"))
    if "low" in details and "high" in details:
        return f"r = {r:.2f} (95% interval, seeds resampled: {details['low']:.2f} to {details['high']:.2f})"
    if not np.isfinite(r):
        return f"no correlation (too few units: {details.get('n', 0)})"
    return f"r = {r:.2f} (no interval: {details.get('n', 0)} seeds, fewer than the 4 an interval needs)"


def partial_residuals(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The residuals of ``x`` and of ``y`` after a least-squares line on ``z`` (with intercept): their
    correlation is the partial correlation of ``x`` and ``y`` given ``z``."""
    x, y, z = (np.asarray(v, float) for v in (x, y, z))
    if not (x.shape == y.shape == z.shape) or x.ndim != 1 or x.size < 3:
        raise ValueError(f"x, y, z must be aligned 1-d samples of >= 3 units, got {x.shape}, {y.shape}, {z.shape}")
    design = np.column_stack([np.ones_like(z), z])
    res = lambda v: v - design @ np.linalg.lstsq(design, v, rcond=None)[0]  # noqa: E731
    return res(x), res(y)


def correlations(cells: pd.DataFrame) -> dict[str, float]:
    """Pearson's correlation of R@1 with alignment and with the gap over the runs of
    :func:`within_cells`, and the partial one with alignment given the gap."""
    ra, rg = (float(np.corrcoef(cells["R@1"], cells[c])[0, 1]) for c in ("alignment", "gap (deg)"))
    px, py = partial_residuals(cells["alignment"], cells["R@1"], cells["gap (deg)"])
    return {"R@1 vs alignment": ra, "R@1 vs gap": rg, "R@1 vs alignment given the gap": float(np.corrcoef(px, py)[0, 1])}


def summary(runs: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Mean over seeds of ``columns`` per (data, collapse angle, arm), arms in the book's order."""
    from minirepro.papers.ssa.experiment import ARMS

    out = runs.groupby(["data", "phi", "arm"], sort=False)[columns].mean().reset_index()
    out["arm"] = pd.Categorical(out["arm"], ARMS, ordered=True)
    return out.sort_values(["data", "phi", "arm"]).reset_index(drop=True)


def result_table(table: pd.DataFrame, data: str) -> pd.DataFrame:
    """The page's table for one data set: :func:`summary`'s means formatted as text (angles in
    whole degrees, cosines and R@1 to 3 decimals, ``-`` for a value that does not exist), one
    column per quantity, indexed by arm (and angle when there are several), so that nothing runs
    together or shows as ``nan``. A plain DataFrame: the book's table style applies to it."""
    sel = table[table["data"] == data]
    if sel.empty:
        raise KeyError(f"no rows for data={data!r}")
    deg = lambda v: "-" if pd.isna(v) else f"{v:.0f}°"  # noqa: E731
    num = lambda v: "-" if pd.isna(v) else f"{v:.3f}"  # noqa: E731
    out = pd.DataFrame({"φ": [deg(v) for v in sel["phi"]], "arm": list(sel["arm"].astype(str)),
                        "gap": [deg(v) for v in sel["gap (deg)"]], "φ_min": [deg(v) for v in sel["phi_min (deg)"]],
                        "alignment": [num(v) for v in sel["alignment"]],
                        "pair cos": [num(v) for v in sel["pair cosine"]], "R@1": [num(v) for v in sel["R@1"]]})
    if "zero-shot" in sel and sel["zero-shot"].notna().any():
        out["0-shot"] = [num(v) for v in sel["zero-shot"]]
    return out.set_index(["arm"] if sel["phi"].nunique() == 1 else ["φ", "arm"]).drop(columns="φ", errors="ignore")
