"""Per-seed tables from an experiment: final metrics, reward at matched KL, oscillation.

Verdicts are not decided here: the chapter's claims are rule objects
(:mod:`minirepro.claims.rules`) settled on the per-seed values that :func:`per_seed` returns,
paired by seed with :func:`paired`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from minirepro.core.stats import seed_summary

TBPO_VARIANTS: tuple[str, ...] = ("TBPO-Q", "TBPO-A")
FINAL_COLUMNS: tuple[str, ...] = ("state_kl", "reward", "kl_ref", "entropy", "distinct3")


def final_metrics(evals: pd.DataFrame) -> pd.DataFrame:
    """The last evaluation of every (method, seed) run."""
    last = evals.groupby(["method", "seed"])["step"].transform("max")
    return evals[evals["step"] == last].reset_index(drop=True)


def reward_at_kl(kl: np.ndarray, reward: np.ndarray, kappa: float) -> float:
    """[reconstruction] Reward where a training trajectory first reaches ``KL(pi || pi_ref) = kappa``
    (linear interpolation between evaluations); ``nan`` if it never does."""
    kl, reward = np.asarray(kl, float), np.asarray(reward, float)
    if kl.shape != reward.shape or kl.ndim != 1 or kl.size == 0:
        raise ValueError("kl and reward must be 1-D arrays of the same non-zero length")
    if kl[0] >= kappa:
        return float(reward[0])
    for i in range(1, kl.size):
        if kl[i] >= kappa:
            w = (kappa - kl[i - 1]) / (kl[i] - kl[i - 1])
            return float(reward[i - 1] + w * (reward[i] - reward[i - 1]))
    return float("nan")


def frontier_shortfall(kl: np.ndarray, reward: np.ndarray, frontier: tuple[np.ndarray, np.ndarray]) -> float:
    """[reconstruction] Reward at matched KL along a whole run: the mean, over the run's
    evaluations, of the exact frontier's reward at the evaluation's KL minus the run's reward
    (``frontier`` from ``mdp.exact_frontier``; linear interpolation, clamped at its ends).

    0 for a run on the frontier at every evaluation, larger for a worse trade-off; estimated
    points can fall slightly above the exact curve (Monte Carlo noise), giving negative terms."""
    kl, reward = np.asarray(kl, float), np.asarray(reward, float)
    if kl.shape != reward.shape or kl.ndim != 1 or kl.size == 0:
        raise ValueError("kl and reward must be 1-D arrays of the same non-zero length")
    fk, fr = frontier
    return float(np.mean(np.interp(kl, fk, fr) - reward))


def oscillation(values: np.ndarray) -> float:
    """[reconstruction] Back-and-forth movement of a training curve: its total variation minus
    its net change, ``sum |x_{i+1} - x_i| - |x_last - x_first|`` (0 for a monotone curve; in
    the curve's units)."""
    x = np.asarray(values, float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("values must be a non-empty 1-D array")
    return float(np.abs(np.diff(x)).sum() - abs(x[-1] - x[0]))


def matched_kappa(evals: pd.DataFrame) -> float:
    """The matched KL-to-reference: 0.9 x the smallest seed-mean final KL of any method (so
    every method's mean trajectory reaches it)."""
    return 0.9 * float(final_metrics(evals).groupby("method")["kl_ref"].mean().min())


def per_seed(evals: pd.DataFrame, kappa: float | None = None, late_from: int | None = None,
             frontier: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """One row per (method, seed): the final metrics, ``reward@kl`` (reward at matched KL
    ``kappa``, default :func:`matched_kappa`), ``oscillation`` of the per-state KL over the
    evaluations at steps >= ``late_from`` (default: the second half of training) and, given the
    exact ``frontier``, ``shortfall``: :func:`frontier_shortfall` over every evaluation after step 0."""
    kappa = matched_kappa(evals) if kappa is None else kappa
    late_from = int(evals["step"].max()) // 2 if late_from is None else late_from
    fin = final_metrics(evals).set_index(["method", "seed"])
    rows = []
    for (m, s), g in evals.sort_values("step").groupby(["method", "seed"], sort=False):
        late = g[g["step"] >= late_from]
        rows.append({"method": m, "seed": s,
                     **{c: fin.loc[(m, s), c] for c in FINAL_COLUMNS if c in fin.columns},
                     "reward@kl": reward_at_kl(g["kl_ref"].values, g["reward"].values, kappa),
                     "oscillation": oscillation(late["state_kl"].values) if "state_kl" in g else np.nan,
                     "shortfall": (frontier_shortfall(g.loc[g["step"] > 0, "kl_ref"].values,
                                                      g.loc[g["step"] > 0, "reward"].values, frontier)
                                   if frontier is not None else np.nan)})
    order = list(dict.fromkeys(evals["method"]))
    out = pd.DataFrame(rows)
    rank = out["method"].map(order.index)
    return out.assign(_rank=rank).sort_values(["_rank", "seed"]).drop(columns="_rank").reset_index(drop=True)


def paired(frame: pd.DataFrame, column: str, method: str, baseline: str = "DPO") -> dict[str, np.ndarray]:
    """``{"method": ..., "baseline": ...}``: the per-seed values of ``column`` for ``method`` and
    ``baseline``, aligned by seed (the data a paired rule settles on)."""
    for m in (method, baseline):
        if m not in set(frame["method"]):
            raise ValueError(f"method {m!r} is not in the table ({sorted(set(frame['method']))})")
    a = frame[frame["method"] == method].set_index("seed")[column]
    b = frame[frame["method"] == baseline].set_index("seed")[column]
    if set(a.index) != set(b.index):
        raise ValueError(f"{method} and {baseline} were run on different seeds")
    seeds = sorted(a.index)
    return {"method": a.loc[seeds].to_numpy(float), "baseline": b.loc[seeds].to_numpy(float)}


def headline(frame: pd.DataFrame, columns: tuple[str, ...] = ("state_kl", "reward@kl", "kl_ref", "entropy",
                                                              "distinct3")) -> pd.DataFrame:
    """Seed mean and std of ``columns`` per method (``core.stats.seed_summary``), one row per method."""
    cols = [c for c in columns if c in frame.columns]
    tab = seed_summary(frame, "method", cols)
    return tab[[f"{c} {s}" for c in cols for s in ("mean", "std")]]
