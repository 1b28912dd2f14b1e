"""The chapter's figures (one colour per method, from ``minirepro.core.color``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from minirepro.core import color


def quality_bars(quality: pd.DataFrame):
    """Perplexity and accuracy per method: bars are seed means, dots each seed."""
    methods = list(dict.fromkeys(quality["method"]))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, col, label in zip(axes, ("ppl", "accuracy"), ("continuation perplexity", "answer accuracy")):
        g = quality.groupby("method", sort=False)[col]
        ax.bar(range(len(methods)), [g.mean()[m] for m in methods],
               color=[color(m) for m in methods], alpha=0.85, label=None)
        for i, m in enumerate(methods):
            v = quality.loc[quality["method"] == m, col].to_numpy()
            ax.plot(np.full(len(v), i), v, "_", color="k", ms=14, mew=1.5)
        ax.set_xticks(range(len(methods)), methods, rotation=35, ha="right")
        ax.set_ylabel(label)
    dense = quality.loc[quality["method"] == "dense", "ppl"].mean()
    axes[0].axhline(dense, color=color("dense"), lw=1, ls="--", label="dense")
    axes[0].set_ylim(bottom=max(0.0, 0.8 * quality["ppl"].min()))
    axes[0].legend(loc="upper left")
    fig.tight_layout()
    return fig


def overlap_figure(run: dict):
    """Stability Jaccards (self, other, random) and the topic-by-topic Jaccard heatmap."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [1, 1.2]})
    s = run["stability"]
    names = ["self", "other"]
    ax1.bar([0, 1], [s["self"], s["other"]], color=[color("SparseInfer"), "#7F7F7F"],
            label="measured (mean over prompts)")
    ax1.axhline(s["random"], color=color("random"), ls="--", label="random sets")
    ax1.set_xticks([0, 1], ["prefix vs own\ncontinuation", "prefix vs other\nprompt's continuation"])
    ax1.set_ylabel("Jaccard of core sets")
    ax1.set_ylim(0, 1)
    ax1.legend(loc="upper right")
    M, topics = run["topic_matrix"]
    im = ax2.imshow(M, cmap="viridis", vmin=np.nanmin(M), vmax=np.nanmax(M))
    ax2.set_xticks(range(len(topics)), topics, rotation=45, ha="right")
    ax2.set_yticks(range(len(topics)), topics)
    ax2.grid(False)
    fig.colorbar(im, ax=ax2, label="mean Jaccard")
    ax2.set_title("core-set overlap by topic")
    del names
    fig.tight_layout()
    return fig


def sweep_figure(sweep: pd.DataFrame, bounds: dict[float, float], ffn_speed: dict[float, float]):
    """Quality vs kept fraction (left) and speed vs kept fraction (right)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for m, g in sweep[sweep["method"] != "dense"].groupby("method", sort=False):
        ax1.plot(g["kept"], g["ppl"], "o-", color=color(m), label=m)
    d = sweep[sweep["method"] == "dense"]
    ax1.plot(d["kept"], d["ppl"], "o", color=color("dense"), ms=8, label="dense")
    ax1.set_xlabel("kept fraction of FFN neurons (sparsified layers)")
    ax1.set_ylabel("continuation perplexity")
    ax1.legend()
    ks = sorted(bounds)
    ax2.plot(ks, [bounds[k] for k in ks], "k--", label="FLOP bound (whole decode step)")
    kf = sorted(ffn_speed)
    ax2.plot(kf, [ffn_speed[k] for k in kf], "o-", color=color("SparseInfer"),
             label="measured, one FFN block")
    ax2.plot(kf, [1 / k for k in kf], ":", color="grey", label="FLOP ratio of the block, 1/kept")
    ax2.axhline(1, color="grey", lw=0.8)
    ax2.set_xlabel("kept fraction of FFN neurons")
    ax2.set_ylabel("speed-up over dense (x)")
    ax2.legend()
    fig.tight_layout()
    return fig
