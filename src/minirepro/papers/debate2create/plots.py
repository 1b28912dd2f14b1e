"""The chapter's figures."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from minirepro.core import color, plot_seed_band


def _conds(names):
    cols = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {n: cols[i % len(cols)] for i, n in enumerate(names)}


def plot_bodies(bodies: dict[str, np.ndarray], scores: dict[str, float] | None = None):
    """The body of each condition drawn from its parameters: three capsules, to scale (m)."""
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.55 * len(bodies)))
    for row, (name, p) in enumerate(bodies.items()):
        L, r = p[:3], p[3:]
        x, y = 0.0, -row
        for j in range(3):
            ax.plot([x, x - L[j]], [y, y], lw=max(1.0, 100 * r[j]),
                    solid_capstyle="round", color=color("method") if j == 0 else "0.45")
            x -= L[j]
        label = name if scores is None else f"{name} ({scores[name]:.2f} m)"
        ax.text(0.35, y, label, va="center", fontsize=9)
    ax.set_yticks([])
    ax.set_xlabel("position along the body (m); head segment coloured, line width ~ radius")
    ax.set_xlim(-6.2, 3.6)
    ax.set_ylim(-len(bodies) + 0.4, 0.6)
    fig.tight_layout()
    return fig


def plot_search(curves: dict[str, np.ndarray], default: float):
    """Best displacement so far against candidates evaluated, mean over seeds (shaded: min-max)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    cols = _conds(list(curves))
    for name, c in curves.items():
        x = np.arange(1, c.shape[1] + 1)
        plot_seed_band(ax, x, c, cols[name], label=name, alpha=0.12, lw=2 if name == "debate" else 1.3)
    ax.axhline(default, color="0.3", ls="--", lw=1, label="default body (mean)")
    ax.set_xlabel("candidates trained")
    ax.set_ylabel("best forward displacement so far (m)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    fig.tight_layout()
    return fig


def plot_trajectories(rollouts: dict[str, object]):
    """Torso paths (x, y in m) of each condition's winner, re-evaluated from noisy resets;
    one panel per condition, shared axes."""
    names = list(rollouts)
    ncol = 3
    nrow = -(-len(names) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(7.5, 2.4 * nrow + 0.4), sharex=True, sharey=True,
                             squeeze=False)
    cols = _conds(names)
    for ax, name in zip(axes.flat, names, strict=False):
        tr = rollouts[name]
        for i in range(tr.qpos.shape[0]):
            ax.plot(tr.qpos[i, :, 0], tr.qpos[i, :, 1], color=cols[name], lw=1.0)
            ax.plot(tr.qpos[i, -1, 0], tr.qpos[i, -1, 1], "o", ms=3.5, color=cols[name])
        ax.plot([0], [0], "k+", ms=8)
        ax.set_title(name, fontsize=10)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("x (m, forward)")
    for ax in axes[:, 0]:
        ax.set_ylabel("y (m, sideways)")
    fig.tight_layout()
    return fig
