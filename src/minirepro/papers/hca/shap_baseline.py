"""KernelSHAP (the ``shap`` package) on the NMPC as a black box: a second post-hoc baseline.

The features, their physical ranges and the reading of a state feature as a
bound are LIME's (:mod:`minirepro.papers.hca.lime_baseline`), so the two
black-box explainers differ only in how they attribute. KernelSHAP
{cite}`hca-shap` estimates Shapley values of the controller's first move
``u_{j*,0}(z)`` by a weighted linear regression over coalitions: a feature in a
coalition keeps the explained move's value ``z_0``, one outside takes the
*reference* value. The reference is one point, "nothing happening": every bound
relaxed to the far end of its knob's range, every forecast at nominal, the state
at the centre of its physical range (:func:`shap_reference`), so every
coalition is one NMPC query. The explanation is the feature with the largest
``|phi|``.
Nothing is downloaded; ``shap`` is imported on first use.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from minirepro.papers.hca.lime_baseline import (
    apply_features,
    feature_cause,
    instance_features,
    lime_features,
)
from minirepro.papers.hca.mpc import NMPC, MPCInfeasibleError, MPCProblem, MPCSolution
from minirepro.papers.hca.plants import Plant


def shap_reference(plant: Plant) -> np.ndarray:
    """[reconstruction] KernelSHAP's reference point ``(n_features,)``: upper bounds shifted up and
    lower bounds shifted down by their knob's full range, forecast deviations off (factor 0), the
    state at the centre of its physical range."""
    _, ranges = lime_features(plant)
    ref = ranges.mean(axis=1)
    for i, c in enumerate(plant.causes):
        ref[i] = {"upper": ranges[i, 1], "lower": ranges[i, 0]}.get(c.kind, 0.0)
    return ref


@dataclass
class ShapResult:
    """[reconstruction] KernelSHAP's label, its Shapley values per feature and the black-box queries."""

    label: int
    phi: dict[str, float]
    n_queries: int
    n_infeasible: int


def shap_explain(mpc: NMPC, problem: MPCProblem, d_nominal: np.ndarray, primary_input: int,
                 num_samples: int = 50, seed: int = 0, sol: MPCSolution | None = None) -> ShapResult:
    """[reconstruction] KernelSHAP (Lundberg & Lee 2017) of the first move of ``primary_input``.

    ``num_samples`` coalitions (NMPC queries) per explanation, a single reference
    point (:func:`shap_reference`), no L1 selection; queries the
    MPC cannot solve return the previous input (the controller holding), as for LIME.
    """
    with warnings.catch_warnings():  # shap's plotting colours warn on import (matplotlib deprecations)
        warnings.simplefilter("ignore")
        import shap  # imported here: a second or so, paid only by runs that use it

    plant = mpc.plant
    if num_samples < 10:
        raise ValueError(f"KernelSHAP needs num_samples >= 10, got {num_samples}")
    if not 0 <= primary_input < plant.n_u:
        raise ValueError(f"primary_input must be in [0, {plant.n_u}), got {primary_input}")
    names, ranges = lime_features(plant)
    z0 = np.clip(instance_features(plant, problem), ranges[:, 0], ranges[:, 1])
    reference = shap_reference(plant)[None, :]
    counts = [0, 0]

    def black_box(Z: np.ndarray) -> np.ndarray:
        out = np.empty(len(Z))
        for r, z in enumerate(np.atleast_2d(Z)):
            counts[0] += 1
            try:
                pz = apply_features(plant, problem, d_nominal, z)
                res = mpc.solve(pz, init=sol, retry=False) if sol is not None else mpc.solve(pz, warm=False)
                out[r] = res.u[0, primary_input]
            except MPCInfeasibleError:
                counts[1] += 1
                out[r] = problem.u_prev[primary_input]
        return out

    state = np.random.get_state()
    np.random.seed(seed % 2**32)  # KernelExplainer samples coalitions with NumPy's global generator
    try:
        explainer = shap.KernelExplainer(black_box, reference)
        with warnings.catch_warnings():  # a singular regression (few samples) falls back to least squares
            warnings.simplefilter("ignore", UserWarning)
            phi = np.asarray(explainer.shap_values(z0, nsamples=num_samples, silent=True, l1_reg=False)).ravel()
    finally:
        np.random.set_state(state)
    top = int(np.argmax(np.abs(phi)))
    return ShapResult(label=feature_cause(plant, problem, top), phi=dict(zip(names, map(float, phi))),
                      n_queries=counts[0], n_infeasible=counts[1])
