"""The chapter's figures (one colour per method, from ``minirepro.core.color``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from minirepro.core import color


def plot_quality(summary: pd.DataFrame):
    """Agreement with dense and NLL on the decoded trace tokens per method: bars are seed means, ticks each seed."""
    methods = list(dict.fromkeys(summary["method"]))
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.8))
    for ax, col, label in zip(axes, ("agree trace", "nll trace"),
                              ("agreement with dense (fraction of tokens)", "NLL of the trace (nats/token)")):
        g = summary.groupby("method", sort=False)[col]
        ax.bar(range(len(methods)), [g.mean()[m] for m in methods], color=[color(m) for m in methods], alpha=0.85)
        for i, m in enumerate(methods):
            v = summary.loc[summary["method"] == m, col].to_numpy()
            ax.plot(np.full(len(v), i), v, "_", color="k", ms=12, mew=1.5)
        ax.set_xticks(range(len(methods)), methods, rotation=40, ha="right", fontsize=9)
        ax.set_ylabel(label)
        lo = summary[col].min()
        hi = summary[col].max()
        ax.set_ylim(lo - 0.15 * (hi - lo + 1e-3), hi + 0.1 * (hi - lo + 1e-3))
    fig.tight_layout()
    return fig


def plot_overlap(stab: pd.DataFrame, run: dict):
    """Stability Jaccards (self, other, random) per seed and the topic-by-topic Jaccard heatmap (first seed)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.8), gridspec_kw={"width_ratios": [1, 1.2]})
    for j, (col, c) in enumerate((("self", color("SparseInfer")), ("other", "#7F7F7F"))):
        ax1.bar(j, stab[col].mean(), color=c, alpha=0.85)
        ax1.plot(np.full(len(stab), j), stab[col], "_", color="k", ms=12, mew=1.5)
    ax1.axhline(stab["random"].iloc[0], color=color("random"), ls="--", label="two random sets")
    ax1.set_xticks([0, 1], ["own\ncontinuation", "another prompt's\ncontinuation"], fontsize=9)
    ax1.set_ylabel("Jaccard with the prompt's core set")
    ax1.set_ylim(0, 1)
    ax1.legend(loc="upper right", fontsize=9)
    M, topics = run["topic_matrix"]
    im = ax2.imshow(M, cmap="viridis", vmin=np.nanmin(M), vmax=np.nanmax(M))
    ax2.set_xticks(range(len(topics)), topics, rotation=45, ha="right", fontsize=9)
    ax2.set_yticks(range(len(topics)), topics, fontsize=9)
    ax2.grid(False)
    fig.colorbar(im, ax=ax2, label="mean Jaccard")
    ax2.set_title("core-set overlap by topic")
    fig.tight_layout()
    return fig


def plot_sweep(sweep: pd.DataFrame, bounds: dict[float, float], ffn_speed: dict[float, float]):
    """Agreement with dense against the kept fraction (left) and speed against the kept fraction (right)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.8))
    for m, g in sweep.groupby("method", sort=False):
        ax1.plot(g["kept"], g["agree trace"], "o-", color=color(m), label=m)
    ax1.plot([1.0], [1.0], "o", color=color("dense"), ms=8, label="dense")
    ax1.set_xlabel("kept fraction of FFN neurons")
    ax1.set_ylabel("agreement with dense")
    ax1.legend(loc="lower right", fontsize=9)
    ks = sorted(bounds)
    ax2.plot(ks, [bounds[k] for k in ks], "k--", label="FLOP bound, decode step")
    kf = sorted(ffn_speed)
    ax2.plot(kf, [ffn_speed[k] for k in kf], "o-", color=color("SparseInfer"), label="measured, one FFN block")
    ax2.plot(kf, [1 / k for k in kf], ":", color="grey", label="1/kept (FFN FLOPs)")
    ax2.axhline(1, color="grey", lw=0.8)
    ax2.set_xlabel("kept fraction of FFN neurons")
    ax2.set_ylabel("speed-up over dense (x)")
    ax2.set_yscale("log")
    ax2.legend(loc="upper right", fontsize=9)
    fig.tight_layout()
    return fig
