"""LIME (the ``lime`` package) on the NMPC as a black box.

Features: one knob per candidate cause (a shift of a bound over the horizon, in
state units; a factor on a forecast's deviation from nominal: 1 is the actual
forecast, 0 is nominal) and the current state. LIME perturbs them with its
quartile discretizer fitted on samples drawn uniformly *inside the physical
ranges*, so every perturbed input stays inside those ranges. The black box maps
features to the first move of the input that moved most. LIME's explanation is
its top-weighted feature; a state feature is read as the bound on that state
nearest to the current value (a generous reading for LIME).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from lime.lime_tabular import LimeTabularExplainer

from minirepro.papers.hca.mpc import NMPC, MPCInfeasibleError, MPCProblem, MPCSolution
from minirepro.papers.hca.plants import Plant


def lime_features(plant: Plant) -> tuple[list[str], np.ndarray]:
    """Eq. (hca-eq-lime): features ``z`` (cause knobs, then states) and their ranges (n, 2)."""
    names = [f"{c.name} knob" for c in plant.causes] + list(plant.state_names)
    ranges = [c.feature_range for c in plant.causes] + [tuple(r) for r in plant.physical_x_range]
    return names, np.array(ranges, float)


def apply_features(plant: Plant, problem: MPCProblem, d_nominal: np.ndarray,
                   z: np.ndarray) -> MPCProblem:
    """Eq. (hca-eq-lime): the MPC problem for the feature vector ``z`` (``(n_features,)``)."""
    pr = problem.copy()
    nc = len(plant.causes)
    for i, c in enumerate(plant.causes):
        if c.kind == "upper":
            pr.x_upper[:, c.index] = problem.x_upper[:, c.index] + z[i]
        elif c.kind == "lower":
            pr.x_lower[:, c.index] = problem.x_lower[:, c.index] + z[i]
        else:
            dev = problem.d[:, c.index] - d_nominal[:, c.index]
            pr.d[:, c.index] = d_nominal[:, c.index] + z[i] * dev
    pr.x0 = np.asarray(z[nc:], float).copy()
    return pr


def instance_features(plant: Plant, problem: MPCProblem) -> np.ndarray:
    """Eq. (hca-eq-lime): ``z_0``, the explained move's own features (shift 0, factor 1, state)."""
    knobs = [1.0 if c.kind == "forecast" else 0.0 for c in plant.causes]
    return np.concatenate([knobs, problem.x0])


def feature_cause(plant: Plant, problem: MPCProblem, top: int) -> int:
    """Eq. (hca-eq-lime): the cause named by feature ``top``: its own cause for a knob, the
    bound on that state nearest to the current value for a state feature (a generous reading)."""
    nc = len(plant.causes)
    if not 0 <= top < nc + plant.n_x:
        raise ValueError(f"feature index {top} out of range for {nc + plant.n_x} features")
    if top < nc:
        return int(top)
    s = top - nc
    cands = [i for i, c in enumerate(plant.causes) if c.kind != "forecast" and c.index == s]
    gaps = [(problem.x_upper[:, s].min() - problem.x0[s]) if plant.causes[i].kind == "upper"
            else (problem.x0[s] - problem.x_lower[:, s].max()) for i in cands]
    return int(cands[int(np.argmin(gaps))])


@dataclass
class LimeResult:
    """Eq. (hca-eq-lime): LIME's label ``c^``, its feature weights, and the black-box queries."""

    label: int
    weights: dict[str, float]
    n_queries: int
    n_infeasible: int
    queried: np.ndarray = field(repr=False)  # (n_queries, n_features)


def lime_explain(mpc: NMPC, problem: MPCProblem, d_nominal: np.ndarray, primary_input: int,
                 num_samples: int = 100, seed: int = 0, sol: MPCSolution | None = None) -> LimeResult:
    """Eq. (hca-eq-lime): explain the first move of ``primary_input`` with LIME (regression mode).

    ``sol`` (the explained move's solution) warm-starts every black-box query.
    """
    plant = mpc.plant
    if num_samples < 10:
        raise ValueError(f"LIME needs num_samples >= 10, got {num_samples}")
    if not 0 <= primary_input < plant.n_u:
        raise ValueError(f"primary_input must be in [0, {plant.n_u}), got {primary_input}")
    names, ranges = lime_features(plant)
    rng = np.random.default_rng(seed)
    train = rng.uniform(ranges[:, 0], ranges[:, 1], size=(400, len(names)))
    z0 = np.clip(instance_features(plant, problem), ranges[:, 0], ranges[:, 1])
    queried: list[np.ndarray] = []
    bad = [0]

    def black_box(Z: np.ndarray) -> np.ndarray:
        out = np.empty(len(Z))
        for r, z in enumerate(Z):
            queried.append(np.array(z))
            try:
                pz = apply_features(plant, problem, d_nominal, z)
                out[r] = (mpc.solve(pz, init=sol, retry=False) if sol is not None else mpc.solve(pz, warm=False)).u[0, primary_input]
            except MPCInfeasibleError:  # the controller would hold its last input
                bad[0] += 1
                out[r] = problem.u_prev[primary_input]
        return out

    explainer = LimeTabularExplainer(train, mode="regression", feature_names=names,
                                     discretize_continuous=True, discretizer="quartile",
                                     random_state=seed)
    exp = explainer.explain_instance(z0, black_box, num_features=len(names), num_samples=num_samples)
    weights = dict.fromkeys(names, 0.0)
    for idx, w in exp.as_map()[1]:
        weights[names[idx]] = float(w)
    top = max(range(len(names)), key=lambda i: abs(weights[names[i]]))
    return LimeResult(label=feature_cause(plant, problem, top), weights=weights, n_queries=len(queried), n_infeasible=bad[0],
                      queried=np.array(queried))
