"""The chapter's figures; each returns a matplotlib Figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from minirepro.core import color

MODALITY_COLORS = {"x": "#0072B2", "y": "#D55E00"}


def plot_embeddings(examples: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]], data: str,
                    arms: list[str], n_points: int = 150) -> Figure:
    """Both modalities' test embeddings in the plane of the gap: the horizontal axis is the
    direction of μ_x - μ_y, the vertical one the top principal direction orthogonal to it.
    One panel per arm; stars are the modality means; 8 pairs are joined by grey lines."""
    fig, axes = plt.subplots(1, len(arms), figsize=(8, 2.8), squeeze=False, sharex=True, sharey=True)
    for ax, arm in zip(axes[0], arms, strict=True):
        x, y = examples[(data, arm)]
        g = x.mean(0) - y.mean(0)
        g = g / max(np.linalg.norm(g), 1e-12)
        both = np.vstack([x, y])
        rest = both - np.outer(both @ g, g)
        _, _, vt = np.linalg.svd(rest - rest.mean(0), full_matrices=False)
        axes2 = np.stack([g, vt[0]])
        px, py = x[:n_points] @ axes2.T, y[:n_points] @ axes2.T
        for i in range(8):
            ax.plot([px[i, 0], py[i, 0]], [px[i, 1], py[i, 1]], color="0.5", lw=0.7, zorder=1)
        ax.scatter(*px.T, s=6, color=MODALITY_COLORS["x"], alpha=0.6, label="image / view x", zorder=2)
        ax.scatter(*py.T, s=6, color=MODALITY_COLORS["y"], alpha=0.6, label="caption / view y", zorder=2)
        for arr, c in ((x, "x"), (y, "y")):
            ax.scatter(*(arr.mean(0) @ axes2.T), marker="*", s=170, color=MODALITY_COLORS[c],
                       edgecolor="k", zorder=3)
        ax.set_title(arm, fontsize=10)
        ax.set_xlabel("along μ_x − μ_y", fontsize=9)
        ax.tick_params(labelsize=8)
    axes[0, 0].set_ylabel("top other direction", fontsize=9)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=9, bbox_to_anchor=(0.5, -0.08),
               markerscale=3)
    fig.tight_layout()
    return fig


def plot_gap_vs_angle(runs: pd.DataFrame, arms: list[str], data: str = "synthetic") -> Figure:
    """Left: the trained gap Δθ against the constructed angle φ between the modality
    subspaces (Thm 3 predicts the diagonal). Right: against φ_min of the learned subspaces."""
    sel = runs[(runs["data"] == data) & runs["arm"].isin(arms)]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4), sharey=True)
    rng = np.random.default_rng(0)
    for arm in arms:
        s = sel[sel["arm"] == arm]
        jit = rng.uniform(-1.5, 1.5, len(s))
        axes[0].scatter(s["phi"] + jit, s["gap (deg)"], s=18, color=color(arm), label=arm, alpha=0.8)
        means = s.groupby("phi")["gap (deg)"].mean()
        axes[0].plot(means.index, means.values, color=color(arm), lw=1.2)
        axes[1].scatter(s["phi_min (deg)"], s["gap (deg)"], s=18, color=color(arm), alpha=0.8)
    top = max(95.0, float(sel["gap (deg)"].max()) + 5)
    for ax in axes:
        ax.plot([0, 90], [0, 90], ls="--", color="k", lw=1, label="Thm 3: Δθ = φ_min")
        ax.set_xlim(-5, 95)
        ax.set_ylim(0, top)
        ax.tick_params(labelsize=9)
    axes[0].set_xlabel("constructed angle φ between the subspaces (deg)", fontsize=9)
    axes[1].set_xlabel("φ_min of the learned subspaces (deg)", fontsize=9)
    axes[0].set_ylabel("gap Δθ after training (deg)", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(arms) + 1, fontsize=9,
               bbox_to_anchor=(0.5, 1.07))
    fig.tight_layout()
    return fig


def plot_cross_run(runs: pd.DataFrame, arms: list[str], data: str = "synthetic") -> Figure:
    """Retrieval R@1 of every run against its shared-space alignment (left) and its gap
    (right); one dot per run (seed x collapse angle x arm)."""
    sel = runs[runs["data"] == data]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4), sharey=True)
    for arm in arms:
        s = sel[sel["arm"] == arm]
        axes[0].scatter(s["alignment"], s["R@1"], s=18, color=color(arm), label=arm, alpha=0.8)
        axes[1].scatter(s["gap (deg)"], s["R@1"], s=18, color=color(arm), alpha=0.8)
    axes[0].set_xlabel("shared-space alignment (mean cosine)", fontsize=9)
    axes[1].set_xlabel("gap Δθ (deg)", fontsize=9)
    axes[0].set_ylabel("retrieval R@1 (fraction)", fontsize=9)
    for ax in axes:
        ax.tick_params(labelsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(arms), fontsize=9, bbox_to_anchor=(0.5, 1.07))
    fig.tight_layout()
    return fig


def plot_curves(curves: pd.DataFrame) -> Figure:
    """The InfoNCE term on the training batches against the step, mean over runs per arm,
    one panel per data set."""
    datasets = list(dict.fromkeys(curves["data"]))
    fig, axes = plt.subplots(1, len(datasets), figsize=(8, 3.0), squeeze=False)
    for ax, ds in zip(axes[0], datasets, strict=True):
        c = curves[curves["data"] == ds].groupby(["arm", "step"])["InfoNCE"].mean()
        for arm in c.index.get_level_values(0).unique():
            ax.plot(c[arm].index, c[arm].values, color=color(arm), label=arm)
        ax.set_title(ds, fontsize=10)
        ax.set_xlabel("training step", fontsize=9)
        ax.set_yscale("log")
        ax.tick_params(labelsize=9)
    axes[0, 0].set_ylabel("InfoNCE (nats, log scale)", fontsize=9)
    axes[0, -1].legend(fontsize=9, loc="upper right")
    fig.tight_layout()
    return fig
