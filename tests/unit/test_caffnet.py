"""CAffNet: the CAffine layer and its baselines against independent references.

References: cvxpy projections onto the polytope, a brute-force search over row
subsets written with NumPy, closed forms (HardNet-Aff with full row rank, 1-D
intervals), an LP for emptiness, and invariants checked with hypothesis.
"""

from __future__ import annotations

import itertools
import math

import cvxpy as cp
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from minirepro.papers import caffnet as C

# ------------------------------------------------------------------ references


def cvxpy_projection(f: np.ndarray, A: np.ndarray, b: np.ndarray, n_eq: int = 0) -> np.ndarray:
    """argmin ||y - f|| s.t. A y <= b, solved by cvxpy (Clarabel). The last ``2 n_eq``
    rows are equality pairs (C; -C); cvxpy gets them as ``C y = d``, which is better posed."""
    y = cp.Variable(f.shape[0])
    m = A.shape[0] - 2 * n_eq
    cons = [A[:m] @ y <= b[:m]]
    if n_eq:
        cons.append(A[m:m + n_eq] @ y == b[m:m + n_eq])
    prob = cp.Problem(cp.Minimize(cp.sum_squares(y - f)), cons)
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == cp.OPTIMAL
    return y.value


def brute_force_caffine(f, w, A, b, tol=C.TOL):
    """The CAffine output by a plain loop over subsets, with numpy.linalg.pinv."""
    m, n = A.shape
    best, best_d = None, math.inf
    if np.max(A @ f - b) <= tol:
        best, best_d = f, 0.0
    for k in range(1, min(m, n) + 1):
        for g in itertools.combinations(range(m), k):
            Ag, bg = A[list(g)], b[list(g)]
            P = np.linalg.pinv(Ag)
            c = f - P @ (Ag @ f - bg) + (np.eye(n) - P @ Ag) @ w
            d = np.linalg.norm(c - f)
            if np.max(A @ c - b) <= tol and d < best_d:
                best, best_d = c, d
    return best


def random_polytope(rng, B, m, n, n_eq=0, shared=False):
    """Random A (B, m + 2 n_eq, n), b with a known interior-or-boundary point y0."""
    shape = (m, n) if shared else (B, m, n)
    A = rng.normal(size=shape)
    C_ = rng.normal(size=(n_eq, n) if shared else (B, n_eq, n))
    y0 = rng.normal(size=(B, n))
    Ay0 = np.einsum("bmn,bn->bm", A, y0) if not shared else y0 @ A.T
    slack = rng.uniform(0, 1, size=(B, m)) * (rng.uniform(size=(B, m)) < 0.7)
    b = Ay0 + slack
    if n_eq:
        d = np.einsum("bkn,bn->bk", C_, y0) if not shared else y0 @ C_.T
        A = np.concatenate([A, C_, -C_], axis=-2)  # equalities as row pairs
        b = np.concatenate([b, d, -d], axis=-1)
    return torch.as_tensor(A), torch.as_tensor(b)


# ------------------------------------------------------------------ subsets, faces


@pytest.mark.parametrize("m,n", [(1, 1), (4, 1), (3, 5), (6, 3), (8, 4)])
def test_subsets_enumerate_every_row_set_once(m, n):
    S = C.constraint_subsets(m, n)
    assert S.shape == (C.n_subsets(m, n), min(m, n))
    sets = {tuple(sorted(int(i) for i in row if i < m)) for row in S}
    expected = {g for k in range(1, min(m, n) + 1) for g in itertools.combinations(range(m), k)}
    assert sets == expected and len(sets) == len(S)
    assert C.n_subsets(m, n) == sum(math.comb(m, k) for k in range(1, min(m, n) + 1))


def test_subsets_refuse_a_combinatorial_blowup():
    with pytest.raises(ValueError, match="row subsets"):
        C.constraint_subsets(60, 10)


def test_faces_pinv_and_null_projector_match_numpy():
    rng = np.random.default_rng(0)
    A = torch.as_tensor(rng.normal(size=(3, 5, 3)))
    F = C.compute_faces(A)
    for i in range(3):
        for s, row in enumerate(F.subsets):
            g = [int(j) for j in row if j < 5]
            P = np.linalg.pinv(A[i, g].numpy())
            k = len(g)
            assert np.allclose(F.pinv[i, s, :, :k].numpy(), P, atol=1e-12)
            assert np.allclose(F.pinv[i, s, :, k:].numpy(), 0.0)
            assert np.allclose(F.null[i, s].numpy(), np.eye(3) - P @ A[i, g].numpy(), atol=1e-12)


# ------------------------------------------------------------------ the CAffine layer


def test_caffine_matches_brute_force_with_random_w():
    rng = np.random.default_rng(1)
    A, b = random_polytope(rng, 20, 5, 3, n_eq=1)
    f = torch.as_tensor(rng.normal(scale=3, size=(20, 3)))
    w = torch.as_tensor(rng.normal(size=(20, 3)))
    y = C.caffine(f, w, A, b)
    for i in range(20):
        ref = brute_force_caffine(f[i].numpy(), w[i].numpy(), A[i].numpy(), b[i].numpy())
        assert np.allclose(y[i].numpy(), ref, atol=1e-9)


def test_caffine_with_w_zero_is_the_cvxpy_projection():
    rng = np.random.default_rng(2)
    A, b = random_polytope(rng, 15, 6, 3, shared=True)
    f = torch.as_tensor(rng.normal(scale=3, size=(15, 3)))
    y = C.caffine(f, None, A, b)
    for i in range(15):
        assert np.allclose(y[i].numpy(), cvxpy_projection(f[i].numpy(), A.numpy(), b[i].numpy()),
                           atol=1e-6)


def test_caffine_returns_f_when_f_is_feasible_and_gradients_flow():
    A = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    b = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    f = torch.tensor([[0.2, -0.5]], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([[3.0, 3.0]], dtype=torch.float64, requires_grad=True)
    y, idx = C.caffine(f, w, A, b, return_index=True)
    assert idx.item() == 0 and torch.equal(y, f)
    f2 = torch.tensor([[2.0, 0.0]], dtype=torch.float64, requires_grad=True)
    w2 = torch.tensor([[0.0, 0.3]], dtype=torch.float64, requires_grad=True)
    y2 = C.caffine(f2, w2, A, b)            # face y1 = 1, moved along it by w
    assert torch.allclose(y2, torch.tensor([[1.0, 0.3]], dtype=torch.float64))
    y2.sum().backward()
    assert torch.allclose(f2.grad, torch.tensor([[0.0, 1.0]], dtype=torch.float64))
    assert torch.allclose(w2.grad, torch.tensor([[0.0, 1.0]], dtype=torch.float64))


def test_equality_rows_are_met_exactly():
    rng = np.random.default_rng(3)
    Cm = torch.as_tensor(rng.normal(size=(2, 4)))
    d = torch.as_tensor(rng.normal(size=(10, 2)))
    A_eq, b_eq = C.equality_rows(Cm, d)
    G = torch.as_tensor(rng.normal(size=(3, 4)))
    y0 = torch.linalg.lstsq(Cm, d.T).solution.T
    h = y0 @ G.T + 1.0
    A, b = torch.cat([G, A_eq]), torch.cat([h, b_eq], dim=1)
    f = torch.as_tensor(rng.normal(scale=2, size=(10, 4)))
    w = torch.as_tensor(rng.normal(size=(10, 4)))
    y = C.caffine(f, w, A, b)
    assert torch.allclose(y @ Cm.T, d, atol=1e-10)
    assert C.max_violation(y, A, b).max() <= 1e-10


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 4), m=st.integers(1, 7), n_eq=st.integers(0, 1),
       seed=st.integers(0, 2**31 - 1), scale=st.floats(0.1, 10.0), shared=st.booleans())
@example(n=3, m=7, n_eq=1, seed=271916663, scale=9.742125803947268, shared=False).via(
    "an ill-conditioned face: the recomputed candidate was 1.26e-10 outside")
def test_property_caffine_output_is_always_feasible(n, m, n_eq, seed, scale, shared):
    """For random A(x), b(x) with m below and above n (equalities included), every
    output satisfies every row, whatever f and w are."""
    rng = np.random.default_rng(seed)
    A, b = random_polytope(rng, 8, m, n, n_eq=n_eq if n > 1 else 0, shared=shared)
    f = torch.as_tensor(rng.normal(scale=scale, size=(8, n)))
    w = torch.as_tensor(rng.normal(scale=scale, size=(8, n)))
    y = C.caffine(f, w, A, b)
    assert C.max_violation(y, A, b).max().item() <= C.TOL
    y0 = C.caffine(f, None, A, b)           # w = 0: the projection, never farther than y
    assert (torch.linalg.vector_norm(y0 - f, dim=1)
            <= torch.linalg.vector_norm(y - f, dim=1) + 1e-9).all()


def test_property_covers_m_below_and_above_n():
    # the strategy above draws m in [1, 7] and n in [1, 4]: both regimes occur
    assert any(m < n for m in range(1, 8) for n in range(1, 5))
    assert any(m > n for m in range(1, 8) for n in range(1, 5))


# ------------------------------------------------------------------ bad input


def test_empty_feasible_set_raises_clear_error():
    A = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)     # y <= -1 and y >= 1
    b = torch.tensor([[-1.0, -1.0], [1.0, 1.0]], dtype=torch.float64)
    f = torch.zeros(2, 1, dtype=torch.float64)
    with pytest.raises(C.InfeasibleConstraintsError, match=r"no solution for 1 of 2 .*sample"):
        C.caffine(f, None, A, b)
    with pytest.raises(C.InfeasibleConstraintsError, match="no solution"):
        C.project_polytope(f, A, b)
    A2 = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    b2 = torch.tensor([[0.0, -1.0, 5.0]], dtype=torch.float64)
    with pytest.raises(C.InfeasibleConstraintsError):
        C.project_polytope(torch.zeros(1, 2, dtype=torch.float64), A2, b2)


def test_lp_feasibility_agrees_with_a_known_point():
    rng = np.random.default_rng(4)
    A, b = random_polytope(rng, 1, 6, 3, shared=True)
    p = C.lp_feasible_point(A.numpy(), b[0].numpy())
    assert p is not None and np.max(A.numpy() @ p - b[0].numpy()) <= 1e-8


def test_float32_is_refused_or_upcast_never_used_silently():
    A = torch.tensor([[1.0]], dtype=torch.float32)
    b = torch.tensor([[0.5]], dtype=torch.float32)
    f = torch.tensor([[2.0]], dtype=torch.float32)
    with pytest.raises(TypeError, match="float64"):
        C.caffine(f, None, A, b)
    with pytest.raises(TypeError, match="float64"):
        C.caffine(f.double(), None, A, b.double())
    y = C.caffine(f, None, A, b, upcast=True)
    assert y.dtype == torch.float64 and y.item() == 0.5


@pytest.mark.parametrize("bad,match", [
    (dict(f=torch.zeros(2, 3, dtype=torch.float64)), "shape"),
    (dict(b=torch.zeros(2, 5, dtype=torch.float64)), "rows"),
    (dict(A=torch.zeros(2, dtype=torch.float64)), "shape"),
    (dict(b=torch.full((2, 2), math.nan, dtype=torch.float64)), "finite"),
    (dict(tol=0.0), "tol"),
])
def test_bad_shapes_and_values_raise(bad, match):
    args = dict(f=torch.zeros(2, 1, dtype=torch.float64), w=None,
                A=torch.ones(2, 1, dtype=torch.float64), b=torch.ones(2, 2, dtype=torch.float64))
    tol = bad.pop("tol", C.TOL)
    args.update(bad)
    with pytest.raises((ValueError, TypeError), match=match):
        C.caffine(args["f"], args["w"], args["A"], args["b"], tol=tol)


@pytest.mark.parametrize("which", ["f", "w"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_network_outputs_are_named_not_blamed_on_the_constraints(which, value):
    """A diverging network (NaN or inf in f or w) is told so, naming the branch and the samples;
    before, it read "ill-conditioned constraints; rescale the rows of A(x), b(x)" (or, for w,
    passed silently). The fixed projection names f the same way."""
    A = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]], dtype=torch.float64)
    b = torch.ones(3, 4, dtype=torch.float64)
    f, w = torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, 2, dtype=torch.float64)
    (f if which == "f" else w)[1, 0] = value
    with pytest.raises(ValueError, match=rf"output {which} is not finite .* 1 of 3 inputs \(samples 1\)") as err:
        C.caffine(f, w, A, b)
    assert "ill-conditioned" not in str(err.value) and "rescale" not in str(err.value)
    if which == "f":
        with pytest.raises(ValueError, match=r"output f is not finite .* 1 of 3 inputs"):
            C.project_polytope(f, A, b)


def test_finite_outputs_on_ill_conditioned_rows_still_report_the_rows():
    """The other path: finite f, a nonempty set, but an equality pair a y = c with rows of size
    ~1e6, so a (c / a) - c is a rounding error of ~1e-10 and no candidate meets the tolerance
    for some of the 40 inputs: the error still blames the rows' conditioning, not the network."""
    rng = np.random.default_rng(0)
    a, c = rng.uniform(1e6, 1e7, size=(2, 40))
    A = torch.as_tensor(np.stack([a, -a], axis=1)[:, :, None], dtype=torch.float64)   # (40, 2, 1)
    b = torch.as_tensor(np.stack([c, -c], axis=1), dtype=torch.float64)                # (40, 2)
    f = torch.zeros(40, 1, dtype=torch.float64)
    with pytest.raises(C.InfeasibleConstraintsError, match="ill-conditioned.*rescale the rows"):
        C.caffine(f, None, A, b)


# ------------------------------------------------------------------ baselines


@pytest.mark.parametrize("n,m,n_eq,shared,sweeps", [
    (1, 4, 0, True, 10), (1, 3, 0, False, 10), (3, 6, 0, False, 10), (4, 4, 2, True, 10),
    (4, 4, 2, True, 0), (3, 5, 1, False, 0)])
def test_fixed_projection_matches_cvxpy(n, m, n_eq, shared, sweeps):
    """Both paths (Hildreth guess + KKT check, and the NNLS fallback with sweeps=0)."""
    rng = np.random.default_rng(5 + n + m + sweeps)
    A, b = random_polytope(rng, 12, m, n, n_eq=n_eq, shared=shared)
    f = torch.as_tensor(rng.normal(scale=3, size=(12, n)), dtype=torch.float64)
    y = C.project_polytope(f, A, b, sweeps=sweeps)
    for i in range(12):
        Ai = A.numpy() if shared else A[i].numpy()
        ref = cvxpy_projection(f[i].numpy(), Ai, b[i].numpy(), n_eq)
        assert np.allclose(y[i].numpy(), ref, atol=1e-6)
    assert C.max_violation(y, A, b).max() <= C.TOL


def test_fixed_projection_jacobian_is_the_null_space_projector():
    A = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=torch.float64)
    b = torch.tensor([[1.0, 5.0]], dtype=torch.float64)
    f = torch.tensor([[2.0, 2.0]], dtype=torch.float64, requires_grad=True)
    y = C.project_polytope(f, A, b)          # only y1 + y2 <= 1 is active
    assert torch.allclose(y, torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    J = torch.autograd.functional.jacobian(lambda z: C.project_polytope(z, A, b), f.detach())
    assert torch.allclose(J[0, :, 0, :], 0.5 * torch.tensor([[1.0, -1.0], [-1.0, 1.0]],
                                                            dtype=torch.float64))


def test_hardnet_is_exact_for_full_row_rank_and_fails_for_m_above_n():
    assert C.hardnet_control(n=4, m=3, count=200, seed=0) < 1e-10
    assert C.hardnet_control(n=2, m=5, count=200, seed=0) > 1e-3
    # closed form: one row y1 + y2 <= 1 from f = (2, 2) moves to (0.5, 0.5)
    y = C.hardnet_aff(torch.tensor([[2.0, 2.0]], dtype=torch.float64),
                      torch.tensor([[1.0, 1.0]], dtype=torch.float64),
                      torch.tensor([[-math.inf]], dtype=torch.float64),
                      torch.tensor([[1.0]], dtype=torch.float64))
    assert torch.allclose(y, torch.tensor([[0.5, 0.5]], dtype=torch.float64))


# ------------------------------------------------------------------ scenarios, training


def test_piecewise_target_lies_inside_its_bounds():
    x = C.PiecewiseScenario().grid_x(4001)
    bl, bu = C.pwc_bounds(x)
    t = C.pwc_target(x)[:, 0]
    assert (bl.amax(dim=1) <= t + 1e-12).all() and (t <= bu.amin(dim=1) + 1e-12).all()
    A, b = C.PiecewiseScenario().constraints(x)
    assert C.max_violation(C.pwc_target(x), A, b).max() <= 1e-12


def test_qp_reference_is_feasible_and_optimal_against_projected_points():
    sc = C.OptimisationScenario(n=4, n_ineq=4, n_eq=2, convex=True, problem_seed=0)
    x = sc.sample_x(30, np.random.default_rng(0))
    y_star = sc.target(x)
    A, b = sc.constraints(x)
    assert C.max_violation(y_star, A, b).max() <= 1e-7
    rng = np.random.default_rng(1)
    for _ in range(5):  # any other feasible point has an objective at least as large
        other = C.project_polytope(torch.as_tensor(rng.normal(scale=2, size=(30, 4))), A, b)
        assert (sc.objective(other) >= sc.objective(y_star) - 1e-7).all()


def test_ipopt_reference_is_feasible_and_a_local_minimum():
    sc = C.OptimisationScenario(n=4, n_ineq=4, n_eq=2, convex=False, problem_seed=0)
    x = sc.sample_x(10, np.random.default_rng(0))
    y_star = sc.target(x)
    A, b = sc.constraints(x)
    assert C.max_violation(y_star, A, b).max() <= 1e-7
    rng = np.random.default_rng(2)  # small feasible perturbations do not improve it
    for _ in range(5):
        near = C.project_polytope(y_star + torch.as_tensor(rng.normal(scale=1e-3, size=(10, 4))),
                                  A, b)
        assert (sc.objective(near) >= sc.objective(y_star) - 1e-9).all()


def test_ensemble_members_train_as_if_alone():
    """Training two methods together gives each the run it would have alone."""
    cfg = C.Config.preset("smoke", pwc_train=20, pwc_test=30, hidden=(8,))
    sc = C.PiecewiseScenario()
    data = C.build_data(sc, cfg, 0)
    kw = dict(hidden=(8,), steps=15, lr=1e-2, batch_size=10, penalty=100.0)
    both = C.train_methods(sc, data, ["soft penalty", "CAffNet"], [0, 1], **kw)
    alone = C.train_methods(sc, data, ["CAffNet"], [1], **kw)
    x = data.x_test
    assert torch.allclose(C.predict(both, sc, x, "CAffNet", 1),
                          C.predict(alone, sc, x, "CAffNet", 1), atol=1e-10)


def test_per_seed_and_summary_on_known_tables():
    import pandas as pd

    t = pd.DataFrame({"scenario": "s", "seed": [2, 0, 1, 0, 1, 2],
                      "method": ["a"] * 3 + ["b"] * 3, "error": [0.9, 1.0, 1.1, 2.0, 2.1, 1.9],
                      "max_violation": 0.0, "violating_fraction": 0.0})
    w = C.per_seed(t, "s")
    assert list(w.index) == [0, 1, 2] and list(w["a"]) == [1.0, 1.1, 0.9]
    s = C.summarise(t)
    row = s[s.method == "a"].iloc[0]
    assert row["scenario"] == "s" and row["error mean"] == pytest.approx(1.0) and row["n"] == 3
    assert row["error lo"] < 1.0 < row["error hi"]
    with pytest.raises(ValueError, match="no rows"):
        C.per_seed(t, "nope")


def test_start_errors_are_the_untrained_members():
    """The start point is what every member computes before its first step."""
    cfg = C.Config.preset("smoke", pwc_train=20, pwc_test=30, hidden=(8,))
    sc = C.PiecewiseScenario()
    data = C.build_data(sc, cfg, 0)
    start = C.start_errors(sc, data, [3, 4], (8,))
    net = C.EnsembleMLP([4], sc.x_dim, sc.n, (8,))
    y = C.output_layer("fixed projection", net(data.x_test.expand(1, *data.x_test.shape))[0],
                       data.cons_test)
    assert start.shape == (2,)
    assert start[1] == pytest.approx(sc.error(y, data.x_test, data.t_test).mean().item(), rel=1e-12)


def test_candidate_paths_agree_and_faces_can_be_reused():
    rng = np.random.default_rng(7)
    A, b = random_polytope(rng, 9, 5, 3, n_eq=1, shared=True)
    f = torch.as_tensor(rng.normal(size=(9, 3)))
    w = torch.as_tensor(rng.normal(size=(9, 3)))
    faces = C.compute_faces(A)
    assert torch.allclose(C.candidates(f, w, b, faces), C.candidates(f, w, b, faces, A), atol=1e-12)
    Ab = A.expand(9, *A.shape).contiguous()     # the same constraints, one matrix per input
    fb = C.compute_faces(Ab)
    rows = torch.tensor([2, 5, 7])
    y_all = C.caffine(f, w, Ab, b, faces=fb)
    y_sub = C.caffine(f[rows], w[rows], Ab[rows], b[rows], faces=fb.take(rows))
    assert torch.allclose(y_all[rows], y_sub, atol=1e-12)
    assert torch.allclose(y_all, C.caffine(f, w, A, b, faces=faces), atol=1e-12)
    with pytest.raises(ValueError, match="faces"):
        C.caffine(f[:2], w[:2], Ab[:2], b[:2], faces=fb)


# ------------------------------------------------------------------ issue 26 additions


def test_hardnet_is_exact_on_the_m_le_n_scenario_and_equals_its_closed_form():
    """HardNet's rows (G, C) number n there: full row rank, so A A^+ = I and every row holds."""
    cfg = C.Config.preset("smoke")
    sc = C.build_scenario(C.M_LE_N, cfg, 0)
    x = sc.sample_x(200, np.random.default_rng(0))
    A_h, bl, bu = sc.hardnet_constraints(x)
    assert A_h.shape[0] <= sc.n and torch.linalg.matrix_rank(A_h) == A_h.shape[0]
    f = torch.as_tensor(np.random.default_rng(1).normal(scale=3.0, size=(200, sc.n)))
    y = C.hardnet_aff(f, A_h, bl, bu)
    A, b = sc.constraints(x)
    assert C.max_violation(y, A, b).max() <= 1e-6
    assert C.max_violation(f, A, b).max() > 1e-1          # the correction had work to do
    # closed form with full row rank: y = f + A'(A A')^{-1} (ReLU(bl - Af) - ReLU(Af - bu))
    An = A_h.numpy()
    Af = f.numpy() @ An.T
    corr = np.maximum(bl.numpy() - Af, 0) - np.maximum(Af - bu.numpy(), 0)
    closed = f.numpy() + corr @ np.linalg.solve(An @ An.T, An)
    assert np.allclose(y.numpy(), closed, atol=1e-10)
    # a plain loop over samples with numpy's lstsq (the paper's code) gives the same
    for i in range(0, 200, 37):
        dy = np.linalg.lstsq(An, corr[i], rcond=None)[0]
        assert np.allclose(y[i].numpy(), f[i].numpy() + dy, atol=1e-10)


def test_zero_initialised_w_head_starts_at_the_projection():
    cfg = C.Config.preset("smoke", pwc_train=20, pwc_test=30, hidden=(8,))
    sc = C.build_scenario("convex QP", cfg, 0)
    data = C.build_data(sc, cfg, 0)
    kw = dict(hidden=(8,), lr=1e-2, batch_size=10, penalty=100.0)
    methods = ["fixed projection", "CAffNet", "CAffNet (w zero-init)"]
    m0 = C.train_methods(sc, data, methods, [0, 1], steps=1, **{**kw, "lr": 0.0})  # untrained
    x = data.x_test
    proj = C.predict(m0, sc, x, "fixed projection", 1)
    assert torch.allclose(C.predict(m0, sc, x, "CAffNet (w zero-init)", 1), proj, atol=1e-9)
    assert not torch.allclose(C.predict(m0, sc, x, "CAffNet", 1), proj, atol=1e-3)
    # both w methods share the hidden-layer start; only the last layer differs
    assert torch.equal(m0.w_net.weights[0][0], m0.w_net.weights[0][2])
    assert m0.w_net.weights[-1][2].abs().max() == 0 and m0.w_net.weights[-1][0].abs().max() > 0
    # and it trains (the zero layer gets gradients), each member as if alone
    m = C.train_methods(sc, data, methods, [0, 1], steps=10, **kw)
    alone = C.train_methods(sc, data, ["CAffNet (w zero-init)"], [1], steps=10, **kw)
    assert m.w_net.weights[-1][2].abs().max() > 0
    assert torch.allclose(C.predict(m, sc, x, "CAffNet (w zero-init)", 1),
                          C.predict(alone, sc, x, "CAffNet (w zero-init)", 1), atol=1e-10)


def test_input_dependent_A_keeps_the_instance_and_a_feasible_point():
    fixed = C.OptimisationScenario(4, 4, 2, convex=False, problem_seed=3)
    vary = C.OptimisationScenario(4, 4, 2, convex=False, problem_seed=3, varying=True, label="v")
    assert vary.name == "v" and np.array_equal(fixed.G, vary.G) and np.array_equal(fixed.C, vary.C)
    x = vary.sample_x(50, np.random.default_rng(0))
    A, b = vary.constraints(x)
    assert A.shape == (50, 8, 4)
    assert not torch.allclose(A[0], A[1])                    # A varies with x
    G0 = torch.as_tensor(vary.G) + x[7, 0] * torch.as_tensor(vary.G1)
    assert torch.allclose(A[7, :4], G0)
    y0 = x @ torch.as_tensor(np.linalg.pinv(vary.C)).T        # C^+ x is feasible by construction
    assert C.max_violation(y0, A, b).max() <= 1e-12
    y_star = vary.target(x[:8])                              # IPOPT with G(x)
    assert C.max_violation(y_star, A[:8], b[:8]).max() <= 1e-7
    qp = C.OptimisationScenario(4, 4, 2, convex=True, problem_seed=3, varying=True)
    y_qp = qp.target(x[:8])                                  # cvxpy with one G(x) per sample
    f = torch.as_tensor(np.random.default_rng(4).normal(size=(8, 4)))
    near = C.project_polytope(y_qp + 1e-3 * f, *qp.constraints(x[:8]))
    assert C.max_violation(y_qp, *qp.constraints(x[:8])).max() <= 1e-7
    assert (qp.objective(near) >= qp.objective(y_qp) - 1e-9).all()


def test_unicycle_cbf_rows_keep_every_feasible_control_safe():
    sc = C.UnicycleScenario()
    rng = np.random.default_rng(0)
    x = sc.sample_x(300, rng)
    assert (sc.barrier(x) > 0).all()
    A, b = sc.constraints(x)
    assert A.shape == (300, sc.m, 2) and sc.m > sc.n
    u = C.caffine(torch.as_tensor(rng.normal(scale=4.0, size=(300, 2))), None, A, b)
    dt = 0.05
    assert sc.alpha * dt <= 1
    h0, h1 = sc.barrier(x), sc.barrier(sc.step(x, u, dt))
    assert (h1 >= (1 - sc.alpha * dt) * h0 - 1e-12).all()    # discrete-time CBF bound
    # finite differences: dh/dt = -(row of A) u, the row of the CBF condition
    eps = 1e-7
    dh = (sc.barrier(sc.step(x, u, eps)) - h0) / eps
    assert torch.allclose(dh, -torch.einsum("bmn,bn->bm", A[:, :3], u), atol=1e-4)
    t = sc.target(x)                                         # nominal: within the actuator limits
    assert C.max_violation(t, A[:, 3:], b[:, 3:]).max() == 0
    A_h, bl, bu = sc.hardnet_constraints(x)
    y = C.hardnet_aff(t, A_h, bl, bu)
    assert A_h.shape[1] == 5 and C.max_violation(y, A, b).max() > 1e-2   # m = 5 > n = 2


def test_rollouts_count_collisions_and_hard_methods_do_not_collide():
    cfg = C.Config.preset("smoke", cbf_train=40, cbf_test=20, cbf_steps=5, cbf_rollouts=6,
                          cbf_horizon=60, hidden=(8,))
    run = C.run_scenario(C.UNICYCLE, cfg, [0], methods=["soft penalty", "CAffNet"])
    ro = C.rollouts(run, cfg)
    assert list(ro.method) == ["soft penalty", "CAffNet"]
    assert ro.set_index("method").loc["CAffNet", "collisions"] == 0
    assert ro.set_index("method").loc["CAffNet", "min barrier"] >= 0
    paths = ro.attrs["paths"]
    assert paths.shape == (2, 6, 61, 3)
    # a collision is counted exactly when some step's barrier is negative
    sc = run.scenario
    h = sc.barrier(paths.reshape(-1, 3)).amin(dim=1).reshape(2, 6, 61)
    assert ((h < 0).any(dim=2).sum(dim=1).tolist() == ro.collisions.tolist())


def test_cvxpylayers_projection_equals_caffnet_w0_and_cvxpy_and_times_are_tabled():
    from minirepro.papers.caffnet import qplayer

    f, A, b = qplayer.random_problems(6, 3, 5, seed=0)
    (y,) = qplayer.projection_qp_layer(6, 3)(f, A, b, solver_args={"eps": 1e-10})
    assert torch.allclose(y, C.caffine(f, None, A, b), atol=1e-7)
    ref = cvxpy_projection(f[0].numpy(), A[0].numpy(), b[0].numpy())
    assert np.allclose(y[0].numpy(), ref, atol=1e-6)
    t = qplayer.layer_times((3, 5), n=2, batch=4, repeats=1)
    assert list(t.m) == [3, 5] and list(t.subsets) == [C.n_subsets(3, 2), C.n_subsets(5, 2)]
    assert (t["max |difference|"] < 1e-6).all()
    import pandas as pd

    fake = pd.DataFrame({"m": [4, 8, 12, 16], "CAffNet / cvxpylayers": [0.1, 1.2, 0.9, 3.0]})
    assert qplayer.crossover(fake) == 16
    assert qplayer.crossover(fake.iloc[:1]) is None


# ------------------------------------------------------------------ the page's metrics and prose


def _settled(**kw):
    """A stand-in for a settled claim (the attributes the prose reads)."""
    from types import SimpleNamespace

    base = {"id": "c", "paper_value": "-", "measured": "m", "verdict": "reproduced", "details": {}}
    return SimpleNamespace(**{**base, **kw})


def _seed_table():
    """Per-seed rows of two scenarios x two methods x three seeds, as ``evaluate`` gives them."""
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = [{"scenario": s, "method": m, "seed": k, "error": float(rng.uniform(0, 1)),
             "max_violation": float(rng.uniform(0, 1e-3)), "violating_fraction": 0.5}
            for s in ("piecewise", "convex QP") for m in ("soft penalty", "CAffNet") for k in range(3)]
    return pd.DataFrame(rows)


def test_recorded_metrics_are_the_seed_means_in_recording_order_with_their_tolerances():
    import pandas as pd

    table = _seed_table()
    other = table.assign(scenario=table.scenario.map({"piecewise": C.A_OF_X, "convex QP": C.UNICYCLE}))
    roll = pd.DataFrame({"method": ["HardNet-Aff", "HardNet-Aff", "CAffNet", "CAffNet"],
                         "seed": [0, 1, 0, 1], "collisions": [2, 3, 0, 0]})
    got = C.report.recorded_metrics(C.summarise(table), 1e-3, C.summarise(other), roll, exact=1e-9)
    direct = table.groupby(["scenario", "method"])[["error", "max_violation"]].mean()
    first = C.report.summary_metrics(C.summarise(table), 1e-9)
    assert list(got)[:len(first)] == list(first)  # the main scenarios first, then the control
    assert list(got)[len(first)] == "hardnet_control_max_violation"
    for (s, m), row in direct.iterrows():
        assert got[f"{s}/{m}/error"] == (pytest.approx(row.error, rel=1e-12), {"rtol": 1e-3, "atol": 1e-6})
        assert got[f"{s}/{m}/max_violation"][0] == pytest.approx(row.max_violation, rel=1e-12)
        assert got[f"{s}/{m}/max_violation"][1] == {"rtol": 1e-3, "atol": 1e-9}
    assert got["hardnet_control_max_violation"] == (1e-3, {"atol": 1e-9})
    assert f"{C.A_OF_X}/CAffNet/error" in got
    tail = list(got.items())[-2:]  # collisions summed over seeds, methods in the rollouts' order
    assert tail == [(f"{C.UNICYCLE}/HardNet-Aff/colliding rollouts", (5.0, {"atol": 1})),
                    (f"{C.UNICYCLE}/CAffNet/colliding rollouts", (0.0, {"atol": 1}))]


def test_the_unicycle_sentence_switches_when_a_learned_w_is_not_farther_than_the_projection():
    import pandas as pd

    far = pd.DataFrame({"fixed projection": [1.0, 1.0], "CAffNet": [2.0, 2.0], C.report.ZERO_W: [1.5, 1.5]})
    assert C.report.unicycle_error_line(far).endswith(
        "projection 1, random-init w 2, zero-init w 1.5; with either init the learned w ends farther "
        "from the target than the projection.")
    near = far.assign(**{C.report.ZERO_W: [1.0, 1.0]})  # equal to the projection: not farther
    assert C.report.unicycle_error_line(near).endswith(
        "the learned w does not end farther from the target with both inits.")


def test_the_timing_sentence_names_the_crossover_or_says_there_is_none():
    import pandas as pd

    times = pd.DataFrame({"m": [4, 8, 12], "subsets": [15, 162, 793],
                          "CAffNet / cvxpylayers": [0.5, 1.5, 3.25]})
    cross = C.qplayer.crossover(times)
    assert cross == 8
    assert C.report.timing_line(times, cross, 4) == (
        "- *Timing* (this machine, n = 4): CAffNet's layer is the slower one from m = 8 rows on "
        "(162 subsets); at m = 12 it takes 3.2 times the QP layer's time.")
    assert C.report.timing_line(times, None, 4) == (
        "- *Timing* (this machine, n = 4): CAffNet's layer stays the faster one up to m = 12; "
        "at m = 12 it takes 3.2 times the QP layer's time.")


def test_the_projection_reading_gives_each_scenario_and_the_qp_room_only_when_a_bound_was_used():
    tie = _settled(details={s: {"estimate": 0.001234, "low": -0.002, "high": 0.004, "verdict": "reproduced",
                                "power_estimate": -0.5} for s in ("convex QP", "nonconvex (DC3)")})
    beyond = _settled(verdict="not reproduced", measured="improvement -0.1")
    qp = _settled(verdict="not testable", details={"room": 0.0004})
    text = C.report.projection_reading(tie, beyond, qp, ["convex QP", "nonconvex (DC3)"], 0.01)
    lines = text.split("\n")
    assert len(lines) == 3 and lines[0].startswith("- *convex QP*: CAffNet's gap minus the projection's is "
                                                   "0.00123 objective units (90% CI -0.002 to 0.004, "
                                                   "margin +-0.01); CAffNet is 0.5 below")
    assert lines[2] == ("- *beyond the projection*: on nonconvex (DC3) **not reproduced** (improvement -0.1); "
                        "on the convex QP **not testable**: the projection's gap leaves 0.0004 of room "
                        "above the cvxpy optimum, against a minimum effect of 0.01.")
    assert C.report.qp_room({}, 0.01) == "no bound was used"


def test_the_claims_table_and_the_paper_table_read_the_claims_and_the_summary():
    claims = [_settled(id="a", paper_value="p", measured="x", verdict="reproduced"),
              _settled(id="b", verdict="not testable")]
    assert C.report.claims_markdown(claims) == ("| claim | paper | here | verdict |\n|---|---|---|---|\n"
                                                "| a | p | x | **reproduced** |\n| b | - | m | **not testable** |")
    table = _seed_table()
    paper = C.report.paper_table(C.summarise(table))
    mean = table[table.scenario == "piecewise"].groupby("method")[["error", "max_violation"]].mean()
    assert list(paper.index) == ["CAffNet", "soft penalty"]
    assert paper.loc["CAffNet", "here (1-D)"] == (f"MSE {float(mean.loc['CAffNet', 'error']):.2g}, max viol. "
                                                  f"{float(mean.loc['CAffNet', 'max_violation']):.2g}")


def test_the_claim_settings_name_the_configs_sizes_and_seeds():
    cfg = C.Config.preset("smoke")
    text = C.report.claim_setting(cfg, "smoke")
    assert text.startswith(f"smoke scale; MLPs (32, 32); seeds {cfg.seeds}; 1-D: 50 points, 100 steps")
    assert text.endswith("QP/DC3: n=4, 4 ineq + 2 eq, 96 train / 32 test, 30 steps")
    other = C.report.other_setting(cfg, "smoke")
    assert f"{C.M_LE_N}: 2 ineq + 2 eq in n=4" in other and other.endswith("6 rollouts of 50 x 0.05 s")
