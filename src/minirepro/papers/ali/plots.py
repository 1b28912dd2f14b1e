"""Figures of the ALI chapter: relit grids, quality by material, the probe trade-off, loss curves."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from minirepro.core import color
from minirepro.papers.ali.experiment import Pairs
from minirepro.papers.ali.render import MATERIALS
from minirepro.papers.ali.train import ARMS, SELF_SUP, Models

SHOWN = [f"{a} II" for a in ARMS] + [f"{SELF_SUP} III"]


def _rgb(t: torch.Tensor) -> np.ndarray:
    return t.clamp(0, 1).permute(1, 2, 0).numpy()


@torch.no_grad()
def plot_relit_grid(models: Models, pairs: dict[str, Pairs], n: int = 3) -> Figure:
    """Input, reference, target and every arm's output for ``n`` triplets of each domain."""
    cols = ["input (copy)", "reference", "target"] + [k.rsplit(" ", 1)[0] for k in SHOWN]
    rows = [(dom, i) for dom in pairs for i in range(n)]
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(8.0, 1.2 * len(rows) + 0.6))
    for r, (dom, i) in enumerate(rows):
        p = pairs[dom]
        c, ref = p.content[i:i + 1], p.reference[i:i + 1]
        ims = [p.content[i], p.reference[i], p.target[i]] + [models[k].relight(c, ref)[0] for k in SHOWN]
        for j, im in enumerate(ims):
            ax = axes[r, j]
            ax.imshow(_rgb(im), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(cols[j].replace(" + ", " +\n").replace(" (", "\n("), fontsize=9)
            if j == 0:
                ax.set_ylabel(dom, fontsize=9)
    fig.tight_layout(pad=0.3)
    return fig


def plot_by_material(table: pd.DataFrame, metric: str = "psnr") -> Figure:
    """Mean ``metric`` per material region (and overall) for each arm after its last stage and the
    copy baselines, one panel per domain; dots are seeds."""
    keep = [("copy input", "-"), ("copy reference", "-")] + [tuple(k.rsplit(" ", 1)) for k in SHOWN]
    regions = ["all", *MATERIALS]
    domains = list(dict.fromkeys(table.domain))
    fig, axes = plt.subplots(1, len(domains), figsize=(8.0, 3.6), sharey=True, squeeze=False)
    width = 0.8 / len(keep)
    for ax, dom in zip(axes[0], domains):
        for j, (method, stage) in enumerate(keep):
            sel = table[(table.method == method) & (table.stage == stage) & (table.domain == dom)]
            for k, reg in enumerate(regions):
                vals = sel[sel.region == reg][metric].to_numpy()
                x = k + (j - (len(keep) - 1) / 2) * width
                ax.bar(x, vals.mean(), width * 0.9, color=color(method), alpha=0.85,
                       label=method if k == 0 else None)
                ax.plot(np.full(vals.size, x), vals, ".", color="black", ms=2.5)
        ax.set_xticks(range(len(regions)), regions)
        ax.set_title(f"{dom} domain", fontsize=10)
        ax.set_xlabel("region")
    axes[0, 0].set_ylabel({"psnr": "PSNR (dB)", "rmse": "RMSE", "ssim": "SSIM"}[metric])
    lo = table[table[metric].notna()][metric].min()
    axes[0, 0].set_ylim(max(0.0, lo - 1.0) if metric == "psnr" else 0.0, None)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=3, fontsize=9, bbox_to_anchor=(0.5, 1.13))
    fig.tight_layout()
    return fig


def plot_tradeoff(probes: pd.DataFrame, table: pd.DataFrame, stage: str = "II") -> Figure:
    """Fig. 1 analogue: each prior's linear-probe accuracy against the relighting PSNR of its
    fusion arm after ``stage`` (seeds as small dots, means with t-free min-max bars); LI as a line."""
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    arm_of = {prior: arm for arm, prior in ARMS.items() if prior}
    syn = table[(table.domain == "synthetic") & (table.region == "all")]
    li = syn[(syn.method == "LI") & (syn.stage == stage)].psnr
    ax.axhline(li.mean(), color=color("LI"), ls="--", lw=1.2, label=f"LI (no prior), stage {stage}")
    for prior, arm in arm_of.items():
        acc = probes[probes.prior == prior].sort_values("seed")["probe accuracy"].to_numpy()
        ps = syn[(syn.method == arm) & (syn.stage == stage)].sort_values("seed").psnr.to_numpy()
        ax.plot(acc, ps, "o", color=color(arm), alpha=0.35, ms=5)
        ax.errorbar(acc.mean(), ps.mean(), xerr=[[acc.mean() - acc.min()], [acc.max() - acc.mean()]],
                    yerr=[[ps.mean() - ps.min()], [ps.max() - ps.mean()]], fmt="s", ms=9,
                    color=color(arm), capsize=3, label=f"{prior} prior -> {arm}")
    ax.set_xlabel("linear-probe accuracy on the shape class (fraction)")
    ax.set_ylabel(f"relighting PSNR after stage {stage} (dB)")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    fig.tight_layout()
    return fig


def plot_curves(curves: dict[str, list[float]], window: int = 20) -> Figure:
    """Training losses (moving average over ``window`` steps): priors, LI, and each stage of each arm."""
    if not curves:
        raise ValueError("no loss curves to plot (the models were loaded without curves)")
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.4))

    def smooth(v: list[float]) -> np.ndarray:
        v = np.asarray(v, float)
        k = max(1, min(window, v.size // 3))
        return np.convolve(v, np.ones(k) / k, mode="valid")

    for name in ("semantic prior", "dense prior"):
        axes[0].plot(smooth(curves[name]), label=name, color=color(name))
    axes[0].set_yscale("log")
    axes[0].set_title("priors", fontsize=10)
    base = smooth(curves["LI base"])
    axes[1].plot(np.arange(base.size), base, color=color("LI"), label="LI (base)")
    offset = len(curves["LI base"])
    for arm in [*ARMS, SELF_SUP]:
        x0 = offset
        if arm == SELF_SUP:  # Stage III continues the dense arm after its Stage II
            x0 += sum(len(curves.get(f"ALI (dense) {st}", [])) for st in ("I", "II"))
        for stage in ("I", "II", "III"):
            key = f"{arm} {stage}"
            if key in curves and curves[key]:
                y = smooth(curves[key])
                axes[1].plot(x0 + np.arange(y.size), y, color=color(arm), lw=1,
                             label=arm if stage in ("I", "III") else None)
                x0 += len(curves[key])
    axes[1].set_yscale("log")
    axes[1].set_title("relighting (stages after the base)", fontsize=10)
    for ax in axes:
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig
