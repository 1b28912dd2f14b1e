"""Figures of the HCA chapter (matplotlib; colours from ``minirepro.core.color``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
import pandas as pd

from minirepro.core import color
from minirepro.core.stats import seed_summary
from minirepro.papers.hca.evidence import knowledge_graph, pcmci_variables
from minirepro.papers.hca.experiment import METHODS, Run
from minirepro.papers.hca.plants import get_plant

_CAUSE_COLORS = ("#D55E00", "#0072B2", "#009E73", "#E69F00", "#CC79A7")


def plot_trajectory(run: Run, hours: float | None = None) -> plt.Figure:
    """Closed loop: states with bounds, inputs, and bound multipliers over time.

    Shaded bands are the designed events (colour = cause); dotted lines mark the
    explained moves. Multipliers are summed over the horizon, ``sum_k lambda_{c,k}``.
    """
    plant = get_plant(run.plant_name)
    tr = run.traj
    T = len(tr["u"]) if hours is None else min(len(tr["u"]), int(hours / plant.dt))
    t = np.arange(T) * plant.dt
    fig, axes = plt.subplots(4, 1, figsize=(9, 9), sharex=True,
                             gridspec_kw={"height_ratios": [1.2, 1, 1, 1.1]})
    for ev in tr["events"]:
        if ev.onset >= T:
            continue
        for ax in axes:
            ax.axvspan(ev.onset * plant.dt, (ev.onset + ev.length) * plant.dt,
                       color=_CAUSE_COLORS[ev.cause], alpha=0.15, lw=0)
            ax.axvline(ev.t_explain * plant.dt, color="k", ls=":", lw=0.8)
    for i, ax in enumerate(axes[:2]):
        ax.plot(t, tr["x"][:T, i], color="k", lw=1.5, label=plant.state_names[i])
        for side, ls in (("x_upper", "--"), ("x_lower", "-.")):
            b = tr[side][:T, i]
            if np.any(np.isfinite(b)):
                ax.plot(t, b, color="#7F7F7F", ls=ls, lw=1, label=f"{side[2:]} bound")
        ax.set_ylabel(f"{plant.state_names[i]} ({plant.state_units[i]})")
        ax.legend(loc="upper right", fontsize=8, ncol=3)
    rng_u = plant.u_max - plant.u_min
    for j, name in enumerate(plant.input_names):
        axes[2].plot(t, (tr["u"][:T, j] - plant.u_min[j]) / rng_u[j], lw=1.5,
                     color=("#0072B2", "#D55E00")[j],
                     label=f"{name} [{plant.u_min[j]:g}, {plant.u_max[j]:g}] {plant.input_units[j]}")
    axes[2].set_ylabel("input (fraction of range)")
    axes[2].legend(loc="upper right", fontsize=8)
    for i, c in enumerate(plant.causes):
        if c.kind == "forecast":
            continue
        key = "lam_upper" if c.kind == "upper" else "lam_lower"
        axes[3].plot(t, tr[key][:T, :, c.index].sum(axis=1), color=_CAUSE_COLORS[i], lw=1.5,
                     label=f"$\\sum_k\\lambda$ {c.name}")
    axes[3].set_ylabel("multiplier (cost / state unit)")
    axes[3].set_xlabel("time (h)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=_CAUSE_COLORS[i], alpha=0.3) for i in range(len(plant.causes))]
    leg = axes[3].legend(loc="upper left", fontsize=8)
    axes[3].add_artist(leg)
    axes[3].legend(handles, [f"event: {n}" for n in plant.cause_names], loc="upper right", fontsize=7, ncol=2)
    axes[0].set_title(f"{plant.name}: closed loop (seed {run.seed}); dotted lines = explained moves")
    fig.tight_layout()
    return fig


def _columns_layout(groups: list[list[str]]) -> dict[str, tuple[float, float]]:
    pos = {}
    for gx, nodes in enumerate(groups):
        for k, n in enumerate(nodes):
            pos[n] = (gx, -(k - (len(nodes) - 1) / 2))
    return pos


def plot_graphs(run: Run, alpha: float = 0.01) -> plt.Figure:
    """The knowledge graph (left) beside the links PCMCI found at level ``alpha`` (right)."""
    plant = get_plant(run.plant_name)
    G = knowledge_graph(plant)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5.2))
    causes = plant.cause_names
    pos = _columns_layout([causes, list(plant.state_names), list(plant.input_names)])
    styles = {1: ("#009E73", "solid"), -1: ("#D55E00", "solid"), 0: ("#7F7F7F", "dashed")}
    for a, b, data in G.edges(data=True):
        s = data["sign"] if not callable(data["sign"]) else 0
        col, ls = styles[s]
        nx.draw_networkx_edges(G, pos, edgelist=[(a, b)], ax=a1, edge_color=col, style=ls,
                               arrowsize=14, node_size=1800, connectionstyle="arc3,rad=0.05")
    nx.draw_networkx_nodes(G, pos, ax=a1, node_size=1800, node_color="#F0F0F0", edgecolors="k")
    nx.draw_networkx_labels(G, pos, ax=a1, labels={n: n.replace(' ', '\n', 1) for n in G}, font_size=7)
    a1.set_title("knowledge graph\n(green +, red -, dashed: sign depends on the state)", fontsize=10)
    a1.axis("off")
    names = pcmci_variables(plant)
    P = nx.DiGraph()
    P.add_nodes_from(names)
    p = run.p_matrix
    labels = {}
    for i in range(len(names)):
        for j in range(len(names)):
            if i == j:
                continue
            lags = [tau for tau in range(1, p.shape[2]) if p[i, j, tau] < alpha]
            if lags:
                P.add_edge(names[i], names[j])
                labels[(names[i], names[j])] = ",".join(str(tau) for tau in lags)
    n_x, n_d = plant.n_x, plant.n_d
    pos2 = _columns_layout([names[n_x:n_x + n_d], names[:n_x], names[n_x + n_d:]])
    nx.draw_networkx_nodes(P, pos2, ax=a2, node_size=1800, node_color="#F0F0F0", edgecolors="k")
    nx.draw_networkx_labels(P, pos2, ax=a2, labels={n: n.replace(' ', '\n', 1) for n in P}, font_size=7)
    nx.draw_networkx_edges(P, pos2, ax=a2, edge_color="#0072B2", arrowsize=14, node_size=1800,
                           connectionstyle="arc3,rad=0.12")
    nx.draw_networkx_edge_labels(P, pos2, edge_labels=labels, ax=a2, font_size=7, label_pos=0.35)
    a2.set_title(f"PCMCI links on early closed-loop data\n(p < {alpha}; edge labels = lags in 15-min steps)", fontsize=10)
    a2.axis("off")
    for ax in (a1, a2):
        ax.margins(x=0.18, y=0.12)
    fig.tight_layout()
    return fig


def plot_accuracy(acc: pd.DataFrame) -> plt.Figure:
    """Accuracy by method and domain against each oracle; error bars: std over seeds."""
    oracles = list(dict.fromkeys(acc["oracle"]))
    domains = list(dict.fromkeys(acc["domain"])) + ["all"]
    fig, axes = plt.subplots(1, len(oracles), figsize=(12, 4.2), sharey=True)
    axes = np.atleast_1d(axes)
    width = 0.8 / len(METHODS)
    for ax, orc in zip(axes, oracles):
        sub = acc[acc["oracle"] == orc]
        for m, meth in enumerate(METHODS):
            means, stds = [], []
            for dom in domains:
                s = sub[sub["method"] == meth]
                if dom != "all":
                    s = s[s["domain"] == dom]
                else:
                    s = s.groupby("seed")["accuracy"].mean().rename("accuracy").reset_index()
                row = seed_summary(s.assign(all=0), "all", "accuracy").iloc[0]
                means.append(row["accuracy mean"])
                stds.append(0.0 if np.isnan(row["accuracy std"]) else row["accuracy std"])
            x = np.arange(len(domains)) + (m - (len(METHODS) - 1) / 2) * width
            hatch = "//" if meth.startswith("HCA without") else None
            ax.bar(x, means, width, yerr=stds, color=color(meth), label=meth, hatch=hatch,
                   edgecolor="white", capsize=2)
        ax.set_xticks(np.arange(len(domains)), domains)
        ax.set_title(f"against the {orc} oracle")
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("domain")
    axes[0].set_ylabel("explanation accuracy (fraction of test moves)")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig
