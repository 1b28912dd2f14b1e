"""The chapter's figures."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from minirepro.core import color
from minirepro.papers.active_o3.canvas import Canvases, global_view, upsample_view

ARM_COLORS = {"passive view": "#222222", "random boxes": "#9e9e9e", "saliency zoom": "#e08214",
              "full tiling": "#8c564b", "GRPO task": "#1f77b4", "GRPO heuristic": "#9467bd",
              "GRPO dual": "#d62728"}


def _c(arm: str) -> str:
    return ARM_COLORS[arm] if arm in ARM_COLORS else color(arm)


def plot_canvases(cv: Canvases, answers: dict[str, list[np.ndarray]], which: list[int]) -> Figure:
    """Rows: canvases; columns: the global view, then each arm's boxes on the full canvas
    (green edges: ground-truth digits)."""
    arms = list(answers)
    fig, axes = plt.subplots(len(which), len(arms) + 1, figsize=(1.55 * (len(arms) + 1), 1.6 * len(which)),
                             squeeze=False)
    view = upsample_view(global_view(cv.images))
    for r, i in enumerate(which):
        axes[r, 0].imshow(view[i], cmap="gray", vmin=0, vmax=1)
        for j, arm in enumerate(arms, start=1):
            ax = axes[r, j]
            ax.imshow(cv.images[i], cmap="gray", vmin=0, vmax=1)
            for b in cv.boxes[i]:
                ax.add_patch(Rectangle((b[0] - 0.5, b[1] - 0.5), b[2] - b[0], b[3] - b[1], fill=False,
                                       ec="lime", lw=1))
            for b in answers[arm][i]:
                ax.add_patch(Rectangle((b[0] - 0.5, b[1] - 0.5), b[2] - b[0], b[3] - b[1], fill=False,
                                       ec=_c(arm), lw=2))
        for j, name in enumerate(["global view (24x24)"] + arms):
            if r == 0:
                axes[r, j].set_title(name, fontsize=9)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    return fig


def plot_curves(curves: pd.DataFrame, window: int = 10) -> Figure:
    """Left: training task recall per reward form (mean over seeds, band min-max); right: share
    of zero-variance groups."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, col, label in ((axes[0], "task", "task recall on the training batch"),
                           (axes[1], "zero_var", "share of zero-variance groups")):
        wide = curves.pivot_table(index="iter", columns=["form", "seed"], values=col)
        wide = wide.rolling(window, min_periods=1).mean()
        for form in wide.columns.get_level_values(0).unique():
            w = wide[form]
            c = _c(f"GRPO {form}")
            ax.plot(w.index, w.mean(1), color=c, label=f"{form} reward")
            ax.fill_between(w.index, w.min(1), w.max(1), color=c, alpha=0.2, lw=0)
        ax.set_xlabel("GRPO iteration")
        ax.set_ylabel(label)
    axes[0].legend(loc="upper left", fontsize=9, frameon=False)
    fig.tight_layout()
    return fig


def plot_budget(arms: pd.DataFrame) -> Figure:
    """Task recall against regions used per canvas, per arm (mean over seeds, bars: min-max)."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    g = arms.groupby(["arm", "k"]).recall.agg(["mean", "min", "max"]).reset_index()
    for arm, d in g.groupby("arm", sort=False):
        d = d.sort_values("k")
        yerr = [(d["mean"] - d["min"]).clip(lower=0), (d["max"] - d["mean"]).clip(lower=0)]  # no -1 ulp
        ax.errorbar(d.k, d["mean"], yerr=yerr, marker="o",
                    color=_c(arm), label=arm, capsize=3)
    ax.set_xlabel("regions read by the task model per canvas")
    ax.set_ylabel("task recall (share of digits read)")
    ax.set_xscale("log")
    ax.set_xticks(sorted(g.k.unique()), [str(k) for k in sorted(g.k.unique())])
    ax.minorticks_off()
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9, frameon=False)
    fig.tight_layout()
    return fig
