"""Figures of the MoCL chapter: accuracy matrices, plasticity, ACC/BWT bars, Fisher spectra."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import MaxNLocator

from minirepro.core import color, plot_seed_band
from minirepro.papers.mocl.experiment import JOINT, RunResult, mean_matrix, per_seed
from minirepro.papers.mocl.methods import factor_eigen, kfac_factors, metabolic_gate
from minirepro.papers.mocl.qstats import exp_q


def plot_accuracy_matrices(results: list[RunResult], methods: list[str]) -> plt.Figure:
    """Seed-mean accuracy matrices R(i, j) side by side, one panel per method."""
    fig, axes = plt.subplots(1, len(methods), figsize=(2.6 * len(methods) + 0.8, 3.1),
                             sharey=True, constrained_layout=True)
    axes = np.atleast_1d(axes)
    for ax, m in zip(axes, methods):
        R = mean_matrix(results, m)
        im = ax.imshow(R, vmin=0, vmax=1, cmap="viridis")
        T = R.shape[0]
        ax.set_title(m, color=color(m), fontsize=11)
        ax.set_xlabel("evaluated on task j")
        ax.set_xticks(range(T), [str(t + 1) for t in range(T)], fontsize=7)
        ax.set_yticks(range(T), [str(t + 1) for t in range(T)], fontsize=7)
        ax.grid(False)
    axes[0].set_ylabel("after training task i")
    fig.colorbar(im, ax=axes.tolist(), shrink=0.85, label="test accuracy")
    return fig


def plot_plasticity_and_fill(results: list[RunResult], methods: list[str]) -> plt.Figure:
    """Left: R(i, i) by task (mean, band = min-max over seeds). Right: GPM's subspace fill per layer."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
    for m in methods:
        P = np.array([np.diag(r.R) for r in results if r.method == m])
        x = np.arange(1, P.shape[1] + 1)
        plot_seed_band(ax, x, P, color(m), label=m, marker="o", ms=3.5)
    joint = [r for r in results if r.method == JOINT]
    if joint:
        ax.axhline(np.mean([r.R[-1].mean() for r in joint]), color=color(JOINT), ls="--",
                   lw=1, label="joint (final ACC)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("task index i")
    ax.set_ylabel("accuracy on task i just after learning it, R(i, i)")
    ax.set_title("plasticity by task")
    ax.legend(fontsize=8, ncol=2)
    gpm = [r for r in results if r.method == "GPM"]
    if gpm:
        F = np.nanmean([r.fill for r in gpm], axis=0)
        x = np.arange(1, F.shape[0] + 1)
        for li, ls in zip(range(F.shape[1]), ("-", "--", ":")):
            bx.plot(x, 100 * F[:, li], ls=ls, color=color("GPM"), marker="s", ms=3,
                    label=f"GPM layer {li + 1}")
    mocl = [r for r in results if r.method == "MoCL"]
    if mocl:
        Op = np.nanmean([r.openness for r in mocl], axis=0)
        x = np.arange(1, Op.shape[0] + 1)
        for li, ls in zip(range(Op.shape[1]), ("-", "--", ":")):
            bx.plot(x, 100 * (1 - Op[:, li]), ls=ls, color=color("MoCL"), marker="o", ms=3,
                    label=f"MoCL layer {li + 1} (1 - mean gate)")
    bx.set_ylim(0, 100)
    bx.xaxis.set_major_locator(MaxNLocator(integer=True))
    bx.set_xlabel("after training task i")
    bx.set_ylabel("share of the layer blocked (%)")
    bx.set_title("GPM subspace fill vs MoCL gate closure")
    bx.legend(fontsize=8)
    return fig


def plot_acc_bwt(results: list[RunResult], methods: list[str]) -> plt.Figure:
    """ACC and BWT per method: bars at the seed mean, error bars one std, dots the seeds."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for ax, metric in zip(axes, ("ACC", "BWT")):
        vals = per_seed(results, metric)
        names = [m for m in methods if m in vals and not (metric == "BWT" and m == JOINT)]
        for k, m in enumerate(names):
            v = 100 * vals[m]
            ax.bar(k, v.mean(), yerr=v.std(ddof=1) if v.size > 1 else 0, color=color(m),
                   alpha=0.85, capsize=3, label=m, edgecolor="white",
                   hatch="//" if m.startswith("MoCL (") else None)
            ax.scatter(np.full(v.size, k), v, s=9, color="black", zorder=3)
        ax.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel(f"{metric} (%)")
        ax.axhline(0, color="black", lw=0.6)
        ax.set_title("final average accuracy" if metric == "ACC" else
                     "backward transfer (negative = forgetting)")
    return fig


def fisher_spectra(stats: list[tuple[torch.Tensor, torch.Tensor]]
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer, the sorted Kronecker spectrum ``lam_G (x) lam_A`` and the exact Fisher spectrum.

    The exact one is from the per-sample gradients ``g_n a_n^T`` (n, out*in): its
    squared singular values over n. Both are normalised to sum 1.
    """
    out = []
    for a, g in stats:
        A, G = kfac_factors(a, g)
        kron = np.sort(np.outer(factor_eigen(G)[0].numpy(), factor_eigen(A)[0].numpy()).ravel())[::-1]
        J = (g[:, :, None] * a[:, None, :]).reshape(a.shape[0], -1).double()
        exact = (torch.linalg.svdvals(J) ** 2 / a.shape[0]).numpy()
        out.append((kron / kron.sum(), exact / exact.sum()))
    return out


def _log_ranks(n: int, points: int = 300) -> np.ndarray:
    """About ``points`` indices in [0, n), evenly spaced in log rank (first and last kept)."""
    return np.unique(np.concatenate([np.geomspace(1, n, points).astype(int) - 1, [n - 1]]))


def plot_fisher_spectrum(stats: list[tuple[torch.Tensor, torch.Tensor]], q: float,
                         beta: float) -> plt.Figure:
    """Left: Fisher eigenvalues by rank, log-log. Right: the gate against lambda / tau for several q."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.9), constrained_layout=True)
    shades = ("#0072B2", "#56B4E9", "#009E73")
    for li, ((kron, exact), c) in enumerate(zip(fisher_spectra(stats), shades)):
        kr = kron[kron > 1e-14]
        ex = exact[exact > 1e-14]
        ik, ie = _log_ranks(kr.size), _log_ranks(ex.size)
        ax.loglog(ik + 1, kr[ik], color=c, label=f"layer {li + 1}, K-FAC A(x)G")
        ax.loglog(ie + 1, ex[ie], color=c, ls=":", lw=2,
                  label=f"layer {li + 1}, exact (per-sample)")
    ax.set_xlabel("eigenvalue rank")
    ax.set_ylabel("eigenvalue / trace")
    ax.set_title("Fisher spectrum after task 1")
    ax.legend(fontsize=7)
    x = np.logspace(-4, 1, 300)
    for qq, ls in ((0.5, "-."), (1.0, "--"), (q, "-")):
        bx.semilogx(x, exp_q(-beta * x, qq), ls=ls, color=color("MoCL"),
                    label=f"q = {qq:g}" + (" (Shannon)" if qq == 1.0 else ""))
    bx.semilogx(x, (beta * x < 1).astype(float), color=color("MoCL (hard projection)"),
                label="hard projection")
    bx.set_xlabel(r"Fisher eigenvalue / temperature, $\lambda/\tau$")
    bx.set_ylabel(r"gate $M = e_q(-\beta\lambda/\tau)$")
    bx.set_title(f"the metabolic gate (beta = {beta:g})")
    bx.legend(fontsize=8)
    return fig


def gate_summary(stats: list[tuple[torch.Tensor, torch.Tensor]], q: float, beta: float
                 ) -> list[dict[str, float]]:
    """Per layer after one task: effective rank r_q, closed share (gate < 0.5), mean gate."""
    from minirepro.papers.mocl.qstats import effective_rank

    rows = []
    for li, (a, g) in enumerate(stats):
        A, G = kfac_factors(a, g)
        lG, lA = factor_eigen(G)[0].numpy(), factor_eigen(A)[0].numpy()
        M = metabolic_gate(lG, lA, q, beta)
        r = effective_rank(lG / lG.sum(), q) * effective_rank(lA / lA.sum(), q)
        rows.append({"layer": li + 1, "directions": M.size, "r_q": r,
                     "closed (M < 0.5)": float((M < 0.5).mean()), "mean gate": float(M.mean())})
    return rows
