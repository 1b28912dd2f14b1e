"""The three evidence sources HCA combines: knowledge graph, KKT multipliers, PCMCI.

* :func:`knowledge_graph` builds a signed ``networkx`` digraph of a plant's
  physics (disturbance -> state) and of the controller's known responses
  (state -> input, bound -> input). A hypothesis "cause c drove input j" is a
  path c -> ... -> j; the product of edge signs times the cause's polarity is the
  direction the physics predicts for the move.
* :func:`kkt_evidence` turns the MPC's multipliers into a first-order cost of each
  cause: ``E_c = sum_k gamma^k lambda_{c,k} s_c`` for a bound (scale ``s_c``), and
  ``E_c = sum_k gamma^k |dJ*/dd_k (d_k - d_nom_k)|`` for a forecast.
* :func:`pcmci_pvalues` runs PCMCI (tigramite, ParCorr) on closed-loop data and
  :func:`pcmci_link_pvalue` reads the p-value of the lagged link X -> u.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
from tigramite import data_processing as pp
from tigramite.independence_tests.parcorr import ParCorr
from tigramite.pcmci import PCMCI

from minirepro.papers.hca.mpc import MPCSolution
from minirepro.papers.hca.plants import Plant


# Edge signs may depend on the operating point (bilinear terms): a sign is an
# int or a function of (x, u, d) returning +1/-1.
def _sgn(v: float) -> int:
    return 1 if v >= 0 else -1


# The controller's known responses: which way each input moves to counter a
# rising state (the sign of edge state -> input), per plant.
_RESPONSES: dict[str, dict[tuple[str, str], object]] = {
    "greenhouse": {
        ("T", "heating"): -1,
        ("T", "vent"): lambda x, u, d: _sgn(x[0] - d[1]),  # venting cools only if outside is colder
        ("H", "vent"): lambda x, u, d: _sgn(x[1] - 55.0),  # venting dries only if outside is drier
    },
    "hvac": {
        ("Tz", "T_supply"): -1,
        ("Tz", "airflow"): lambda x, u, d: -_sgn(u[1] - x[0]),  # more air heats if supply is warmer
        ("CO2", "airflow"): +1,
    },
    "cstr": {
        ("T", "T_coolant"): -1,
        ("T", "feed"): lambda x, u, d: -_sgn(d[1] - x[0]),  # more feed heats if the feed is hotter
        ("CA", "feed"): -1,  # less feed: longer residence, more conversion
        ("CA", "T_coolant"): +1,  # a warmer reactor converts more
    },
}
# Physics: the sign of each disturbance's effect on each state.
_PHYSICS: dict[str, dict[tuple[str, str], int]] = {
    "greenhouse": {("solar", "T"): +1, ("solar", "H"): +1, ("T_out", "T"): +1},
    "hvac": {("occupancy", "Tz"): +1, ("occupancy", "CO2"): +1, ("T_out", "Tz"): +1},
    "cstr": {("CA_feed", "CA"): +1, ("CA_feed", "T"): +1, ("T_feed", "T"): +1},
}


def knowledge_graph(plant: Plant) -> nx.DiGraph:
    """Eq. (hca-eq-kg): the plant's signed knowledge graph (physics and controller responses).

    Nodes carry ``kind`` in {"cause", "state", "input"}; edges carry ``sign``: +1,
    -1, or a function ``(x, u, d) -> +-1`` for a sign that depends on the
    operating point (bilinear terms). Forecast causes link to the states they
    heat/feed (physics); a bound cause links to the inputs that push its state
    away from the bound (an upper bound acts like a rising state, a lower bound
    like a falling one).
    """
    if plant.name not in _RESPONSES:
        raise ValueError(f"no knowledge graph for plant {plant.name!r}")
    G = nx.DiGraph(name=plant.name)
    for s in plant.state_names:
        G.add_node(s, kind="state")
    for u in plant.input_names:
        G.add_node(u, kind="input")
    for (s, u), sign in _RESPONSES[plant.name].items():
        G.add_edge(s, u, sign=sign)
    for c in plant.causes:
        G.add_node(c.name, kind="cause", cause_kind=c.kind)
        if c.kind == "forecast":
            d = plant.dist_names[c.index]
            for (dd, s), sign in _PHYSICS[plant.name].items():
                if dd == d:
                    G.add_edge(c.name, s, sign=sign)
        else:
            s = plant.state_names[c.index]
            G.add_edge(c.name, s, sign=+1 if c.kind == "upper" else -1)
    return G


def edge_sign(G: nx.DiGraph, a: str, b: str, x: np.ndarray, u: np.ndarray, d: np.ndarray) -> int:
    """Eq. (hca-eq-kg): the sign ``sigma_ab`` of edge ``a -> b`` at the point ``(x, u, d)``."""
    sign = G.edges[a, b]["sign"]
    return int(sign(x, u, d)) if callable(sign) else int(sign)


def path_signs(G: nx.DiGraph, cause: str, target: str, x: np.ndarray, u: np.ndarray,
               d: np.ndarray) -> list[int]:
    """Eq. (hca-eq-kg): sign products of all simple paths ``cause -> ... -> target``.

    Evaluated at ``(x, u, d)``; an empty list means no path.
    """
    if cause not in G or target not in G:
        raise ValueError(f"nodes {cause!r} and {target!r} must be in the knowledge graph")
    return [int(np.prod([edge_sign(G, a, b, x, u, d) for a, b in zip(p[:-1], p[1:])]))
            for p in nx.all_simple_paths(G, cause, target)]


@dataclass
class MoveContext:
    """Eq. (hca-eq-nmpc): one move and its NMPC solution, what every explainer sees.

    All arrays run over the horizon.

    ``du``: the move ``u_t - u_{t-1}`` scaled by input ranges, ``(n_u,)``;
    ``sol``: the MPC solution at t; ``d_dev``: forecast minus nominal ``(N, n_d)``;
    ``x_lower``/``x_upper``: the bounds used ``(N, n_x)``; ``d``: the forecast ``(N, n_d)``.
    """

    du: np.ndarray
    sol: MPCSolution
    d_dev: np.ndarray
    x_lower: np.ndarray
    x_upper: np.ndarray
    d: np.ndarray  # the forecast used, (N, n_d)

    @property
    def primary_input(self) -> int:
        """The input that moved most (in range-scaled units)."""
        return int(np.argmax(np.abs(self.du)))


def cause_polarity(plant: Plant, ctx: MoveContext, cause: int, active_frac: float = 0.2,
                   margin_frac: float = 0.5) -> int:
    """Eq. (hca-eq-kg): the polarity ``pol(c)``, +1/-1 if the cause is active, 0 if not.

    A forecast is active when its mean deviation from nominal exceeds
    ``active_frac`` of the cause's event size (the sign is the deviation's sign
    times the event's). A bound is active (+1) when the planned states come
    within ``margin_frac * scale`` of it somewhere in the horizon.
    """
    c = plant.causes[cause]
    if c.kind == "forecast":
        dev = float(np.mean(ctx.d_dev[:, c.index]))
        if abs(dev) < active_frac * abs(c.event):
            return 0
        return int(np.sign(dev))
    xs = ctx.sol.x[1:, c.index]
    if c.kind == "upper":
        gap = np.min(ctx.x_upper[:, c.index] - xs)
    else:
        gap = np.min(xs - ctx.x_lower[:, c.index])
    return 1 if gap < margin_frac * c.scale else 0


def kg_evidence(G: nx.DiGraph, plant: Plant, ctx: MoveContext) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (hca-eq-kg): ``KG(c)`` for every cause, on the move's primary input ``j*``.

    Returns ``(support, consistent)``, both ``(n_causes,)``: ``consistent[c]`` is
    1 if a path c -> primary input exists whose sign (at the current operating
    point) times the cause's polarity matches the sign of the observed move;
    ``support[c] = consistent[c] * [c is active]``. Validation uses ``support``:
    an inactive cause explains nothing.
    """
    j = ctx.primary_input
    target = plant.input_names[j]
    move_sign = np.sign(ctx.du[j])
    x, u, d = ctx.sol.x[0], ctx.sol.u[0], ctx.d[0]
    support = np.zeros(len(plant.causes))
    consistent = np.zeros(len(plant.causes))
    for i, c in enumerate(plant.causes):
        signs = path_signs(G, c.name, target, x, u, d)
        pol = cause_polarity(plant, ctx, i)
        # an inactive bound can only push one way; an inactive forecast predicts no direction
        eff = pol if pol != 0 else (1 if c.kind != "forecast" else 0)
        if eff != 0 and any(s * eff == move_sign for s in signs):
            consistent[i] = 1.0
            support[i] = 1.0 if pol != 0 else 0.0
    return support, consistent


def kkt_evidence(plant: Plant, ctx: MoveContext, gamma: float = 0.9) -> np.ndarray:
    """Eq. (hca-eq-kkt): first-order cost ``E_c`` of each cause from the multipliers; (n_causes,).

    Bound on state i (upper or lower): ``sum_k gamma^k lambda_{k,i} s_c``.
    Forecast of disturbance i: ``sum_k gamma^k |dJ*/dd_{k,i} (d_{k,i} - nom_{k,i})|``.
    """
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"discount gamma must be in (0, 1], got {gamma}")
    sol = ctx.sol
    N = sol.u.shape[0]
    disc = gamma ** np.arange(N)
    E = np.zeros(len(plant.causes))
    for i, c in enumerate(plant.causes):
        if c.kind == "upper":
            E[i] = np.sum(disc * sol.lam_x_upper[:, c.index]) * c.scale
        elif c.kind == "lower":
            E[i] = np.sum(disc * sol.lam_x_lower[:, c.index]) * c.scale
        else:
            E[i] = np.sum(disc * np.abs(sol.sens_d[:, c.index] * ctx.d_dev[:, c.index]))
    return E


def pcmci_pvalues(data: np.ndarray, tau_max: int = 3, pc_alpha: float | None = 0.2) -> np.ndarray:
    """Eq. (hca-eq-pcmci): PCMCI (ParCorr) p-values of the lagged links; (n_vars, n_vars, tau_max+1).

    ``data`` is ``(T, n_vars)``; entry ``[i, j, tau]`` is the p-value of
    ``X^i_{t-tau} -> X^j_t`` given the conditions PCMCI selected.
    """
    data = np.asarray(data, float)
    if data.ndim != 2 or data.shape[0] < 5 * (tau_max + 1) or not np.all(np.isfinite(data)):
        raise ValueError(f"PCMCI needs finite data of shape (T, n_vars) with T >= {5 * (tau_max + 1)}, "
                         f"got {data.shape}")
    std = data.std(axis=0)
    if np.any(std < 1e-12):
        raise ValueError(f"PCMCI data has constant columns {np.flatnonzero(std < 1e-12).tolist()}")
    frame = pp.DataFrame((data - data.mean(0)) / std)
    pcmci = PCMCI(dataframe=frame, cond_ind_test=ParCorr(significance="analytic"), verbosity=0)
    res = pcmci.run_pcmci(tau_min=1, tau_max=tau_max, pc_alpha=pc_alpha, max_conds_dim=2)
    return np.asarray(res["p_matrix"])


def pcmci_link_pvalue(p_matrix: np.ndarray, source: int, target: int) -> float:
    """Eq. (hca-eq-pcmci): the least p-value of ``source_{t-tau} -> target_t`` over tau >= 1."""
    return float(np.min(p_matrix[source, target, 1:]))


def pcmci_variables(plant: Plant) -> list[str]:
    """Eq. (hca-eq-pcmci): the closed-loop variables PCMCI sees: states, mean forecasts, inputs."""
    return list(plant.state_names) + [f"{d} forecast" for d in plant.dist_names] + list(plant.input_names)


def cause_variable(plant: Plant, cause: int) -> int:
    """Eq. (hca-eq-pcmci): the variable ``X_c`` of a cause: its state (bounds) or its forecast."""
    c = plant.causes[cause]
    return c.index if c.kind != "forecast" else plant.n_x + c.index


def pcmci_evidence(plant: Plant, p_matrix: np.ndarray, primary_input: int) -> np.ndarray:
    """Eqs. (hca-eq-pcmci, hca-eq-score): the term ``1 - p_PCMCI(X_c -> u_j*)``; ``(n_causes,)``."""
    target = plant.n_x + plant.n_d + primary_input
    return np.array([1.0 - pcmci_link_pvalue(p_matrix, cause_variable(plant, i), target)
                     for i in range(len(plant.causes))])
