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
