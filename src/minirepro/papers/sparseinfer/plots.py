"""The chapter's figures (one colour per method, from ``minirepro.core.color``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from minirepro.core import color
from minirepro.core.stats import t_interval


def plot_quality(nll: dict[str, np.ndarray], agree: dict[str, np.ndarray]):
    """Left: the decoded NLL above dense per method (mean over units, 95% t interval); right: the
    share of decoded positions whose top token is the dense model's."""
    methods = [m for m in nll if m != "dense"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.8))
    for j, m in enumerate(methods):
        iv = t_interval(nll[m] - nll["dense"], 0.95)
        ax1.bar(j, iv.estimate, color=color(m), alpha=0.85)
        ax1.errorbar(j, iv.estimate, yerr=[[iv.estimate - iv.low], [iv.high - iv.estimate]], color="k", capsize=3)
        ax2.bar(j, float(np.mean(agree[m])), color=color(m), alpha=0.85)
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(methods)), methods, rotation=40, ha="right", fontsize=9)
    ax1.set_yscale("symlog", linthresh=0.05)
    ax1.set_ylabel("NLL above dense (nats/token)")
    ax2.set_ylabel("agreement with dense's top token")
    ax2.set_ylim(0, 1)
    fig.tight_layout()
    return fig


def plot_overlap(stab: dict, M: np.ndarray, topics: list[str]):
    """Left: Jaccard of a prompt's core set with continuations' core sets (mean, 95% interval over
    units) and two random sets (dashed); right: the topic-by-topic mean Jaccard of prompt core sets."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.8), gridspec_kw={"width_ratios": [1, 1.2]})
    cols = (("self", "own\ncontinuation", color("SparseInfer")), ("same topic", "same-topic\nprompt's", "#4C72B0"),
            ("other topic", "other-topic\nprompt's", "#7F7F7F"))
    for j, (key, _label, c) in enumerate(cols):
        iv = t_interval(np.asarray(stab[key]), 0.95)
        ax1.bar(j, iv.estimate, color=c, alpha=0.85)
        ax1.errorbar(j, iv.estimate, yerr=[[iv.estimate - iv.low], [iv.high - iv.estimate]], color="k", capsize=3)
    ax1.axhline(stab["random"], color=color("random"), ls="--", label="two random sets")
    ax1.set_xticks(range(len(cols)), [c[1] for c in cols], fontsize=9)
    ax1.set_ylabel("Jaccard with the prompt's core set")
    ax1.set_ylim(0, 1)
    ax1.legend(loc="upper right", fontsize=9)
    im = ax2.imshow(M, cmap="viridis")
    ax2.set_xticks(range(len(topics)), topics, rotation=45, ha="right", fontsize=9)
    ax2.set_yticks(range(len(topics)), topics, fontsize=9)
    ax2.grid(False)
    fig.colorbar(im, ax=ax2, label="mean Jaccard")
    ax2.set_title("prompt core sets by topic", fontsize=10)
    fig.tight_layout()
    return fig


def plot_sweep(sweep: pd.DataFrame, dense_nll: float, bounds: dict[float, float], speed: float, kept: float):
    """Left: decoded NLL against the kept fraction per method (dense dashed); right: the FLOP bound
    of a decoding step against the kept fraction and the measured speed-up at ``kept``."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.8))
    for m, g in sweep.groupby("method", sort=False):
        ax1.plot(g["kept"], g["nll"], "o-", color=color(m), label=m)
    ax1.axhline(dense_nll, color=color("dense"), ls="--", label="dense")
    ax1.set_xlabel("kept fraction of FFN neurons")
    ax1.set_ylabel("decoded NLL (nats/token)")
    ax1.legend(loc="upper right", fontsize=8)
    ks = sorted(bounds)
    ax2.plot(ks, [bounds[k] for k in ks], "k--", label="FLOP bound, decode step")
    ax2.plot([kept], [speed], "o", color=color("SparseInfer"), ms=8, label="measured (median)")
    ax2.axhline(1, color="grey", lw=0.8)
    ax2.set_xlabel("kept fraction of FFN neurons")
    ax2.set_ylabel("decode speed-up over dense (x)")
    ax2.legend(loc="upper right", fontsize=9)
    fig.tight_layout()
    return fig
