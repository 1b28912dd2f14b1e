"""The chapter's figures (each returns a matplotlib Figure)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from minirepro.core.plotting import PALETTE
from minirepro.papers.reward_shaping.data import BIASES

ARM_COLOR = {"raw": PALETTE[1], "shaped (low)": PALETTE[0], "shaped (all)": PALETTE[5],
             "uncleaned (low)": PALETTE[3], "shaped (length, position)": PALETTE[2]}
ARM_LABEL = {"raw": "raw RM", "shaped (low)": "nulled: length, position, hedge",
             "shaped (all)": "nulled: all four probes", "uncleaned (low)": "uncleaned probes (ablation)",
             "shaped (length, position)": "nulled: length, position"}


def plot_bias_rates(per_seed: pd.DataFrame, arms: tuple[str, ...] = ("raw", "shaped (low)", "shaped (all)"),
                    biases: tuple[str, ...] = BIASES + ("length_ood",)):
    """Each bias's preference rate (share of matched pairs where the biased text wins) per arm,
    mean and range over seeds; 0.5 is neutral."""
    fig, ax = plt.subplots(figsize=(7.6, 3.8))
    x = np.arange(len(biases))
    width = 0.8 / len(arms)
    for i, arm in enumerate(arms):
        sub = per_seed[per_seed.arm == arm]
        vals = np.array([[sub[f"rate/{b}"].mean(), sub[f"rate/{b}"].min(), sub[f"rate/{b}"].max()]
                         for b in biases])
        xs = x + (i - (len(arms) - 1) / 2) * width
        c = ARM_COLOR[arm]
        ax.bar(xs, vals[:, 0] - 0.5, width, bottom=0.5, color=c, label=ARM_LABEL[arm])
        ax.errorbar(xs, vals[:, 0], yerr=[vals[:, 0] - vals[:, 1], vals[:, 2] - vals[:, 0]],
                    fmt="none", ecolor="0.2", lw=1, capsize=2)
    ax.axhline(0.5, color="0.3", lw=1, ls="--")
    ax.set_xticks(x, [b.replace("length_ood", "length\n(new fillers)") for b in biases])
    ax.set_ylabel("biased text preferred (share of pairs)")
    ax.set_ylim(0, 1)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=3, fontsize=9)
    fig.tight_layout()
    return fig


def plot_probe_curve(curve: pd.DataFrame, raw: pd.DataFrame):
    """Mean low-complexity bias strength and RewardBench-style accuracy against probe-set size."""
    g = curve.groupby("n_probe")
    fig, axes = plt.subplots(1, 2, figsize=(7.6, 3.2))
    for ax, col, label in ((axes[0], "low_strength", "bias strength |rate - 0.5|"),
                           (axes[1], "accuracy", "correct-over-wrong accuracy")):
        m, lo, hi = g[col].mean(), g[col].min(), g[col].max()
        ax.fill_between(m.index, lo, hi, color=ARM_COLOR["shaped (low)"], alpha=0.2, lw=0)
        ax.plot(m.index, m.values, "o-", color=ARM_COLOR["shaped (low)"], label="shaped")
        ref = (raw[[f"strength/{b}" for b in ("length", "position", "hedge")]].mean(axis=1).mean()
               if col == "low_strength" else raw[col].mean())
        ax.axhline(ref, color=ARM_COLOR["raw"], ls="--", label="raw RM")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("contrast pairs per bias")
        ax.set_ylabel(label)
    axes[1].axhline(0.5, color="0.5", ls=":", label="chance")
    axes[1].legend(fontsize=9, loc="lower right")
    fig.tight_layout()
    return fig


def plot_probe_accuracy(acc: pd.DataFrame, cols: tuple[str, ...] = BIASES + ("correctness",)):
    """Held-out pair accuracy of each probe direction (share of matched pairs whose text with
    the attribute projects higher), per seed; 0.5 means the direction does not read the feature."""
    fig, ax = plt.subplots(figsize=(7.0, 2.8))
    for i, c in enumerate(cols):
        v = acc[c].to_numpy()
        ax.scatter(np.full(v.size, i) + np.linspace(-0.12, 0.12, v.size), v, color=PALETTE[0], s=25, zorder=3)
        ax.plot([i - 0.25, i + 0.25], [v.mean()] * 2, color=PALETTE[1], lw=2.5)
    ax.axhline(0.5, color="0.3", ls="--", lw=1)
    ax.set_xticks(range(len(cols)), list(cols))
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("held-out pair accuracy")
    fig.tight_layout()
    return fig


def plot_loss_curves(curves: list[list[float]]):
    """Bradley-Terry training loss per seed (nats per pair)."""
    fig, ax = plt.subplots(figsize=(7.0, 2.8))
    for c in curves:
        ax.plot(np.arange(1, len(c) + 1), c, color=ARM_COLOR["raw"], alpha=0.6, lw=1)
    ax.set_xlabel("full-batch Adam step")
    ax.set_ylabel("BT loss (nats / pair)")
    fig.tight_layout()
    return fig
