"""The chapter's figures: aggregation error per round, accuracy against bytes, the λ sweep."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from minirepro.core import distinct_colors
from minirepro.papers.uniflow.strategies import METHODS


def _main(table: pd.DataFrame) -> pd.DataFrame:
    return table[table.arm == "main"]


def plot_error(table: pd.DataFrame) -> plt.Figure:
    """Relative aggregation error (Eq. (uniflow-eq-error)) per round: mean over seeds, seed range shaded;
    right panel: the clients' A drift."""
    t = _main(table)
    t = t[t["round"] > 0]
    methods = [m for m in METHODS if m in set(t.method)]
    cols = distinct_colors(methods)
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4), constrained_layout=True)
    for ax, col, ylab in ((axes[0], "error", "relative aggregation error"),
                          (axes[1], "drift", "A drift between clients")):
        for i, m in enumerate(methods):
            g = t[t.method == m].groupby("round")[col]
            mean, lo, hi = g.mean(), g.min(), g.max()
            ax.plot(mean.index, mean.to_numpy(), marker="os^vDx"[i % 6], ms=4, color=cols[m], label=m)
            ax.fill_between(mean.index, lo.to_numpy(), hi.to_numpy(), color=cols[m], alpha=0.15)
        ax.set_xlabel("round")
        ax.set_ylabel(ylab)
        ax.set_ylim(bottom=-0.01)
    axes[0].set_title("||ΔW_agg − ΔW*|| / ||ΔW*||", fontsize=10)
    axes[1].set_title("mean ||A_i − A+|| / ||A+||", fontsize=10)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right center", fontsize=9)
    return fig


def plot_accuracy_vs_bytes(table: pd.DataFrame) -> plt.Figure:
    """Global test accuracy against cumulative bytes sent (up + down, all clients), mean over seeds."""
    t = _main(table).copy()
    t["cum"] = t.groupby("run")[["up", "down"]].cumsum().sum(axis=1) / 1e6
    t = t.dropna(subset=["accuracy"])
    methods = [m for m in METHODS if m in set(t.method)]
    cols = distinct_colors(methods)
    fig, ax = plt.subplots(figsize=(7.5, 3.6), constrained_layout=True)
    for i, m in enumerate(methods):
        g = t[t.method == m].groupby("round")[["cum", "accuracy"]]
        mean, sd = g.mean(), g.std().fillna(0.0)
        ax.errorbar(mean["cum"], mean["accuracy"], yerr=sd["accuracy"], marker="os^vDx"[i % 6], ms=4,
                    capsize=2, color=cols[m], label=m)
    ax.set_xscale("log")
    ax.set_xlabel("cumulative bytes sent, all clients (MB, log scale)")
    ax.set_ylabel("test accuracy (mean of clients)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    return fig


def plot_lambda(table: pd.DataFrame, lam_main: float) -> plt.Figure:
    """FedA2-LoRA's final accuracy and mean aggregation error against the relative ridge weight
    (one dot per seed, line through the means); FedIT's error as a dashed reference."""
    fa = table[(table.method == "FedA2-LoRA") & table.arm.isin(["main", "lambda"])]
    seeds = sorted(set(table[table.arm == "lambda"].seed)) or sorted(set(fa.seed))
    fa = fa[fa.seed.isin(seeds)]
    last = fa[fa["round"] == fa["round"].max()]
    err = fa[fa["round"] > 0].groupby(["lam_rel", "seed"])["error"].mean().reset_index()
    fedit = table[(table.method == "FedIT") & (table.arm == "main") & table.seed.isin(seeds)]
    fedit_err = fedit[fedit["round"] > 0]["error"].mean()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), constrained_layout=True)
    for ax, df, col, ylab in ((axes[0], last, "accuracy", "final test accuracy"),
                              (axes[1], err, "error", "mean relative aggregation error")):
        ax.scatter(df["lam_rel"], df[col], s=14, color="0.5", label="one seed")
        mean = df.groupby("lam_rel")[col].mean()
        ax.plot(mean.index, mean.to_numpy(), color="C0", marker="o", label="mean over seeds")
        ax.axvline(lam_main, color="0.6", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("relative ridge weight λ_rel")
        ax.set_ylabel(ylab)
    if np.isfinite(fedit_err):
        axes[1].axhline(fedit_err, color="C3", ls="--", lw=1, label="FedIT (λ-free)")
    axes[1].legend(fontsize=8, loc="upper left")
    return fig


__all__ = ["plot_accuracy_vs_bytes", "plot_error", "plot_lambda"]
