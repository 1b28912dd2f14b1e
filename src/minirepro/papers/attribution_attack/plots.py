"""Figures of the attribution-attack chapter (each returns a matplotlib Figure)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .experiment import ARMS, DEFENCES, EVALUATORS, Results

ARM_COLORS = {"honest": "#7F7F7F", "attack": "#D55E00", "real data": "#009E73", "without adv.": "#000000"}


def plot_attribution(res: Results) -> plt.Figure:
    """Normalised attribution per client, per evaluator and arm: bars at the mean over seeds, dots per seed."""
    fig, axes = plt.subplots(2, 2, figsize=(8, 5.6))
    v = res.values
    n = int(v.client.max()) + 1
    width = 0.26
    for ax, ev in zip(axes.flat, EVALUATORS):
        for i, arm in enumerate(ARMS):
            g = v[(v.evaluator == ev) & (v.arm == arm)]
            x = np.arange(n) + (i - 1) * width
            means = g.groupby("client").share.mean().reindex(range(n))
            ax.bar(x, means, width, color=ARM_COLORS[arm], label=arm, alpha=0.85)
            for k in range(n):
                s = g[g.client == k].share
                ax.scatter(np.full(len(s), x[k]), s, s=7, color="k", zorder=3, linewidths=0)
        ax.axhline(1 / n, color="grey", lw=1, ls="--")
        ax.set_title(ev, fontsize=11)
        ax.set_xticks(range(n), ["adv."] + [f"B{k}" for k in range(1, n)])
    for ax in axes[:, 0]:
        ax.set_ylabel("share of attribution")
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", ncols=3, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def plot_accuracy(res: Results) -> plt.Figure:
    """Left: validation accuracy of the full federation per round. Right: test accuracy per seed."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.6), gridspec_kw={"width_ratios": [1.4, 1]})
    for arm in ARMS:
        c = res.curves[res.curves.arm == arm].groupby("round").val_acc
        m, lo, hi = c.mean(), c.min(), c.max()
        a.plot(m.index, m, color=ARM_COLORS[arm], label=arm)
        a.fill_between(m.index, lo, hi, color=ARM_COLORS[arm], alpha=0.15, lw=0)
    a.set_xlabel("FedAvg round")
    a.set_ylabel("validation accuracy")
    a.legend(loc="lower right", fontsize=9)
    t = res.arms.pivot_table(index="seed", columns="arm", values="test_acc")
    wo = res.arms.groupby("seed").test_acc_without_adversary.first()
    cols = ["without adv.", *ARMS]
    data = np.column_stack([wo.reindex(t.index), *(t[arm] for arm in ARMS)])
    for row in data:
        b.plot(range(len(cols)), row, color="grey", lw=0.8, alpha=0.6)
    for j, name in enumerate(cols):
        b.scatter(np.full(len(data), j), data[:, j], color=ARM_COLORS.get(name, "k"), zorder=3, s=18)
    b.set_xticks(range(len(cols)), cols, rotation=20)
    b.set_ylabel("test accuracy")
    fig.tight_layout()
    return fig


def plot_defences(res: Results, seed: int) -> plt.Figure:
    """Each defence's score per round (one seed): the adversary honest and attacking, the
    benign clients' range (attack run), and the defence's own threshold."""
    fig, axes = plt.subplots(1, 3, figsize=(8, 3.6))
    s = res.scores[res.scores.seed == seed]
    labels = {"Krum": ("Krum score / kept cut-off", 1.0), "FoolsGold": ("FoolsGold weight", None),
              "norm clip": ("norm / median norm", None)}
    thr = {"Krum": 1.0, "FoolsGold": 0.5, "norm clip": 2.0}
    for ax, d in zip(axes, DEFENCES):
        g = s[s.defence == d]
        ben = g[(g.client > 0) & (g.arm == "attack")].groupby("round").score
        ax.fill_between(ben.min().index, ben.min(), ben.max(), color="grey", alpha=0.25, lw=0, label="benign range")
        for arm, ls in (("honest", "--"), ("attack", "-")):
            a = g[(g.client == 0) & (g.arm == arm)]
            ax.plot(a["round"], a.score, ls, color=ARM_COLORS[arm], label=f"adversary, {arm}")
        ax.axhline(thr[d], color="k", lw=1, ls=":", label="threshold")
        ax.set_title(d, fontsize=11)
        ax.set_xlabel("round")
        ax.set_ylabel(labels[d][0], fontsize=9)
        if d == "FoolsGold":
            ax.set_ylim(0, 1.05)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncols=4, fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def plot_samples(res: Results, seed: int, n_show: int = 10) -> plt.Figure:
    """The adversary's own images, its crafted batch G(z) with the labels it carries, and real
    reserve images of the same labels (the control)."""
    atk, fed = res.attacks[seed], res.feds[seed]
    Xo, yo = fed.clients[0]
    idx = np.linspace(0, len(atk.X) - 1, n_show).astype(int)
    from .data import real_batch

    real = real_batch(fed, atk.labels, seed)
    rows = [("own data", Xo[:: max(1, len(Xo) // n_show)][:n_show], yo[:: max(1, len(Xo) // n_show)][:n_show]),
            ("crafted G(z)", atk.X[idx], atk.labels[idx]), ("real control", real[idx], atk.labels[idx])]
    fig, axes = plt.subplots(3, n_show, figsize=(8, 2.9))
    for r, (name, X, y) in enumerate(rows):
        for j in range(n_show):
            ax = axes[r, j]
            ax.imshow(X[j].reshape(8, 8), cmap="gray_r", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"label {y[j]}", fontsize=8)
        axes[r, 0].set_ylabel(name, fontsize=9)
    fig.tight_layout()
    return fig


def plot_mc_error(res: Results) -> plt.Figure:
    """Largest |MC - exact| Shapley error against the number of permutations, per seed and arm."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for arm in ARMS:
        g = res.mc[res.mc.arm == arm].groupby("permutations").max_error
        ax.plot(g.mean().index, g.mean(), "o-", color=ARM_COLORS[arm], label=arm)
    T = np.array(sorted(res.mc.permutations.unique()))
    ref = res.mc.groupby("permutations").max_error.mean().iloc[0] * np.sqrt(T[0] / T)
    ax.plot(T, ref, "k:", label="1/sqrt(T)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("permutations T")
    ax.set_ylabel("max |MC - exact| (accuracy units)")
    ax.legend(fontsize=9, loc="upper right")
    fig.tight_layout()
    return fig
