"""The chapter's figures."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from minirepro.core import color

SELECTIVE = ("EPIC", "CacheBlend", "RelayCaching", "random tokens")


def plot_deviation(profile_k: np.ndarray, profile_v: np.ndarray, window: tuple[int, int]) -> Figure:
    """Heatmaps of the calibration deviation ``1 - cos`` (keys, values) over layers x positions of ``S``."""
    fig, axes = plt.subplots(2, 1, figsize=(7.5, 4.6), sharex=True, constrained_layout=True)
    vmax = float(np.nanmax([np.nanmax(profile_k), np.nanmax(profile_v)]))
    for ax, prof, name in zip(axes, (profile_k, profile_v), ("keys", "values")):
        im = ax.imshow(prof, aspect="auto", cmap="magma", vmin=0, vmax=vmax, interpolation="nearest")
        ax.grid(False)
        ax.set_ylabel(f"layer ({name})")
        ax.set_yticks(range(prof.shape[0]))
        ax.axhspan(window[0] - 0.5, window[1] + 0.5, fill=False, ec="C2", lw=1.5, ls="--")
    axes[-1].set_xlabel("position in A's trace S (tokens after B's prefix)")
    fig.colorbar(im, ax=axes, label="1 - cos(reused, fresh)")
    fig.suptitle("Where A's cached KV deviates from B's full prefill (dashed: RelayCaching's window)",
                 fontsize=10)
    return fig


def plot_tradeoff(sweep: pd.DataFrame, rows: pd.DataFrame) -> Figure:
    """Next-token KL and top-1 agreement with full prefill against the reuse rate, per arm."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6), constrained_layout=True)
    for ax, col, lab in zip(axes, ("kl_q", "agree_q"),
                            ("next-token KL to full prefill (nats)", "top-1 agreement with full prefill")):
        for arm in SELECTIVE:
            g = sweep[sweep.arm == arm].groupby("share").mean(numeric_only=True).sort_values("reuse")
            style = "o--" if arm == "random tokens" else "o-"
            ax.plot(g["reuse"], g[col], style, color=color(arm), label=arm)
        for arm, mk in (("naive reuse", "s"), ("full prefill", "D")):
            g = rows[rows.arm == arm][["reuse", col]].mean()
            ax.plot([g["reuse"]], [g[col]], mk, color=color(arm), ms=8, label=arm)
        ax.axvline(0.8, color="0.6", ls=":", lw=1)
        ax.set_xlabel("reuse rate of A's KV")
        ax.set_ylabel(lab)
    axes[0].legend(frameon=False, fontsize=9, loc="upper left")
    fig.suptitle("Fidelity to full prefill on B's question tokens (reuse: share of S's "
                 "layer-token entries kept)", fontsize=10)
    return fig


def plot_time(sweep_time: pd.DataFrame) -> Figure:
    """Measured prefill time of B's context (ms) and the FLOP prediction, against the reuse rate."""
    fig, ax = plt.subplots(figsize=(7, 3.4), constrained_layout=True)
    full = sweep_time[sweep_time.share.isna()]
    rel = sweep_time[sweep_time.share.notna()]
    t_full = full.groupby("item")["seconds"].first()
    f_full = full.groupby("item")["flops"].first()
    rel = rel.assign(t_rel=rel.seconds / rel.item.map(t_full), f_rel=rel.flops / rel.item.map(f_full))
    g = rel.groupby("share").mean(numeric_only=True).sort_values("reuse")
    ax.plot(g["reuse"], g["t_rel"], "o-", color=color("RelayCaching"), label="measured time")
    ax.plot(g["reuse"], g["f_rel"], "--", color="0.4", label="FLOPs")
    ax.scatter(rel["reuse"], rel["t_rel"], s=10, color=color("RelayCaching"), alpha=0.35)
    ax.axhline(1.0, color="0.6", lw=1, ls=":")
    ax.set_xlabel("reuse rate of A's KV")
    ax.set_ylabel("RelayCaching / full prefill")
    ax.legend(frameon=False, loc="lower left")
    ax.set_title(f"B's prefill cost (full prefill: {1e3 * t_full.mean():.0f} ms on one thread)",
                 fontsize=10)
    return fig


def plot_profile(layer_means: np.ndarray, window: tuple[int, int]) -> Figure:
    """Per-layer mean value deviation ``(units, L)``: the mean over units, a one-sd band, the window shaded."""
    lm = np.asarray(layer_means, dtype=float)
    if lm.ndim != 2:
        raise ValueError(f"layer_means must be (units, layers), got shape {lm.shape}")
    mu, sd = lm.mean(0), lm.std(0)
    x = np.arange(lm.shape[1])
    fig, ax = plt.subplots(figsize=(7, 3.2), constrained_layout=True)
    ax.axvspan(window[0] - 0.5, window[1] + 0.5, color=color("RelayCaching"), alpha=0.12, lw=0)
    ax.fill_between(x, mu - sd, mu + sd, color="0.5", alpha=0.25, lw=0)
    ax.plot(x, mu, "o-", ms=3, color="0.2")
    ax.set_xlabel("layer")
    ax.set_ylabel("mean 1 - cos (values)")
    ax.set_title("Deviation of A's reused values from B's full prefill, per layer", fontsize=10)
    return fig
