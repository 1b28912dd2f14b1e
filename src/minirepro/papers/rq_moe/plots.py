"""The chapter's figures (book colours via ``core.color``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib import ticker

from minirepro.core import color
from minirepro.core.stats import seed_summary
from minirepro.papers.rq_moe.experiment import METHODS

MARKERS = {"RQ-MoE": "o", "QINCo": "s", "RQ": "^", "RQ (beam 8)": "v", "PQ": "D", "OPQ": "P",
           "LSQ": "X"}


def _log_ticks(ax: plt.Axes) -> None:
    """Readable ticks on a log y axis: 1-2-5 steps printed as plain numbers."""
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def plot_code_size(curve: pd.DataFrame, dataset: str) -> plt.Figure:
    """MSE (log scale) and R@1 against code size in bits, one line per method."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name in METHODS:
        sub = curve[curve.method == name].sort_values("bits")
        if sub.empty:
            continue
        style = dict(color=color(name), marker=MARKERS.get(name, "o"), label=name,
                     lw=2.2 if name in ("RQ-MoE", "QINCo") else 1.2)
        axes[0].plot(sub.bits, sub.mse, **style)
        axes[1].plot(sub.bits, sub["R@1"], **style)
    axes[0].set(xlabel="code size (bits per vector)", ylabel="MSE (sum of squares per vector)",
                yscale="log", title=f"Reconstruction error ({dataset})")
    axes[1].set(xlabel="code size (bits per vector)", ylabel="R@1 (fraction of queries)",
                title=f"Nearest-neighbour recall ({dataset})")
    _log_ticks(axes[0])
    axes[1].legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    plt.close(fig)  # shown once, by the cell's value, whatever the backend
    return fig


def plot_relative_mse(df: pd.DataFrame) -> plt.Figure:
    """Per dataset: each method's MSE divided by plain RQ's on the same seed (mean and std)."""
    datasets = list(dict.fromkeys(df.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.8), squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        sub = df[df.dataset == ds]
        base = sub[sub.method == "RQ"].set_index("seed").mse
        rel = sub.assign(rel=sub.mse / sub.seed.map(base))
        stats = seed_summary(rel, "method", "rel").reindex(
            [m for m in METHODS if m in set(rel.method)])
        ax.barh(stats.index, stats["rel mean"], xerr=stats["rel std"].fillna(0),
                color=[color(m) for m in stats.index])
        ax.axvline(1.0, color="black", lw=0.8, ls="--")
        ax.set(xlabel="MSE relative to plain RQ (beam 1)", title=ds)
        ax.invert_yaxis()
    fig.tight_layout()
    plt.close(fig)  # shown once, by the cell's value, whatever the backend
    return fig


def plot_decode_time(timings: dict[int, pd.DataFrame]) -> plt.Figure:
    """Decode time (ms) against steps M, one panel per batch size, and the sequential depth.

    ``timings`` maps a batch size (codes per decode call) to a ``decode_time_curve`` table;
    panels run two per row.
    """
    n = len(timings) + 1
    fig, grid = plt.subplots((n + 1) // 2, 2, figsize=(9, 3.6 * ((n + 1) // 2)), squeeze=False)
    axes = grid.ravel()[:n]
    for ax in grid.ravel()[n:]:
        ax.remove()
    styles = (("QINCo", "-"), ("RQ-MoE", "-"), ("RQ-MoE (serial)", ":"))
    for ax, (n_codes, timing) in zip(axes, timings.items()):
        for name, ls in styles:
            sub = timing[timing.method == name].sort_values("M")
            c = color("RQ-MoE" if name.startswith("RQ-MoE") else name)
            ax.plot(sub.M, 1e3 * sub.seconds, ls=ls, marker="o", color=c, label=name)
        ax.set(xlabel="steps M", ylabel="median decode time (ms)", xscale="log", yscale="log",
               title=f"{n_codes} codes per batch (this CPU)")
    timing = next(iter(timings.values()))
    for name, ls in styles:
        sub = timing[timing.method == name].sort_values("M")
        c = color("RQ-MoE" if name.startswith("RQ-MoE") else name)
        axes[-1].plot(sub.M, sub.depth, ls=ls, marker="o", color=c, label=name)
    axes[-1].set(xlabel="steps M", ylabel="dependent matrix products", xscale="log",
                 title="Sequential depth (bound)")
    ticks = sorted(set(timing.M))
    for ax in axes[:-1]:
        _log_ticks(ax)
    for ax in axes:
        ax.set_xticks(ticks, [str(m) for m in ticks])
        ax.minorticks_off()
        ax.legend(fontsize=8)
    fig.tight_layout()
    plt.close(fig)  # shown once, by the cell's value, whatever the backend
    return fig


def plot_training_curves(curves: pd.DataFrame) -> plt.Figure:
    """Training loss (Eq. (rq-moe-eq-loss)) against Adam step, one panel per dataset.

    ``curves`` is long format (method, dataset, seed, step, loss), e.g. the artifact's
    stored block means; the line is the mean over seeds, the band their range.
    """
    datasets = list(dict.fromkeys(curves.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(9, 3.8), squeeze=False)
    for ax, ds in zip(axes[0], datasets):
        for name in ("QINCo", "RQ-MoE"):
            sub = curves[(curves.dataset == ds) & (curves.method == name)]
            if sub.empty:
                continue
            g = sub.groupby("step").loss
            mean, lo, hi = g.mean(), g.min(), g.max()
            ax.plot(mean.index, mean.values, color=color(name), lw=1.8, label=f"{name} (mean of seeds)")
            ax.fill_between(mean.index, lo.values, hi.values, color=color(name), alpha=0.2, lw=0)
        ax.set(xlabel="Adam step", ylabel="training loss (block mean)", title=ds)
        ax.legend(fontsize=9, loc="upper right")
    fig.tight_layout()
    plt.close(fig)  # shown once, by the cell's value, whatever the backend
    return fig
