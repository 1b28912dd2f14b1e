"""Tables from an experiment: final metrics, reward at matched KL, comparisons with DPO."""

from __future__ import annotations

import numpy as np
import pandas as pd

TBPO_VARIANTS: tuple[str, ...] = ("TBPO-Q", "TBPO-A")


def final_metrics(evals: pd.DataFrame) -> pd.DataFrame:
    """The last evaluation of every (method, seed) run."""
    last = evals.groupby(["method", "seed"])["step"].transform("max")
    return evals[evals["step"] == last].reset_index(drop=True)


def reward_at_kl(kl: np.ndarray, reward: np.ndarray, kappa: float) -> float:
    """Reward where a training trajectory first reaches ``KL(pi || pi_ref) = kappa``
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


def matched_kl_rewards(evals: pd.DataFrame, kappa: float) -> pd.DataFrame:
    """``reward_at_kl`` for every (method, seed) trajectory."""
    rows = []
    for (m, s), g in evals.sort_values("step").groupby(["method", "seed"]):
        rows.append({"method": m, "seed": s, "reward_at_kl": reward_at_kl(g["kl_ref"].values, g["reward"].values, kappa)})
    return pd.DataFrame(rows)


def summary(evals: pd.DataFrame, columns: tuple[str, ...] = ("state_kl", "reward", "kl_ref", "entropy", "distinct3")) -> pd.DataFrame:
    """Mean and std over seeds of the final metrics, one row per method."""
    fin = final_metrics(evals)
    agg = fin.groupby("method", sort=False)[list(columns)].agg(["mean", "std"])
    agg.columns = [f"{a} {b}" for a, b in agg.columns]
    return agg


def headline(evals: pd.DataFrame, kappa: float | None = None) -> tuple[pd.DataFrame, float]:
    """One row per method: seed mean and std of the final metrics, and the seed-mean reward
    at matched KL-to-reference ``kappa`` (default: 0.9 x the smallest seed-mean final KL of
    any method, so every trajectory reaches it). Returns ``(table, kappa)``."""
    fin = final_metrics(evals)
    if kappa is None:
        kappa = 0.9 * float(fin.groupby("method")["kl_ref"].mean().min())
    tab = summary(evals)
    mk = matched_kl_rewards(evals, kappa).groupby("method")["reward_at_kl"]
    tab["reward@kl mean"] = mk.mean()
    tab["reward@kl std"] = mk.std()
    return tab, kappa


def better_than(tab: pd.DataFrame, column: str, baseline: str = "DPO", lower: bool = True,
                methods: tuple[str, ...] = TBPO_VARIANTS) -> dict[str, bool]:
    """For each of ``methods``: is ``tab.loc[m, column]`` lower (or higher) than the baseline's?"""
    if baseline not in tab.index:
        raise ValueError(f"baseline {baseline!r} is not in the table ({list(tab.index)})")
    missing = [m for m in methods if m not in tab.index]
    if missing:
        raise ValueError(f"methods {missing} are not in the table")
    b = tab.loc[baseline, column]
    return {m: bool(tab.loc[m, column] < b) if lower else bool(tab.loc[m, column] > b) for m in methods}
