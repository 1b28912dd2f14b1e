"""Figures of the Model-Dowser chapter."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from minirepro.core import distinct_colors

ORDER = ("Model-Dowser", "full FT", "LoRA", "magnitude", "Wanda", "random", "SPIDER", "Grafting", "DARE",
         "ModelTailor", "Model-Dowser (real data)")
_PALETTE = dict(zip(ORDER, ("#1f77b4", "#7f7f7f", "#17becf", "#bcbd22", "#9467bd", "#e377c2", "#8c564b",
                            "#ff7f0e", "#2ca02c", "#d62728", "#000000")))


def color(name: str) -> str:
    """The chapter's colour of a method (ten methods need ten colours that differ)."""
    return _PALETTE.get(name) or distinct_colors([*ORDER, name])[name]


def _isolines(ax, levels=(0.2, 0.4, 0.6, 0.8, 0.9)) -> None:
    a = np.linspace(0.005, 1.0, 400)
    for h in levels:
        with np.errstate(divide="ignore", invalid="ignore"):
            b = h * a / (2 * a - h)
        ok = (2 * a > h) & (b <= 1.0) & (b > 0)
        ax.plot(a[ok], b[ok], color="0.75", lw=0.8, ls="--", zorder=0)
        i = np.argmin(np.abs(a[ok] - b[ok])) if ok.any() else None
        if i is not None:
            ax.annotate(f"H={h:g}", (a[ok][i], b[ok][i]), fontsize=8, color="0.45",
                        xytext=(3, -10), textcoords="offset points")


def plot_tradeoff(table: pd.DataFrame, pretrained: Mapping[str, float]) -> plt.Figure:
    """Upstream against downstream accuracy of every method at each depth (dots: seeds,
    markers: means), with H-score isolines; the star is the pretrained model."""
    depths = list(dict.fromkeys(table.depth))
    fig, axes = plt.subplots(1, len(depths), figsize=(8, 4.2), sharey=True, squeeze=False)
    methods = list(dict.fromkeys(table.method))
    for ax, depth in zip(axes[0], depths):
        _isolines(ax)
        t = table[table.depth == depth]
        for m in methods:
            r = t[t.method == m]
            ax.scatter(r.upstream, r.downstream, s=10, color=color(m), alpha=0.35)
            ax.scatter(r.upstream.mean(), r.downstream.mean(), s=60, color=color(m), edgecolor="k",
                       marker="D" if m == "Model-Dowser" else "o", label=m, zorder=3)
        ax.scatter(pretrained["upstream"], pretrained["downstream"], marker="*", s=160, color="k",
                   label="pretrained", zorder=3)
        ax.set(xlim=(0, 1.02), ylim=(-0.02, 1.02), xlabel="upstream accuracy (mean of 4 tasks)",
               title=f"{depth} fine-tuning")
    axes[0, 0].set_ylabel("downstream accuracy")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=9, frameon=False)
    fig.tight_layout()
    return fig


def plot_fraction(sweep: pd.DataFrame) -> plt.Figure:
    """H-score, upstream and downstream accuracy against the update fraction rho (shallow)."""
    fig, axes = plt.subplots(1, 3, figsize=(8, 3.5), sharex=True)
    for ax, col in zip(axes, ("H", "upstream", "downstream")):
        for m, r in sweep.groupby("method", sort=False):
            g = r.groupby("rho")[col].mean()
            ax.plot(g.index, g.values, marker="o", color=color(m), label=m)
        ax.set(xscale="log", xlabel="update fraction rho", ylabel=col if col == "H" else f"{col} accuracy",
               ylim=(0, 1.02))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def plot_frozen_by_layer(scores: Mapping[str, Mapping[str, torch.Tensor]], rho: float,
                         overlap: pd.DataFrame) -> plt.Figure:
    """Left: the share of each layer's weights that a *global* ranking would freeze (the
    per-layer ranking freezes 1 - rho everywhere); right: overlap (Jaccard) of Model-Dowser's
    trainable set with the other masks', per layer."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 4.6), sharey=True)
    names = list(next(iter(scores.values())))
    y = np.arange(len(names))
    h = 0.8 / len(scores)
    for k, (method, sc) in enumerate(scores.items()):
        flat = torch.cat([s.flatten() for s in sc.values()])
        cut = torch.quantile(flat, rho) if flat.numel() < 16_000_000 else flat.sort().values[int(rho * len(flat))]
        share = [float((sc[n] > cut).float().mean()) for n in names]
        a.barh(y + k * h, share, height=h, color=color(method), label=method)
    a.axvline(1 - rho, color="k", ls=":", lw=1)
    a.set(yticks=y + 0.4 - h / 2, yticklabels=names, xlabel="share frozen, global ranking", xlim=(0, 1))
    a.invert_yaxis()
    a.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
    for k, col in enumerate(overlap.columns):
        b.barh(y + k * (0.8 / len(overlap.columns)), overlap.loc[names, col], height=0.8 / len(overlap.columns),
               color=color(col), label=col)
    b.set(xlabel="Jaccard overlap with Model-Dowser", xlim=(0, 1))
    b.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def plot_curves(curves: Mapping[str, Mapping[str, list[float]]], every: int = 10) -> plt.Figure:
    """Downstream training loss of every trained method (first seed), per depth."""
    fig, axes = plt.subplots(1, len(curves), figsize=(7, 3.2), sharey=True, squeeze=False)
    for ax, (depth, cs) in zip(axes[0], curves.items()):
        for m, c in cs.items():
            ax.plot(np.arange(1, len(c) + 1) * every, c, color=color(m), label=m)
        ax.set(yscale="log", xlabel="fine-tuning step", title=f"{depth}")
    axes[0, 0].set_ylabel("downstream loss\n(mean over 10 steps)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=9, frameon=False)
    fig.tight_layout()
    return fig
