"""The chapter's figures (matplotlib; colours from the book's method palette)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from minirepro.core import color
from minirepro.papers.caffnet.layer import caffine, candidates, compute_faces
from minirepro.papers.caffnet.models import METHODS, predict
from minirepro.papers.caffnet.scenarios import pwc_bounds


def toy_polytope() -> tuple[torch.Tensor, torch.Tensor]:
    """A 2-D polygon with m = 5 rows (m > n = 2) for the geometry figure: (A, b)."""
    ang = np.deg2rad([90, 160, 215, 290, 20])
    A = torch.as_tensor(np.stack([np.cos(ang), np.sin(ang)], axis=1))
    b = torch.tensor([[1.0, 1.2, 0.9, 1.1, 1.0]], dtype=torch.float64)
    return A, b


def plot_geometry(f=(0.3, 1.8), w=(-0.3, 0.5)):
    """Two panels: the CAffine candidates for w = 0 (the projection) and for w != 0."""
    A, b = toy_polytope()
    f_t = torch.tensor([f], dtype=torch.float64)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), sharex=True, sharey=True)
    grid = np.linspace(-2.5, 2.5, 401)
    X, Y = np.meshgrid(grid, grid)
    pts = np.stack([X.ravel(), Y.ravel()], axis=1)
    inside = (pts @ A.numpy().T <= b.numpy()).all(axis=1).reshape(X.shape)
    faces = compute_faces(A)
    for ax, wv, name in [(axes[0], (0.0, 0.0), "CAffNet (w=0)"), (axes[1], w, "CAffNet")]:
        w_t = torch.tensor([wv], dtype=torch.float64)
        cand = candidates(f_t, w_t, b, faces, A)[0].numpy()
        feas = (cand @ A.numpy().T - b.numpy() <= 1e-10).all(axis=1)
        y, idx = caffine(f_t, w_t, A, b, return_index=True)
        ax.contourf(X, Y, inside, levels=[0.5, 1.5], colors=["#DDDDDD"])
        for a, beta in zip(A.numpy(), b.numpy()[0]):  # the lines a'y = beta
            t = np.linspace(-4, 4, 2)
            base = a * beta
            ax.plot(base[0] - a[1] * t, base[1] + a[0] * t, color="#AAAAAA", lw=0.8, ls="--")
        ax.scatter(*cand[~feas].T, facecolors="none", edgecolors="#7F7F7F", s=40,
                   label="infeasible candidate")
        ax.scatter(*cand[feas].T, color="#7F7F7F", s=40, label="feasible candidate")
        ax.scatter(*f_t[0].numpy(), color="black", marker="x", s=70, label="network output f")
        ax.scatter(*y[0].numpy(), color=color(name), marker="*", s=260, zorder=5,
                   label=f"{name} output")
        ax.plot(*np.stack([f_t[0].numpy(), y[0].numpy()]).T, color=color(name), lw=1.5)
        ax.set_title(f"{name}: w = ({wv[0]:.1f}, {wv[1]:.1f})")
        ax.set_xlim(-2.5, 2.5)
        ax.set_ylim(-2.5, 2.5)
        ax.set_aspect("equal")
        ax.set_xlabel("$y_1$ (output units)")
    axes[0].set_ylabel("$y_2$ (output units)")
    axes[1].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return fig


def plot_piecewise(run, seed: int, methods=("soft penalty", "HardNet-Aff", "CAffNet")):
    """The 1-D problem: target, feasible band and predictions (top); violation (bottom)."""
    sc, data = run.scenario, run.data
    x = sc.grid_x(800)
    bl, bu = pwc_bounds(x)
    lo, hi = bl.amax(dim=1).numpy(), bu.amin(dim=1).numpy()
    xs = x[:, 0].numpy()
    fig, (ax, axv) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1.3]})
    ax.fill_between(xs, lo, hi, color="#DDDDDD", label="feasible set (both intervals)", step="mid")
    ax.plot(xs, sc.target(x)[:, 0].numpy(), color="black", lw=1, ls=":", label="target")
    ax.scatter(data.x_train[:, 0], data.t_train[:, 0], color="black", s=10, label="training points")
    for m in methods:
        y = predict(run.model, sc, x, m, seed)[:, 0].numpy()
        ax.plot(xs, y, color=color(m), lw=1.6, label=m)
        viol = np.maximum(0, np.maximum(lo - y, y - hi))
        axv.plot(xs, viol, color=color(m), lw=1.4, label=m)
    ax.set_ylabel("y (target units)")
    ax.set_ylim(-4.5, 4.5)
    ax.legend(ncol=3, fontsize=8, loc="lower left")
    axv.set_xlabel("input x")
    axv.set_ylabel("violation")
    fig.tight_layout()
    return fig


def plot_metrics(table, methods=METHODS):
    """Per scenario: the test error (top) and the max violation (bottom) of every method,
    one dot per seed, a bar at the mean."""
    scen = list(dict.fromkeys(table.scenario))
    fig, axes = plt.subplots(2, len(scen), figsize=(8.0, 6.6), squeeze=False)
    for j, sc in enumerate(scen):
        t = table[table.scenario == sc]
        mse = sc in ("piecewise", "unicycle CBF")
        for row, col, label in [(0, "error", ("test MSE" if sc == "piecewise" else
                                               "MSE to the nominal control\n((m/s, rad/s)^2)")
                                 if mse else "optimality gap\n(objective units, symlog)"),
                                (1, "max_violation", "max violation\n(constraint units, log)")]:
            ax = axes[row, j]
            for i, m in enumerate(methods):
                v = t[t.method == m][col].to_numpy()
                if col == "max_violation":
                    v = np.maximum(v, 1e-17)
                ax.bar(i, v.mean(), color=color(m), alpha=0.35, width=0.7)
                ax.scatter(np.full(len(v), i) + np.linspace(-0.15, 0.15, len(v)), v,
                           color=color(m), s=18, zorder=3, label=m if j == 0 and row == 0 else None)
            if col == "max_violation":
                ax.set_yscale("log")
                ax.set_ylim(bottom=1e-17)
                ax.axhline(1e-9, color="black", lw=0.8, ls="--")
            elif not mse:  # gaps span decades and can be negative
                ax.set_yscale("symlog", linthresh=1e-4)
                ax.axhline(0, color="black", lw=0.8)
            ax.set_xticks([])  # the methods are the colours of the legend above the panels
            ax.set_ylabel(label, fontsize=9)
            if row == 0:
                ax.set_title(sc, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.91))
    fig.legend(loc="upper center", ncol=3, fontsize=9, bbox_to_anchor=(0.5, 0.995), markerscale=1.5)
    return fig


def plot_rollouts(ro, scenario, seed: int,
                  methods=("soft penalty", "HardNet-Aff", "CAffNet")):
    """Unicycle rollouts of one seed, one panel per method: the look-ahead point's path,
    obstacles in grey, a red cross where a rollout enters an obstacle (and stops)."""
    paths = ro.attrs["paths"]
    all_methods = list(dict.fromkeys(ro.method))
    seeds = list(dict.fromkeys(ro.seed))
    fig, axes = plt.subplots(1, len(methods), figsize=(8.0, 3.0), sharey=True)
    for ax, m in zip(np.atleast_1d(axes), methods):
        k = all_methods.index(m) * len(seeds) + seeds.index(seed)
        for x0, y0, r in scenario.obstacles:
            ax.add_patch(plt.Circle((x0, y0), r, color="0.75", zorder=1))
        for p in paths[k].numpy():
            ax.plot(p[:, 0], p[:, 1], color=color(m), lw=1.0, alpha=0.8, zorder=2)
            h = scenario.barrier(torch.as_tensor(p[-1:]))
            if bool((h < 0).any()):
                ax.plot(p[-1, 0], p[-1, 1], "x", color="#c0392b", ms=7, mew=2, zorder=3)
        ax.plot(*scenario.goal, marker="*", color="black", ms=10, zorder=3)
        n_hit = int(ro[(ro.method == m) & (ro.seed == seed)].collisions.iloc[0])
        ax.set_title(f"{m}: {n_hit} of {paths.shape[1]} collide", fontsize=9)
        ax.set_xlim(scenario.box[:2])
        ax.set_ylim(scenario.box[2:])
        ax.set_aspect("equal")
        ax.set_xlabel("position p1 (m)")
    np.atleast_1d(axes)[0].set_ylabel("position p2 (m)")
    fig.tight_layout()
    return fig


def plot_layer_times(times, crossover_m=None):
    """Wall time of one forward and backward pass (log scale) against the number of rows m."""
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    for name, col, c in (("CAffNet", "CAffNet s", color("CAffNet")),   # the QP layer computes
                         ("cvxpylayers", "cvxpylayers s", color("fixed projection"))):  # the projection
        ax.plot(times.m, times[col], marker="o", color=c, label=name)
    if crossover_m is not None:
        ax.axvline(crossover_m, color="black", ls="--", lw=0.8, label=f"crossover m = {crossover_m}")
    ax.set_yscale("log")
    ax.set_xlabel("rows m of A y <= b")
    ax.set_ylabel("seconds per batch\n(forward + backward, log)")
    ax.legend(loc="lower right", fontsize=9)
    top = ax.secondary_xaxis("top")
    top.set_xticks(list(times.m))
    top.set_xticklabels([str(s) for s in times.subsets], fontsize=8)
    top.set_xlabel("row subsets enumerated by CAffNet", fontsize=9)
    fig.tight_layout()
    return fig


__all__ = ["plot_geometry", "plot_layer_times", "plot_metrics", "plot_piecewise", "plot_rollouts",
           "toy_polytope"]
