"""The chapter's figures (each returns a matplotlib Figure)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from minirepro.core import color

FAMILY_COLORS = {"facts": color("facts"), "copy": color("copy input")}
LABELS = {"base": "base", "memory": "MemoryLLM", "flex1": "Flex β=1", "flex2": "Flex β=2",
          "flex3": "Flex β=3", "base-small": "base (equal active)"}


def plot_ppl_vs_params(variants: pd.DataFrame) -> plt.Figure:
    """Test perplexity against total and against active parameters (mean ± sd over seeds)."""
    g = variants.groupby("variant", sort=False).agg(total=("total", "first"), active=("active", "first"),
                                                    mean=("ppl", "mean"), sd=("ppl", "std"))
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6), sharey=True)
    for ax, col, title in zip(axes, ("total", "active"), ("total parameters", "active parameters")):
        for name, r in g.iterrows():
            ax.errorbar(r[col] / 1e3, r["mean"], yerr=r["sd"], fmt="o", ms=7, capsize=3,
                        color=color(LABELS[name]), label=LABELS[name])
        ax.set_xlabel(f"{title} (thousands)")
        ax.set_title(f"perplexity vs {title}", fontsize=11)
    axes[0].set_ylabel("test perplexity (per token)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=9, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def plot_alpha_sweep(alpha: pd.DataFrame) -> plt.Figure:
    """Answer NLL of facts and copy spans as the context-free FFN output is scaled by α."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6), sharey=True)
    for ax, name in zip(axes, ("memory", "base")):
        sub = alpha[(alpha.variant == name) & alpha.family.isin(["facts", "copy"])]
        m = sub.groupby(["family", "alpha"]).nll.agg(["mean", "std"]).reset_index()
        for fam, mk in (("facts", "o"), ("copy", "s")):
            r = m[m.family == fam]
            ax.errorbar(r.alpha, r["mean"], yerr=r["std"], marker=mk, capsize=3, color=FAMILY_COLORS[fam],
                        label=f"{fam} answer tokens")
        ax.set_title(LABELS[name], fontsize=11)
        ax.set_xlabel("α (scale of the FFN output)")
        ax.invert_xaxis()
    axes[0].set_ylabel("answer NLL (nats per token)")
    axes[1].legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    return fig


def plot_layers(layers: pd.DataFrame) -> plt.Figure:
    """Per layer: the mean ToL norm (MemoryLLM) and the rise in log-perplexity when that FFN is dropped."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4))
    mem = layers[layers.variant == "memory"].groupby("layer").tol_norm.agg(["mean", "std"])
    axes[0].bar(mem.index, mem["mean"], yerr=mem["std"], color=color("MemoryLLM"), capsize=3)
    axes[0].set_xlabel("layer")
    axes[0].set_ylabel("mean ‖ToL[L, t]‖ on test tokens")
    axes[0].set_title("ToL contribution per layer", fontsize=11)
    for name, off in (("memory", -0.2), ("base", 0.2)):
        g = layers[layers.variant == name].groupby("layer").drop_dlog_ppl.agg(["mean", "std"])
        axes[1].bar(g.index + off, g["mean"], width=0.4, yerr=g["std"], capsize=3,
                    color=color(LABELS[name]), label=LABELS[name])
    axes[1].set_xlabel("layer whose FFN is dropped")
    axes[1].set_ylabel("rise in test log-perplexity (nats)")
    axes[1].set_title("dropping one layer's FFN", fontsize=11)
    axes[1].legend(fontsize=9)
    fig.tight_layout()
    return fig
