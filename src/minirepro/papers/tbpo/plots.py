"""The chapter's figures: reward-KL frontier, per-state KL and entropy over training, curves."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from minirepro.core import color as book_color
from minirepro.core.plotting import distinct_colors, plot_seed_band

# The names this chapter plots, in a fixed order: colours are resolved against all of them.
_ALL = ("reference", "optimum", "DPO", "TDPO", "TBPO-Q", "TBPO-A", "Bregman (logistic)",
        "Bregman (KLIEP)", "Bregman (LSIF)", "Bregman (BA -0.5)", "IPO", "SimPO")


def color(name: str) -> str:
    """The colour of ``name`` on this chapter's figures (the book's, made distinct across ``_ALL``)."""
    return distinct_colors(list(_ALL)).get(name) or book_color(name)


def _methods(evals: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(evals["method"]))


def plot_frontier(evals: pd.DataFrame, exact: pd.DataFrame, kappa: float | None = None):
    """Seed-mean trajectory of each method in the (KL to reference, true reward) plane, with
    the reference policy and the exact optimum pi*."""
    fig, ax = plt.subplots(figsize=(7.0, 4.6))
    for m in _methods(evals):
        g = evals[evals["method"] == m].groupby("step")[["kl_ref", "reward"]].mean()
        ax.plot(g["kl_ref"], g["reward"], "-o", ms=3, color=color(m), label=m, alpha=0.9)
        ax.plot(g["kl_ref"].iloc[-1], g["reward"].iloc[-1], "o", ms=8, color=color(m),
                markeredgecolor="black")
    for name, marker in (("reference", "s"), ("optimum", "*")):
        row = exact[exact["method"] == name].iloc[0]
        ax.plot(row["kl_ref"], row["reward"], marker, ms=14 if marker == "*" else 9, color=color(name),
                label=f"{name} (exact)", linestyle="none")
    if kappa is not None:
        ax.axvline(kappa, color="grey", ls=":", lw=1, label=f"matched KL = {kappa:.2f}")
    ax.set_xlabel("KL(pi || pi_ref) per response (nats)")
    ax.set_ylabel("true expected reward (BT logit units)")
    ax.set_title("Reward against KL to the reference (mean of seeds)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def plot_over_training(evals: pd.DataFrame, column: str, ylabel: str, exact: pd.DataFrame | None = None,
                       title: str = ""):
    """A metric against the training step: seed mean (line) and seed range (band) per method;
    optional dashed lines at the exact reference and optimum values."""
    fig, ax = plt.subplots(figsize=(8.5, 4.0))
    for m in _methods(evals):
        wide = evals[evals["method"] == m].pivot_table(index="seed", columns="step", values=column)
        plot_seed_band(ax, wide.columns.to_numpy(), wide.to_numpy(), color(m), label=m)
    if exact is not None:
        for name in ("reference", "optimum"):
            v = float(exact.loc[exact["method"] == name, column].iloc[0])
            ax.axhline(v, color=color(name), ls="--", lw=1.2, label=f"{name} (exact)")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig


def plot_curves(curves: pd.DataFrame, window: int = 5):
    """Training loss and mean margin ``beta m`` per step (rolling mean over ``window`` steps),
    one thin line per seed, so the spread across seeds shows."""
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 3.8))
    for m in _methods(curves):
        for i, (_, g) in enumerate(curves[curves["method"] == m].groupby("seed")):
            g = g.sort_values("step")
            for ax, col in zip(axes, ("loss", "margin")):
                ax.plot(g["step"], g[col].rolling(window, min_periods=1).mean(), color=color(m), lw=1,
                        alpha=0.8, label=m if i == 0 else None)
    axes[0].set_ylabel("training loss (each method's own)")
    axes[1].set_ylabel("mean margin beta m on the batch (nats)")
    for ax in axes:
        ax.set_xlabel("training step")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig
