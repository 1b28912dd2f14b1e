"""The chapter's figures (matplotlib, book colours from ``minirepro.core.color``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from minirepro.core import color
from minirepro.papers.spreadsheet_arena.voters import VOTER_FEATURES


def plot_ratings(board: pd.DataFrame, truth: dict[str, float], orders: np.ndarray,
                   models: list[str]):
    """Left: BT ratings with 95% bootstrap intervals and the true rating. Right: online Elo
    final ratings under random orders of the same votes, each order shifted to the BT mean
    (online Elo conserves the sum of ratings, BT pins the anchor: only differences compare)."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True,
                                 gridspec_kw={"width_ratios": [1.2, 1]})
    order = list(board["model"])
    orders = orders - orders.mean(1, keepdims=True) + board["rating"].mean()
    y = np.arange(len(order))
    for i, m in enumerate(order):
        r = board.set_index("model").loc[m]
        ax.errorbar(r["rating"], i, xerr=[[r["rating"] - r["lower"]], [r["upper"] - r["rating"]]],
                    fmt="o", color=color(m), capsize=4, ms=7, label=m)
        ax.plot(truth[m], i, marker="x", color="black", ms=9, mew=2,
                label="true rating (exact expectation)" if i == 0 else None)
    ax.set_yticks(y, order)
    ax.invert_yaxis()
    ax.set_xlabel("BT rating (Elo points; gen-minimal = 1000)")
    ax.set_title("Arena ratings, 95% bootstrap intervals")
    ax.legend(loc="lower right", fontsize=8)
    for i, m in enumerate(order):
        k = models.index(m)
        bx.scatter(orders[:, k], np.full(len(orders), i) + np.linspace(-0.2, 0.2, len(orders)),
                   color=color(m), s=14, alpha=0.8)
        bx.plot(board.set_index("model").loc[m, "rating"], i, "|", color="black", ms=16, mew=2)
    bx.set_xlabel("online Elo, shifted to the BT mean (Elo points)")
    bx.set_title("Online Elo: same votes, shuffled order")
    fig.tight_layout()
    return fig


def plot_coefficients(frame: pd.DataFrame, categories: list[str]):
    """Planted vs fitted feature coefficients gamma, one panel per category (error bars 95%)."""
    fig, axes = plt.subplots(1, len(categories), figsize=(12, 3.8), sharey=True)
    x = np.arange(len(VOTER_FEATURES))
    for ax, c in zip(axes, categories):
        sub = frame[frame["category"] == c].set_index("feature").loc[list(VOTER_FEATURES)]
        ax.bar(x - 0.2, sub["planted"], 0.4, color=color("oracle"), label="planted (truth)")
        ax.bar(x + 0.2, sub["fitted"], 0.4, yerr=1.96 * sub["se"], capsize=3,
               color=color("style-controlled"), label="style-controlled fit")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(x, [f.replace("_", " ") for f in VOTER_FEATURES], rotation=45, ha="right")
        ax.set_title(c)
    axes[0].set_ylabel("coefficient gamma (log-odds per unit)")
    axes[-1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_expert(table: pd.DataFrame):
    """Finance prompts: arena rating against the best-practice checker's mean score."""
    fig, ax = plt.subplots(figsize=(8.0, 4.2))
    for r in table.itertuples():
        ax.scatter(r.arena_rating, r.expert_score, s=90, color=color(r.model), label=r.model,
                   edgecolor="black")
        ax.annotate(f"{r.best_practice:.0%} all checks", (r.arena_rating, r.expert_score),
                    textcoords="offset points", xytext=(6, -12), fontsize=8)
    ax.set_xlabel("arena rating on finance prompts (Elo points)")
    ax.set_ylabel("expert checker score (share of checks passed)")
    ax.set_ylim(0, 1.05)
    ax.margins(x=0.12)
    ax.set_title("Finance: crowd rating vs best practice")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig
