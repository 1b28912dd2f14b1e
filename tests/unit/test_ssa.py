"""SSA: the theory's quantities, the losses and the training against independent references.

References: scipy.linalg.subspace_angles, closed forms on constructed embeddings,
a direct log-softmax loop for InfoNCE, known spectra, brute-force retrieval, and
invariants checked with hypothesis.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.linalg
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from minirepro.papers import ssa

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def unit(rng, n, d):
    v = rng.normal(size=(n, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# ------------------------------------------------------------------ principal angles


@FAST
@given(st.integers(0, 10_000), st.integers(2, 9), st.integers(1, 4), st.integers(1, 4))
@example(6573, 6, 3, 4).via("scipy gives 5.6e-8 for an exact 0 angle (the truth is 0; ours 7e-16)")
def test_principal_angles_match_scipy(seed, d, p, q):
    rng = np.random.default_rng(seed)
    p, q = min(p, d), min(q, d)
    a, b = rng.normal(size=(d, p)), rng.normal(size=(d, q))
    ours = ssa.principal_angles(a, b)
    ref = np.sort(scipy.linalg.subspace_angles(a, b))
    # scipy (1.17) takes each angle from arcsin(sine) or arccos(cosine), but applies its
    # sine/cosine mask in reverse order, so a small angle can come from arccos and a large one
    # from arcsin, each then accurate only to ~sqrt(eps): 5.6e-8 for an exact 0 here, more on
    # another BLAS, too close to any fixed atol. Whichever function scipy used agrees with ours
    # to ~1e-15, so compare, per angle, the closer of the cosines and the sines...
    close = np.minimum(np.abs(np.cos(ours) - np.cos(ref)), np.abs(np.sin(ours) - np.sin(ref)))
    assert close.max() <= 1e-12, (ours, ref)
    # ... and check the small angles scipy cannot resolve against the exact answer: subspaces
    # of dimensions p + q > d meet in p + q - d dimensions, whose angles are exactly 0
    np.testing.assert_allclose(ours[: max(0, p + q - d)], 0.0, atol=1e-12)


def test_principal_angles_of_nested_and_near_identical_subspaces():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 3))
    np.testing.assert_allclose(ssa.principal_angles(a, a[:, :2]), 0.0, atol=1e-12)
    b = a + 1e-9 * rng.normal(size=a.shape)  # tiny angles stay accurate (sine form)
    np.testing.assert_allclose(ssa.principal_angles(a, b), scipy.linalg.subspace_angles(a, b)[::-1],
                               atol=1e-12)


@pytest.mark.parametrize("phi", [0.0, 10.0, 45.0, 90.0])
def test_subspace_pair_has_the_constructed_angles(phi):
    a, b = ssa.subspace_pair(8, 7, 1, phi)
    ang = np.degrees(np.sort(scipy.linalg.subspace_angles(a, b)))
    np.testing.assert_allclose(ang[:6], 0.0, atol=1e-6)
    assert ang[6] == pytest.approx(phi, abs=1e-6)
    a3, b3 = ssa.subspace_pair(10, 6, 3, phi)
    np.testing.assert_allclose(np.degrees(np.sort(scipy.linalg.subspace_angles(a3, b3)))[3:], phi, atol=1e-6)


def test_shared_space_recovers_the_intersection_and_phi_min():
    rng = np.random.default_rng(1)
    a, b = ssa.subspace_pair(8, 7, 1, 40.0)
    x = ssa.normalize(rng.normal(size=(400, 7)) @ a.T)
    y = ssa.normalize(rng.normal(size=(400, 7)) @ b.T)
    s = ssa.shared_space(x, y)
    assert s.d_overlap == 6 and not s.fallback
    assert s.phi_min == pytest.approx(40.0, abs=1e-6)
    shared = a[:, :6]  # C = span(e_1..e_6)
    np.testing.assert_allclose(scipy.linalg.subspace_angles(s.basis, shared), 0.0, atol=1e-6)
    # disjoint subspaces: no shared direction passes the threshold, the best one is kept
    x2 = ssa.normalize(rng.normal(size=(50, 2)) @ np.eye(6)[:2])
    y2 = ssa.normalize(rng.normal(size=(50, 2)) @ np.eye(6)[2:4])
    s2 = ssa.shared_space(x2, y2)
    assert s2.fallback and s2.d_overlap == 0 and s2.basis.shape == (6, 1)


# ------------------------------------------------------------------ the gap


@pytest.mark.parametrize("theta", [0.0, 20.0, 60.0, 135.0])
@pytest.mark.parametrize("alpha", [0.3, 0.8])
def test_gap_closed_form_on_constructed_embeddings(theta, alpha):
    """x_i = cos(a) c_x + sin(a) u_i with u_i in +- pairs orthogonal to both centres: the mean
    of x is exactly cos(a) c_x, so the gap angle is theta and ||mu_x - mu_y|| = 2 cos(a) sin(theta/2)."""
    d, t = 6, math.radians(theta)
    cx = np.eye(d)[0]
    cy = math.cos(t) * np.eye(d)[0] + math.sin(t) * np.eye(d)[1]
    rng = np.random.default_rng(2)
    u = rng.normal(size=(20, d))
    u[:, :2] = 0
    u = np.vstack([u, -u]) / np.linalg.norm(np.vstack([u, -u]), axis=1, keepdims=True)
    x = math.cos(alpha) * cx + math.sin(alpha) * u
    y = math.cos(alpha) * cy + math.sin(alpha) * u[::-1]
    assert ssa.gap_angle(x, y) == pytest.approx(theta, abs=1e-6)
    assert ssa.liang_gap(x, y) == pytest.approx(2 * math.cos(alpha) * math.sin(t / 2), abs=1e-12)
    assert ssa.isometry_violation(x, y) == pytest.approx(0.0, abs=1e-12)  # x_i.c_x = y_i.c_y = cos(a)


def test_gap_penalty_is_the_squared_liang_gap():
    rng = np.random.default_rng(3)
    x, y = unit(rng, 30, 5), unit(rng, 30, 5)
    pen = ssa.gap_penalty(torch.tensor(x[None]), torch.tensor(y[None]))
    assert pen.item() == pytest.approx(ssa.liang_gap(x, y) ** 2, rel=1e-12)


# ------------------------------------------------------------------ losses


def test_info_nce_matches_a_direct_log_softmax_loop():
    rng = np.random.default_rng(4)
    m, n, d = 3, 7, 4
    x, y = unit(rng, m * n, d).reshape(m, n, d), unit(rng, m * n, d).reshape(m, n, d)
    ls = np.array([0.0, 1.0, math.log(50.0)])
    got = ssa.info_nce(torch.tensor(x), torch.tensor(y), torch.tensor(ls)).numpy()
    for k in range(m):
        s = math.exp(ls[k]) * x[k] @ y[k].T
        lxy = [-(s[i, i] - math.log(sum(math.exp(s[i, j]) for j in range(n)))) for i in range(n)]
        lyx = [-(s[i, i] - math.log(sum(math.exp(s[j, i]) for j in range(n)))) for i in range(n)]
        assert got[k] == pytest.approx(0.5 * (np.mean(lxy) + np.mean(lyx)), rel=1e-10)


def test_ssa_loss_with_the_full_basis_is_info_nce_and_ignores_the_gap_direction():
    rng = np.random.default_rng(5)
    x, y = torch.tensor(unit(rng, 10, 4)[None]), torch.tensor(unit(rng, 10, 4)[None])
    ls = torch.tensor([1.0])
    full = torch.eye(4, dtype=torch.float64)[None]
    assert ssa.ssa_loss(x, y, ls, full).item() == pytest.approx(ssa.info_nce(x, y, ls).item(), rel=1e-12)
    # a shift along a direction outside S changes InfoNCE but not the SSA term
    basis = torch.eye(4, dtype=torch.float64)[None, :, :3]
    shift = torch.zeros(4, dtype=torch.float64)
    shift[3] = 2.0
    x2 = x + shift
    x2n = x2 / x2.norm(dim=-1, keepdim=True)
    assert ssa.ssa_loss(x2n, y, ls, basis).item() == pytest.approx(ssa.ssa_loss(x, y, ls, basis).item(),
                                                                   rel=1e-9)


# ------------------------------------------------------------------ effective rank


@pytest.mark.parametrize("k", [1, 2, 5, 9])
def test_effective_rank_of_flat_spectra_is_their_count(k):
    assert ssa.effective_rank(np.r_[np.full(k, 3.7), np.zeros(4)]) == pytest.approx(k, rel=1e-12)


def test_effective_rank_closed_form_and_matrix_input():
    s = np.array([3.0, 1.0])
    p = s / s.sum()
    assert ssa.effective_rank(s) == pytest.approx(math.exp(-(p * np.log(p)).sum()))
    rng = np.random.default_rng(6)
    q, _ = np.linalg.qr(rng.normal(size=(20, 3)))
    mat = q * np.array([2.0, 2.0, 2.0])  # singular values 2, 2, 2
    assert ssa.effective_rank(mat) == pytest.approx(3.0, rel=1e-9)


# ------------------------------------------------------------------ projection, retrieval


@FAST
@given(st.integers(0, 10_000))
def test_projection_is_unit_idempotent_and_inside_the_subspace(seed):
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.normal(size=(6, 3)))
    x = unit(rng, 12, 6)
    p = ssa.project(x, basis)
    np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(ssa.project(p, basis), p, atol=1e-12)
    np.testing.assert_allclose(p - p @ basis @ basis.T, 0.0, atol=1e-12)


def test_recall_at_k_matches_brute_force():
    rng = np.random.default_rng(7)
    x = unit(rng, 40, 5)
    y = ssa.normalize(x + 0.8 * rng.normal(size=x.shape))
    sim = x @ y.T
    for k in (1, 5):
        hits_xy = [i in np.argsort(-sim[i])[:k] for i in range(40)]
        hits_yx = [i in np.argsort(-sim[:, i])[:k] for i in range(40)]
        assert ssa.recall_at_k(x, y, k) == pytest.approx((np.mean(hits_xy) + np.mean(hits_yx)) / 2)
    assert ssa.recall_at_k(x, x, 1) == 1.0


def test_zero_shot_accuracy_and_shared_alignment_simple_cases():
    prompts = np.eye(3)
    x = ssa.normalize(np.eye(3)[[0, 1, 2, 2]] + 0.1)
    assert ssa.zero_shot_accuracy(x, prompts, np.array([0, 1, 2, 1])) == 0.75
    a, b = ssa.subspace_pair(4, 3, 1, 90.0)
    rng = np.random.default_rng(8)
    z = rng.normal(size=(30, 2))
    own_x, own_y = rng.normal(size=(30, 1)), rng.normal(size=(30, 1))
    x = ssa.normalize(np.hstack([z, own_x]) @ a.T)
    y = ssa.normalize(np.hstack([z, own_y]) @ b.T)  # same shared part, unrelated own parts
    assert ssa.shared_alignment(x, y, a[:, :2]) == pytest.approx(1.0)
    assert ssa.pair_cosine(x, y) < 1.0


# ------------------------------------------------------------------ bad input


def test_bad_input_gives_clear_errors():
    rng = np.random.default_rng(9)
    x, y = unit(rng, 10, 4), unit(rng, 9, 4)
    with pytest.raises(ValueError, match="same number of rows"):
        ssa.gap_angle(x, y)
    with pytest.raises(ValueError, match="same number of rows"):
        ssa.recall_at_k(x, y)
    z = unit(rng, 10, 4)
    z[3] = 0.0
    with pytest.raises(ValueError, match="zero-norm"):
        ssa.gap_angle(x, z)
    with pytest.raises(ValueError, match="zero-norm"):
        ssa.normalize(z)
    with pytest.raises(ValueError, match="non-finite"):
        ssa.liang_gap(x, np.full((10, 4), np.nan))
    with pytest.raises(ValueError, match="same shape"):
        ssa.info_nce(torch.zeros(1, 5, 3), torch.zeros(1, 4, 3), torch.zeros(1))
    with pytest.raises(ValueError, match="at least two pairs"):
        ssa.info_nce(torch.ones(1, 1, 3), torch.ones(1, 1, 3), torch.zeros(1))
    with pytest.raises(ValueError, match="all-zero"):
        ssa.effective_rank(np.zeros(3))
    with pytest.raises(ValueError, match="phi_deg"):
        ssa.subspace_pair(8, 7, 1, 120.0)
    with pytest.raises(ValueError, match="mean is zero"):
        ssa.gap_angle(np.vstack([np.eye(3), -np.eye(3)]), unit(rng, 6, 3))
    with pytest.raises(ValueError, match="unknown arm"):
        ssa.build_ensemble([ssa.Member(0, 0.0, "CLIP+")], {0: (np.zeros((4, 2)),) * 4},
                           {0.0: ssa.subspace_pair(3, 2, 1, 0.0)}, 4)


# ------------------------------------------------------------------ the ensemble


def test_a_member_trains_in_the_ensemble_exactly_as_alone():
    rng = np.random.default_rng(10)
    data = {s: tuple(rng.normal(size=(32, 5)).astype(np.float32) for _ in range(4)) for s in (0, 1)}
    bases = {p: ssa.subspace_pair(4, 3, 1, p) for p in (0.0, 60.0)}
    kw = dict(steps=15, lr=1e-2, lambda_gap=1.0, lambda_ssa=0.5, ssa_every=5, batch_size=16)
    members = [ssa.Member(0, 60.0, "SSA"), ssa.Member(1, 0.0, "gap penalty"), ssa.Member(0, 0.0, "CLIP")]
    torch.manual_seed(0)
    big = ssa.train_ensemble(ssa.build_ensemble(members, data, bases, 8), data, **kw)
    for i, m in enumerate(members):
        alone = ssa.train_ensemble(ssa.build_ensemble([m], data, bases, 8), data, **kw)
        xe = np.stack([data[m.seed][2]])
        got = big.embed(np.stack([data[mm.seed][2] for mm in members]),
                        np.stack([data[mm.seed][3] for mm in members]))[0][i]
        np.testing.assert_allclose(got, alone.embed(xe, np.stack([data[m.seed][3]]))[0][0], atol=1e-5)


def test_training_lowers_infonce_and_the_rank_bottleneck_holds():
    data = ssa.synthetic_pairs(128, 64, 64, seed=0, dim=10)
    d = {0: (data.x_train, data.y_train, data.x_est, data.y_est)}
    bases = {30.0: ssa.subspace_pair(6, 5, 1, 30.0)}
    model = ssa.train_ensemble(ssa.build_ensemble([ssa.Member(0, 30.0, "CLIP")], d, bases, 16), d,
                               steps=60, lr=1e-2, lambda_gap=0, lambda_ssa=0, ssa_every=10, batch_size=None)
    assert model.curve[-1][0] < model.curve[0][0] - 0.5
    ex, ey = model.embed(data.x_test[None], data.y_test[None])
    a, b = bases[30.0]
    np.testing.assert_allclose(ex[0] - ex[0] @ a @ a.T, 0.0, atol=1e-6)  # x stays in A
    np.testing.assert_allclose(ey[0] - ey[0] @ b @ b.T, 0.0, atol=1e-6)  # y stays in B
    assert np.linalg.matrix_rank(ex[0], tol=1e-6) <= 5 < 6


def test_experiment_refuses_unknown_data_sets_and_no_seeds():
    with pytest.raises(ValueError, match="datasets"):
        ssa.run_experiment(ssa.Config(datasets=("cifar",)))
    with pytest.raises(ValueError, match="n_seeds must be >= 1"):
        ssa.Config(n_seeds=0)


def _runs_table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for arm, shift in (("CLIP", 0.0), ("gap penalty", 5.0), ("SSA", 0.3), ("SSP", 100.0)):
        for phi in (0.0, 90.0):
            for seed in range(4):
                a = rng.normal()
                rows.append({"data": "synthetic", "arm": arm, "phi": phi, "seed": seed, "alignment": shift + a,
                             "R@1": 10 * shift + phi + 0.5 * a + 0.1 * rng.normal(),
                             "gap (deg)": phi + shift + rng.normal(), "phi_min (deg)": phi / 2})
    return pd.DataFrame(rows)


def test_within_cells_centres_each_arm_and_angle_and_leaves_out_post_hoc_arms():
    runs = _runs_table()
    cells = ssa.within_cells(runs, ["alignment", "R@1", "gap (deg)"])
    assert len(cells) == 3 * 2 * 4  # SSP is not a trained arm
    sel = runs[runs["arm"] != "SSP"].sort_values(["arm", "phi", "seed"])
    for (arm, phi), grp in sel.groupby(["arm", "phi"]):
        idx = np.flatnonzero(((sel["arm"] == arm) & (sel["phi"] == phi)).to_numpy())
        np.testing.assert_allclose(cells["R@1"].to_numpy()[idx], grp["R@1"] - grp["R@1"].mean())
    # the arms' and angles' own levels (shift, phi) are gone: only the seeds' variation is left
    assert abs(np.corrcoef(cells["alignment"], cells["R@1"])[0, 1]) > 0.9
    assert np.corrcoef(runs["alignment"], runs["gap (deg)"])[0, 1] > 0.5
    with pytest.raises(ValueError, match="at least 2 seeds"):
        ssa.within_cells(runs[runs["seed"] == 0], ["R@1"])


def test_partial_residuals_give_the_textbook_partial_correlation():
    rng = np.random.default_rng(1)
    z = rng.normal(size=300)
    x, y = z + rng.normal(size=300), 2 * z + 0.5 * rng.normal(size=300)
    px, py = ssa.partial_residuals(x, y, z)
    r = np.corrcoef([x, y, z])
    expect = (r[0, 1] - r[0, 2] * r[1, 2]) / np.sqrt((1 - r[0, 2] ** 2) * (1 - r[1, 2] ** 2))
    assert np.corrcoef(px, py)[0, 1] == pytest.approx(expect, abs=1e-10)
    with pytest.raises(ValueError, match="aligned"):
        ssa.partial_residuals(x, y[:-1], z)


def test_theorem_table_compares_the_gap_with_both_angles():
    t = ssa.theorem_table(_runs_table())
    assert list(t.index) == [0, 1, 2, 3]
    gap = t[["gap at 0", "gap at 90"]].to_numpy()
    np.testing.assert_allclose(t["mean |gap - phi|"], np.abs(gap - [0.0, 90.0]).mean(1))
    np.testing.assert_allclose(t["mean |gap - phi_min|"], np.abs(gap - [0.0, 45.0]).mean(1))


def test_result_table_formats_every_number_and_never_shows_nan():
    runs = _runs_table().assign(**{"pair cosine": 0.5, "zero-shot": np.nan})
    runs.loc[runs["arm"] == "CLIP", "zero-shot"] = 0.8364
    t = ssa.result_table(ssa.summary(runs, ["gap (deg)", "phi_min (deg)", "alignment", "pair cosine", "R@1",
                                            "zero-shot"]), "synthetic")
    assert t.index.names == ["φ", "arm"] and "0-shot" in t.columns
    cells = t.to_numpy().ravel()
    assert all(isinstance(c, str) and "nan" not in c for c in cells)
    assert t.loc[("0°", "CLIP"), "0-shot"] == "0.836" and t.loc[("0°", "SSA"), "0-shot"] == "-"
    assert all(c.endswith("°") or c == "-" for c in t["gap"])
    with pytest.raises(KeyError, match="no rows"):
        ssa.result_table(ssa.summary(runs, ["R@1"]), "digits")


def test_cell_seeds_align_with_within_cells_and_correlation_text_says_when_no_interval():
    import pandas as pd

    from minirepro.papers.ssa import cell_seeds, correlation_text, within_cells

    rows = [{"data": "synthetic", "arm": arm, "phi": phi, "seed": seed, "alignment": seed + phi, "R@1": seed}
            for arm in ("SSA", "CLIP") for phi in (5.0, 0.0) for seed in (2, 0, 1)]
    runs = pd.DataFrame(rows)
    cells = within_cells(runs, ["alignment", "R@1"])
    seeds = cell_seeds(runs)
    assert len(seeds) == len(cells) == 12
    # centred R@1 is the seed minus its cell's mean seed (1): the labels line up row by row
    assert list(cells["R@1"] + 1) == list(seeds)
    assert "0.10 to 0.40" in correlation_text({"estimate": 0.3, "low": 0.1, "high": 0.4})
    assert "no interval: 2 seeds" in correlation_text({"estimate": 0.3, "n": 2})
