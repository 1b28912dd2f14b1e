"""Figures of the ConservationBench chapter (each returns a matplotlib Figure)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from minirepro.core import color
from minirepro.papers.conservationbench.analysis import same_share
from minirepro.papers.conservationbench.conditions import select_frames
from minirepro.papers.conservationbench.generator import PROPERTIES, Video

FAMILY_LABEL = {"planted": "planted family (paper's patterns built in)",
                "null": "null family (patterns absent)"}
# The paper's own points (C, NC accuracy in %), Tabs. 5-6 as read in our notes.
PAPER_POINTS = {"humans": (98.55, 98.15), "gemini-2.5-pro": (94.33, 43.88),
                "Qwen3-VL-8B-Instruct": (53.12, 31.52), "Qwen3-VL-8B-Thinking": (52.92, 16.31)}


def family_color(family: str) -> str:
    return color({"planted": "soft penalty", "null": "caffnet"}.get(family, family))


def plot_frame_strips(videos: list[Video], pair: int = 0, n_frames: int = 5):
    """Frame strips (uniform selection) of one pair per property: conserving, then its control."""
    fig, axes = plt.subplots(len(PROPERTIES), 2 * n_frames, figsize=(8, 3.8))
    for r, prop in enumerate(PROPERTIES):
        pair_videos = [v for v in videos if v.prop == prop and v.pair == pair]
        for c, v in enumerate(pair_videos):
            for j, t in enumerate(select_frames(v, n_frames, "uniform")):
                ax = axes[r, c * n_frames + j]
                ax.imshow(v.frames[t], cmap="gray", vmin=0, vmax=255)
                ax.set_xticks([])
                ax.set_yticks([])
                if r == 0:
                    ax.set_title(f"t={t}", fontsize=9)
            if c == 0:
                axes[r, 0].set_ylabel(prop, fontsize=10)
            axes[r, c * n_frames + n_frames - 1].text(
                1.05, 0.5, v.answer if not v.conserving else "", transform=axes[r, c * n_frames
                                                                               + n_frames - 1].transAxes,
                fontsize=9, va="center")
    fig.text(0.27, 0.99, "conserving (answer: same)", ha="center", va="top", fontsize=10)
    fig.text(0.73, 0.99, "control (answer at right)", ha="center", va="top", fontsize=10)
    fig.subplots_adjust(left=0.06, right=0.93, top=0.90, bottom=0.02, wspace=0.05, hspace=0.08)
    return fig


def plot_c_vs_nc(table: pd.DataFrame):
    """Accuracy on conserving items against controls, one dot per (model, seed); the paper's
    own points (grey) and the always-"same" corner for reference. ``table`` has columns
    ``C, NC, family``."""
    fig, ax = plt.subplots(figsize=(7.5, 6))
    for fam, g in table.groupby("family"):
        ax.scatter(100 * g["C"], 100 * g["NC"], s=22, alpha=0.75, color=family_color(fam),
                   label=FAMILY_LABEL.get(fam, fam))
    for i, (name, (c, nc)) in enumerate(PAPER_POINTS.items()):
        ax.scatter(c, nc, marker="x", color="0.35", s=40,
                   label="the paper's models (Tabs. 5-6)" if i == 0 else None)
        ax.annotate(name, (c, nc), xytext=(-6, 6), textcoords="offset points", fontsize=8,
                    color="0.3", ha="right")
    ax.scatter([100], [0], marker="s", color="k", s=30, label='always "same"')
    ax.axhline(100 / 3, color="0.5", ls=":", lw=1)
    ax.axvline(100 / 3, color="0.5", ls=":", lw=1, label="chance (1/3)")
    ax.set(xlabel="accuracy on conserving items, C (%)", ylabel="accuracy on controls, NC (%)",
           xlim=(0, 104), ylim=(-3, 104))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=9, frameon=False)
    fig.tight_layout()
    return fig


def plot_ablations(answers: pd.DataFrame):
    """Share of "same" answers with the video, with blank frames and with no image, per
    family (mean over models, one seed); the dotted line is an unbiased third."""
    fam = answers["model"].astype(str).str.split("-").str[0]
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    probes = ["video", "blank", "text"]
    labels = {"video": "with the video\n(7 frames)", "blank": "blank frames", "text": "text only"}
    width = 0.38
    for k, f in enumerate(["planted", "null"]):
        sub = answers[fam == f]
        vals = [same_share(sub[(sub["n_frames"] == 7) & (sub["selection"] == "uniform")]
                           if p == "video" else sub, p).mean() for p in probes]
        x = np.arange(len(probes)) + (k - 0.5) * width
        ax.bar(x, np.array(vals) * 100, width, color=family_color(f), label=FAMILY_LABEL[f])
        for xi, v in zip(x, vals, strict=True):
            ax.text(xi, v * 100 + 1.5, f"{100 * v:.0f}", ha="center", fontsize=9)
    ax.axhline(100 / 3, color="0.4", ls=":", lw=1, label="no preference (1/3)")
    ax.axhline(50, color="0.7", ls="--", lw=1, label='share of "same" items (1/2)')
    ax.set_xticks(range(len(probes)), [labels[p] for p in probes])
    ax.set(ylabel='answers "same" (%)', ylim=(0, 112))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=9, frameon=False)
    fig.tight_layout()
    return fig


def plot_frame_counts(by_frames: pd.DataFrame):
    """Accuracy against the number of frames shown: thin lines per (model, seed), thick per
    family mean. ``by_frames`` has columns ``family, model, seed, n_frames, acc``."""
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    for fam, g in by_frames.groupby("family"):
        for _, m in g.groupby(["model", "seed"]):
            ax.plot(m["n_frames"], 100 * m["acc"], color=family_color(fam), alpha=0.15, lw=0.8)
        mean = g.groupby("n_frames")["acc"].mean()
        ax.plot(mean.index, 100 * mean.values, color=family_color(fam), lw=2.5, marker="o",
                label=FAMILY_LABEL.get(fam, fam))
    ax.axhline(100 / 3, color="0.5", ls=":", lw=1, label="chance (1/3)")
    ax.set(xlabel="frames shown", ylabel="item accuracy (%)", xticks=sorted(by_frames["n_frames"].unique()))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=9, frameon=False)
    fig.tight_layout()
    return fig
