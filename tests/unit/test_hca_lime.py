"""LIME baseline of the HCA chapter: the black box is queried inside the physical ranges."""

from __future__ import annotations

import numpy as np
import pytest

from minirepro.papers.hca.lime_baseline import (
    apply_features,
    instance_features,
    lime_explain,
    lime_features,
)
from minirepro.papers.hca.mpc import NMPC, MPCProblem
from minirepro.papers.hca.plants import get_plant

N = 8


def _problem(plant):
    lo = np.tile(plant.x_lower, (N, 1)).astype(float)
    hi = np.tile(plant.x_upper, (N, 1)).astype(float)
    hi[3:, 0] = 19.5
    d = np.tile([0.3, 14.0], (N, 1))
    return MPCProblem(np.array([21.0, 75.0]), np.array([0.2, 0.2]), d, lo, hi), d.copy()


def test_instance_features_reproduce_the_problem():
    plant = get_plant("greenhouse")
    pr, d_nom = _problem(plant)
    z = instance_features(plant, pr)
    back = apply_features(plant, pr, d_nom, z)
    for name in ("x0", "d", "x_lower", "x_upper"):
        np.testing.assert_allclose(getattr(back, name), getattr(pr, name))


def test_lime_perturbations_stay_inside_physical_ranges():
    plant = get_plant("greenhouse")
    mpc = NMPC(plant, N=N, max_iter=40)
    pr, d_nom = _problem(plant)
    sol = mpc.solve(pr, warm=False)
    res = lime_explain(mpc, pr, d_nom, primary_input=1, num_samples=30, seed=1, sol=sol)
    _, ranges = lime_features(plant)
    assert res.n_queries == 30
    assert np.all(res.queried >= ranges[:, 0] - 1e-9) and np.all(res.queried <= ranges[:, 1] + 1e-9)
    assert 0 <= res.label < len(plant.causes)
    assert set(res.weights) == set(lime_features(plant)[0])
    with pytest.raises(ValueError, match="num_samples"):
        lime_explain(mpc, pr, d_nom, primary_input=1, num_samples=3)
    with pytest.raises(ValueError, match="primary_input"):
        lime_explain(mpc, pr, d_nom, primary_input=5, num_samples=30)


def test_feature_cause_reads_knobs_as_themselves_and_states_as_the_nearest_bound():
    from minirepro.papers.hca.lime_baseline import feature_cause

    plant = get_plant("greenhouse")
    pr, _ = _problem(plant)  # T = 21 under an upper bound tightened to 19.5: nearer than the 15 floor
    nc = len(plant.causes)
    assert [feature_cause(plant, pr, i) for i in range(nc)] == list(range(nc))
    assert plant.causes[feature_cause(plant, pr, nc)].name == "T upper bound"
    pr.x_upper[:, 0], pr.x_lower[:, 0] = 28.0, 20.5  # now the floor is nearer
    assert plant.causes[feature_cause(plant, pr, nc)].name == "T lower bound"
    assert plant.causes[feature_cause(plant, pr, nc + 1)].name == "H upper bound"
    with pytest.raises(ValueError, match="feature index"):
        feature_cause(plant, pr, nc + plant.n_x)


def test_kernelshap_attributions_add_up_and_are_reproducible():
    """Shapley efficiency: the attributions sum to the change of the move from the reference."""
    from minirepro.papers.hca.shap_baseline import shap_explain, shap_reference

    plant = get_plant("greenhouse")
    mpc = NMPC(plant, N=N, tol=1e-10)
    pr, d_nom = _problem(plant)
    sol = mpc.solve(pr, warm=False)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    res = shap_explain(mpc, pr, d_nom, primary_input=1, num_samples=40, seed=5, sol=sol)
    np.testing.assert_array_equal(np.random.get_state()[1], before)  # the global generator is restored
    names, ranges = lime_features(plant)
    ref_z = shap_reference(plant)
    assert ref_z[0] == ranges[0, 1] and ref_z[1] == ranges[1, 0] and ref_z[3] == 0.0  # relaxed, nominal
    ref = apply_features(plant, pr, d_nom, ref_z)
    f_ref = mpc.solve(ref, init=sol).u[0, 1]
    assert sum(res.phi.values()) == pytest.approx(sol.u[0, 1] - f_ref, abs=1e-6)
    assert 0 <= res.label < len(plant.causes) and res.n_queries >= 30 and set(res.phi) == set(names)
    again = shap_explain(mpc, pr, d_nom, primary_input=1, num_samples=40, seed=5, sol=sol)
    assert again.phi == pytest.approx(res.phi, abs=1e-9)
    with pytest.raises(ValueError, match="num_samples"):
        shap_explain(mpc, pr, d_nom, primary_input=1, num_samples=3)
