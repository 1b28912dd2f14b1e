"""The chapter's figures."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from minirepro.core.stats import seed_summary
from minirepro.papers.tasm.data import GRID, ITEM, N_PATCH, PATCH

COLORS = {"random": "#BCBD22", "H2O": "#D55E00", "SnapKV": "#E69F00", "ToMe": "#009E73",
          "TASM (prune)": "#CC79A7", "TASM (static core)": "#56B4E9", "TASM": "#0072B2",
          "TASM (random gate)": "#8C6BB1", "SnapKV (sees query)": "#7F7F7F", "full context": "#000000"}


def plot_accuracy_vs_ratio(table: pd.DataFrame, chance: float) -> Figure:
    """Accuracy (mean over seeds, 95% t interval) against the kept fraction, per method and format."""
    fmts = list(dict.fromkeys(table["format"]))
    fig, axes = plt.subplots(1, len(fmts), figsize=(7.5, 3.6), sharey=True, squeeze=False)
    s = seed_summary(table.assign(key=list(zip(table["format"], table.method, table.ratio))),
                     "key", "accuracy")
    s = s.assign(format=[k[0] for k in s.index], method=[k[1] for k in s.index],
                 ratio=[k[2] for k in s.index]).reset_index(drop=True)
    for ax, fmt in zip(axes[0], fmts):
        sub = s[s["format"] == fmt]
        for m, col in COLORS.items():
            d = sub[sub.method == m].sort_values("ratio")
            if d.empty or m == "full context":
                continue
            ls = "--" if m == "SnapKV (sees query)" else "-"
            ax.errorbar(d.ratio * 100, d["accuracy mean"], yerr=[d["accuracy mean"] - d["accuracy lo"].fillna(d["accuracy mean"]),
                        d["accuracy hi"].fillna(d["accuracy mean"]) - d["accuracy mean"]],
                        color=col, ls=ls, marker="o", ms=4, lw=1.4, capsize=2, label=m)
        full = sub[sub.method == "full context"]["accuracy mean"].iloc[0]
        ax.axhline(full, color="black", lw=1, ls=":", label="full context")
        ax.axhline(chance, color="grey", lw=0.8, ls="-.", label="chance")
        ax.set_title(fmt, fontsize=10)
        ax.set_xlabel("kept fraction of the demo cache (%)")
    axes[0, 0].set_ylabel("query accuracy")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", fontsize=8, frameon=False, bbox_to_anchor=(0.99, 0.5))
    fig.tight_layout()
    return fig


def plot_kept_patches(demo_images: np.ndarray, demo_labels: np.ndarray, kept: dict, ratio: float,
                      layer: int, methods: tuple[str, ...], fmt_label_slot: int = N_PATCH) -> Figure:
    """The first episode's demonstrations (columns) with the tokens each method (rows) keeps at
    one layer drawn as blue boxes on the patches; a kept label token is shown by a bold label."""
    n = len(demo_images)
    fig, axes = plt.subplots(len(methods), n, figsize=(7.5, 1.45 * len(methods)), squeeze=False)
    for r, m in enumerate(methods):
        idx = set(kept[(ratio, m)][layer])
        for c in range(n):
            ax = axes[r, c]
            ax.imshow(demo_images[c], cmap="gray_r", vmin=0, vmax=1)
            for p in range(N_PATCH):
                if c * ITEM + p in idx:
                    y, x = divmod(p, GRID)
                    ax.add_patch(Rectangle((x * PATCH - 0.5, y * PATCH - 0.5), PATCH, PATCH, fill=True,
                                           alpha=0.45, color="#0072B2", lw=0))
            lab_kept = c * ITEM + fmt_label_slot in idx
            ax.set_title(f"label {int(demo_labels[c])}" + (" (kept)" if lab_kept else ""), fontsize=8,
                         fontweight="bold" if lab_kept else "normal")
            ax.set_xticks([])
            ax.set_yticks([])
        axes[r, 0].set_ylabel(m, fontsize=8, rotation=0, ha="right", va="center")
    fig.tight_layout()
    return fig


def plot_accuracy_vs_memory(table: pd.DataFrame, n_tokens: int, fmt: str) -> Figure:
    """Accuracy against cache memory per layer (% of the full demo cache) for one format: the
    GPU-side cache (TASM: Core plus the tokens fetched when the gate opens), and for TASM also
    Core + Latent Bank (hollow markers)."""
    sub = table[table["format"] == fmt].copy()
    sub["gpu %"] = 100 * sub.gpu_slots / n_tokens
    sub["total %"] = 100 * (sub.gpu_slots + sub.bank_slots) / n_tokens
    g = sub.groupby(["method", "ratio"])[["accuracy", "gpu %", "total %"]].mean().reset_index()
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    for m, col in COLORS.items():
        d = g[g.method == m].sort_values("ratio")
        if d.empty or m == "full context":
            continue
        ax.plot(d["gpu %"], d.accuracy, marker="o", ms=4, color=col, ls="--" if "sees" in m else "-", label=m)
        if m == "TASM":
            ax.plot(d["total %"], d.accuracy, marker="o", ms=5, mfc="none", color=col, ls=":",
                    label="TASM, Core + Latent Bank")
    full = g[g.method == "full context"].accuracy.mean()
    ax.scatter([100], [full], color="black", marker="*", s=80, zorder=3, label="full context")
    ax.set_xlabel("cache memory per layer (% of the full demonstration cache)")
    ax.set_ylabel("query accuracy")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig


def plot_training_curve(curve: dict) -> Figure:
    """The artifact's training loss and running query accuracy per format against Adam steps."""
    every = curve["every"]
    steps = every * np.arange(1, len(curve["loss"]) + 1)
    fig, (a, b) = plt.subplots(1, 2, figsize=(7.5, 2.8))
    a.plot(steps, curve["loss"], color="#0072B2")
    a.set_xlabel("Adam step")
    a.set_ylabel("training loss (nats)")
    for key, col in (("acc image-first", "#0072B2"), ("acc label-first", "#D55E00")):
        if key in curve:
            b.plot(steps, curve[key], color=col, label=key.removeprefix("acc "))
    b.axhline(0.2, color="grey", lw=0.8, ls="-.", label="chance")
    b.set_xlabel("Adam step")
    b.set_ylabel("training query accuracy")
    b.legend(fontsize=8, loc="upper left", frameon=False)
    fig.tight_layout()
    return fig


PAIRS = {"TASM merge - prune": ("TASM (static core)", "TASM (prune)"), "ToMe - H2O": ("ToMe", "H2O"),
         "TASM merge - random": ("TASM (static core)", "random"), "ToMe - random": ("ToMe", "random")}


def merge_minus_prune(table: pd.DataFrame) -> pd.DataFrame:
    """Paired accuracy differences per (format, kept fraction, seed) for the merge-vs-prune pairs
    and each merging method against random pruning (:data:`PAIRS`, where both are in ``table``):
    columns format, ratio, seed, pair, difference."""
    wide = table.pivot_table(index=["format", "ratio", "seed"], columns="method", values="accuracy")
    rows = [pd.DataFrame({"pair": name, "difference": wide[m] - wide[b]}).reset_index()
            for name, (m, b) in PAIRS.items() if m in wide and b in wide]
    return pd.concat(rows, ignore_index=True).dropna(subset=["difference"])


def plot_merge_vs_prune(table: pd.DataFrame, min_effect: float) -> Figure:
    """Merging minus pruning (accuracy, mean over seeds with 95% t intervals) against the kept
    fraction, one panel per format (setting), for TASM's merge vs its pruning ablation and ToMe
    vs H2O (solid), and each merging method vs random pruning, the reference (dashed); the shaded
    band is +- ``min_effect``."""
    d = merge_minus_prune(table)
    fmts = list(dict.fromkeys(d["format"]))
    s = seed_summary(d.assign(key=list(zip(d["format"], d.pair, d.ratio))), "key", "difference")
    s = s.assign(format=[k[0] for k in s.index], pair=[k[1] for k in s.index],
                 ratio=[k[2] for k in s.index]).reset_index(drop=True)
    fig, axes = plt.subplots(1, len(fmts), figsize=(7.5, 3.3), sharey=True, squeeze=False)
    cols = {"TASM merge - prune": (COLORS["TASM"], "-"), "ToMe - H2O": (COLORS["ToMe"], "-"),
            "TASM merge - random": (COLORS["TASM"], "--"), "ToMe - random": (COLORS["ToMe"], "--")}
    for ax, fmt in zip(axes[0], fmts):
        ax.axhspan(-min_effect, min_effect, color="grey", alpha=0.15, lw=0, label=f"+-{min_effect} (min effect)")
        ax.axhline(0, color="black", lw=0.8)
        for pair, (col, ls) in cols.items():
            g = s[(s["format"] == fmt) & (s.pair == pair)].sort_values("ratio")
            if g.empty:
                continue
            m = g["difference mean"]
            ax.errorbar(g.ratio * 100, m, yerr=[m - g["difference lo"].fillna(m), g["difference hi"].fillna(m) - m],
                        color=col, ls=ls, marker="o", ms=4, lw=1.4, capsize=2, label=pair)
        ax.set_title(fmt, fontsize=10)
        ax.set_xlabel("kept fraction of the demo cache (%)")
    axes[0, 0].set_ylabel("accuracy difference")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", fontsize=8, frameon=False, bbox_to_anchor=(0.99, 0.5))
    fig.tight_layout()
    return fig
