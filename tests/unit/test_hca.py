"""Tests of the HCA chapter's package (minirepro.papers.hca)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minirepro.papers.hca.evidence import (
    MoveContext,
    kg_evidence,
    kkt_evidence,
    knowledge_graph,
    path_signs,
    pcmci_link_pvalue,
    pcmci_pvalues,
)
from minirepro.papers.hca.experiment import Config
from minirepro.papers.hca.mpc import NMPC, MPCInfeasibleError, MPCProblem
from minirepro.papers.hca.oracle import design_oracle, interventional_oracle, remove_cause
from minirepro.papers.hca.plants import STEPS_PER_DAY, get_plant, make_schedule
from minirepro.papers.hca.ranking import (
    TAU_GRID,
    Evidence,
    HCAParams,
    calibrate_tau,
    explain_all,
    kkt_term,
    rank_and_validate,
)

N = 8


@pytest.fixture(scope="module")
def gh():
    plant = get_plant("greenhouse")
    return plant, NMPC(plant, N=N, tol=1e-10)


def _gh_problem(plant, t_upper=28.0, t_lower=15.0, x0=(22.0, 75.0), d=None):
    lo = np.tile(plant.x_lower, (N, 1)).astype(float)
    hi = np.tile(plant.x_upper, (N, 1)).astype(float)
    hi[2:, 0] = t_upper
    lo[2:, 0] = t_lower
    d = plant.nominal(np.arange(40, 40 + N)) if d is None else d
    return MPCProblem(np.array(x0, float), np.array([0.2, 0.2]), d, lo, hi)


# ------------------------------------------------------------------ MPC and multipliers
def test_multipliers_match_finite_difference_sensitivity_of_optimal_cost(gh):
    plant, mpc = gh
    pr = _gh_problem(plant, t_upper=20.5, t_lower=15.0, d=np.tile([0.5, 16.0], (N, 1)))
    sol = mpc.solve(pr, warm=False)
    assert sol.lam_x_upper[:, 0].max() > 0.05, "scenario should make the T upper bound bind"
    eps = 1e-4
    checked = 0
    for k in range(N):
        for i in range(plant.n_x):
            for side in ("upper", "lower"):
                if not np.isfinite(getattr(pr, f"x_{side}")[k, i]):
                    continue
                plus, minus = pr.copy(), pr.copy()
                getattr(plus, f"x_{side}")[k, i] += eps
                getattr(minus, f"x_{side}")[k, i] -= eps
                fd = (mpc.solve(plus, warm=False).cost - mpc.solve(minus, warm=False).cost) / (2 * eps)
                lam = sol.lam_x_upper[k, i] if side == "upper" else sol.lam_x_lower[k, i]
                expected = -lam if side == "upper" else lam
                assert fd == pytest.approx(expected, abs=2e-4, rel=2e-3), (k, i, side)
                checked += 1
    assert checked >= 3 * N


def test_forecast_sensitivity_matches_finite_difference(gh):
    plant, mpc = gh
    pr = _gh_problem(plant, t_upper=21.0)
    sol = mpc.solve(pr, warm=False)
    eps = 1e-4
    for k in (0, 3, 7):
        for i in range(plant.n_d):
            plus, minus = pr.copy(), pr.copy()
            plus.d[k, i] += eps
            minus.d[k, i] -= eps
            fd = (mpc.solve(plus, warm=False).cost - mpc.solve(minus, warm=False).cost) / (2 * eps)
            assert fd == pytest.approx(sol.sens_d[k, i], abs=2e-4, rel=2e-3)


def test_warm_start_gives_the_same_optimum_as_cold_start(gh):
    plant, mpc = gh
    pr = _gh_problem(plant, t_upper=21.0)
    cold = mpc.solve(pr, warm=False)
    warm = mpc.solve(pr, init=cold)
    np.testing.assert_allclose(warm.u, cold.u, atol=1e-6)
    assert warm.iterations <= cold.iterations


def test_plan_respects_bounds_and_model(gh):
    plant, mpc = gh
    pr = _gh_problem(plant, t_upper=21.0, t_lower=19.0)
    sol = mpc.solve(pr, warm=False)
    assert np.all(sol.u >= plant.u_min - 1e-8) and np.all(sol.u <= plant.u_max + 1e-8)
    assert np.all(sol.x[1:] <= pr.x_upper + 1e-6) and np.all(sol.x[1:] >= pr.x_lower - 1e-6)
    np.testing.assert_allclose(sol.x[1], plant.step(pr.x0, sol.u[0], pr.d[0]))


def test_infeasible_mpc_raises_a_clear_error(gh):
    plant, mpc = gh
    pr = _gh_problem(plant)
    pr.x_lower[0, 0] = 27.0  # heat 22 -> 27 degC in 15 minutes: impossible
    with pytest.raises(MPCInfeasibleError, match="no solution"):
        mpc.solve(pr, warm=False)
    # the oracle surfaces it too, instead of returning a label
    ok = mpc.solve(_gh_problem(plant), warm=False)
    with pytest.raises(MPCInfeasibleError):
        interventional_oracle(mpc, pr, ok, plant.nominal(np.arange(N)))
    crossed = _gh_problem(plant, t_upper=18.0, t_lower=20.0)
    with pytest.raises(MPCInfeasibleError, match="lower bound exceeds"):
        mpc.solve(crossed)


def test_bad_inputs_raise_clear_errors(gh):
    plant, mpc = gh
    with pytest.raises(ValueError, match="horizon N"):
        NMPC(plant, N=0)
    pr = _gh_problem(plant)
    pr.d = pr.d[:3]
    with pytest.raises(ValueError, match=r"MPCProblem.d must have shape \(8, 2\)"):
        mpc.solve(pr)
    with pytest.raises(ValueError, match="unknown plant"):
        get_plant("reactor9")
    with pytest.raises(ValueError, match="state must have shape"):
        plant.step(np.zeros(3), np.zeros(2), np.zeros(2))


# ------------------------------------------------------------------ oracles
def test_interventional_oracle_labels_hand_made_scenarios(gh):
    plant, mpc = gh
    d_nom = np.tile([0.3, 14.0], (N, 1))
    # 1) a tightened upper temperature bound ahead, nominal weather: the bound is the cause
    pr = _gh_problem(plant, t_upper=19.5, d=d_nom.copy())
    res = interventional_oracle(mpc, pr, mpc.solve(pr, warm=False), d_nom)
    assert plant.causes[res.label].name == "T upper bound"
    # 2) a cold snap forecast, no tightened bound: the outdoor-temperature forecast is the cause
    cold = d_nom.copy()
    cold[2:, 1] -= 10.0
    pr = _gh_problem(plant, d=cold)
    res = interventional_oracle(mpc, pr, mpc.solve(pr, warm=False), d_nom)
    assert plant.causes[res.label].name == "T_out forecast"
    # removing an inactive cause changes nothing
    assert res.deltas[plant.cause_names.index("H upper bound")] < 1e-5


def test_remove_cause_relaxes_only_that_cause():
    plant = get_plant("hvac")
    lo = np.full((N, 2), 19.0)
    hi = np.full((N, 2), 25.0)
    d = np.ones((N, 2))
    pr = MPCProblem(np.array([22.0, 6.0]), np.array([0.3, 22.0]), d, lo, hi)
    nom = np.zeros((N, 2))
    r0 = remove_cause(plant, pr, 0, nom)
    assert np.all(np.isinf(r0.x_upper[:, 0])) and np.all(r0.x_upper[:, 1] == 25.0)
    r3 = remove_cause(plant, pr, 3, nom)
    assert np.all(r3.d[:, 0] == 0) and np.all(r3.d[:, 1] == 1) and np.all(pr.d == 1)
    with pytest.raises(ValueError, match="out of range"):
        remove_cause(plant, pr, 7, nom)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), days=st.integers(1, 3))
def test_designed_schedules_are_balanced(seed, days):
    for name in ("greenhouse", "hvac"):
        plant = get_plant(name)
        sch = make_schedule(plant, days, 5, N, np.random.default_rng(seed))
        labels = [design_oracle(e) for e in sch.events]
        assert np.bincount(labels, minlength=5).tolist() == [days] * 5
        for e in sch.events:
            assert 1 <= e.onset - e.t_explain <= 3 and e.t_explain >= 0
            assert e.onset < days * STEPS_PER_DAY
    with pytest.raises(ValueError, match="events a day"):
        make_schedule(plant, 1, 20, N, np.random.default_rng(0))


# ------------------------------------------------------------------ evidence
def test_knowledge_graph_signs_follow_the_physics():
    plant = get_plant("greenhouse")
    G = knowledge_graph(plant)
    x, u = np.array([22.0, 75.0]), np.array([0.2, 0.2])
    warm_outside, cold_outside = np.array([0.3, 30.0]), np.array([0.3, 10.0])
    # an upper T bound calls for more venting when it is colder outside, less when warmer
    assert path_signs(G, "T upper bound", "vent", x, u, cold_outside) == [1]
    assert path_signs(G, "T upper bound", "vent", x, u, warm_outside) == [-1]
    assert path_signs(G, "T lower bound", "heating", x, u, cold_outside) == [1]
    assert path_signs(G, "solar forecast", "heating", x, u, cold_outside) == [-1]
    assert path_signs(G, "H upper bound", "heating", x, u, cold_outside) == []
    hv = knowledge_graph(get_plant("hvac"))
    x = np.array([22.0, 6.0])
    assert path_signs(hv, "Tz upper bound", "airflow", x, np.array([0.3, 16.0]), np.zeros(2)) == [1]
    assert path_signs(hv, "Tz upper bound", "airflow", x, np.array([0.3, 28.0]), np.zeros(2)) == [-1]


def test_kkt_evidence_is_zero_for_inactive_causes_and_positive_for_binding(gh):
    plant, mpc = gh
    d_nom = np.tile([0.3, 14.0], (N, 1))
    pr = _gh_problem(plant, t_upper=19.5, d=d_nom.copy())
    sol = mpc.solve(pr, warm=False)
    ctx = MoveContext(du=(sol.u[0] - pr.u_prev), sol=sol, d_dev=pr.d - d_nom,
                      x_lower=pr.x_lower, x_upper=pr.x_upper, d=pr.d)
    E = kkt_evidence(plant, ctx, gamma=0.9)
    names = plant.cause_names
    assert E[names.index("T upper bound")] > 0.1
    assert E[names.index("H upper bound")] < 1e-6 and E[names.index("solar forecast")] == 0
    # gamma = 1 sums multipliers exactly
    E1 = kkt_evidence(plant, ctx, gamma=1.0)
    assert E1[0] == pytest.approx(sol.lam_x_upper[:, 0].sum() * plant.causes[0].scale)
    support, _ = kg_evidence(knowledge_graph(plant), plant, ctx)
    assert support[names.index("T upper bound")] == 1 and support.sum() == 1
    with pytest.raises(ValueError, match="gamma"):
        kkt_evidence(plant, ctx, gamma=0.0)


def test_pcmci_recovers_a_known_lagged_structure():
    rng = np.random.default_rng(0)
    T = 500
    X = np.zeros((T, 3))
    e = rng.normal(size=(T, 3))
    for t in range(2, T):
        X[t, 0] = 0.6 * X[t - 1, 0] + e[t, 0]
        X[t, 1] = 0.5 * X[t - 1, 1] + 0.7 * X[t - 2, 0] + e[t, 1]
        X[t, 2] = 0.4 * X[t - 1, 2] + e[t, 2]
    p = pcmci_pvalues(X, tau_max=3)
    assert p.shape == (3, 3, 4)
    assert p[0, 1, 2] < 1e-6  # the true link X0(t-2) -> X1(t)
    assert p[0, 1, 1] > 0.01 and p[0, 1, 3] > 0.01  # not at the wrong lags
    assert pcmci_link_pvalue(p, 2, 1) > 0.01 and pcmci_link_pvalue(p, 1, 0) > 0.01
    assert pcmci_link_pvalue(p, 0, 1) == pytest.approx(p[0, 1, 2])
    with pytest.raises(ValueError, match="constant columns"):
        pcmci_pvalues(np.c_[X[:, :2], np.ones(T)], tau_max=2)
    with pytest.raises(ValueError, match="PCMCI needs"):
        pcmci_pvalues(X[:5], tau_max=3)


# ------------------------------------------------------------------ ranking
def _ev(support, kkt, pc):
    support = np.asarray(support, float)
    return Evidence(kg_support=support, kg_consistent=support, kkt=np.asarray(kkt, float),
                    pcmci=np.asarray(pc, float))


def test_rank_and_validate_combines_sources_and_validates():
    ev = _ev([0, 0, 1], [5.0, 0.0, 0.0], [0.5, 0.5, 0.5])
    p = HCAParams(tau_kkt=0.1)
    # KKT favours cause 0 but only cause 2 passes validation (active, sign-consistent)
    assert rank_and_validate(ev, p) == 2
    assert rank_and_validate(ev, p.without("KG")) == 0
    assert rank_and_validate(ev, p.without("KKT")) == 2
    # a threshold above the evidence removes the KKT term
    assert rank_and_validate(ev, HCAParams(tau_kkt=10.0).without("KG")) == 0  # ties: first index
    assert rank_and_validate(_ev([0, 0, 0], [0.0, 3.0, 0.0], [0.9, 0.1, 0.1]), p.without("KKT")) == 0
    with pytest.raises(ValueError, match="unknown evidence source"):
        p.without("LIME")


@settings(max_examples=40, deadline=None)
@given(kkt=st.lists(st.floats(0, 10), min_size=2, max_size=6), tau=st.floats(0, 5))
def test_kkt_term_is_a_thresholded_share(kkt, tau):
    k = np.array(kkt)
    t = kkt_term(k, tau)
    assert np.all(t >= 0) and t.sum() <= 1 + 1e-9
    assert np.all(t[k <= tau] == 0)
    if k.sum() > 0:
        np.testing.assert_allclose(t[k > tau], k[k > tau] / k.sum())


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_calibrate_tau_maximises_accuracy_over_the_grid(seed):
    rng = np.random.default_rng(seed)
    evs = [_ev(rng.integers(0, 2, 4), rng.exponential(0.3, 4), rng.uniform(0, 1, 4)) for _ in range(8)]
    labels = rng.integers(0, 4, 8)
    p = HCAParams()
    tau = calibrate_tau(evs, labels, p)
    accs = {g: np.mean(explain_all(evs, HCAParams(tau_kkt=g)) == labels) for g in TAU_GRID}
    assert tau in TAU_GRID
    assert accs[tau] == max(accs.values())
    with pytest.raises(ValueError, match="as many labels"):
        calibrate_tau(evs, labels[:3], p)


def test_config_presets():
    assert Config.preset("smoke").lime_samples < Config.preset("book").lime_samples
    book = Config.preset("book")
    assert book.calib_days == 2 and book.n_days == 3 and book.random_per_day > 0 and book.shap_samples >= 10
    with pytest.raises(ValueError, match="random_per_day"):
        Config.preset("book", random_per_day=-1)
    assert Config.preset("book", lime_samples=None).lime_samples == 50
    with pytest.raises(TypeError):
        Config.preset("book", n_layers=3)
    with pytest.raises(ValueError, match="calib_days < n_days"):
        Config.preset("book", n_days=1)
    with pytest.raises(ValueError, match="unknown domains"):
        Config(domains=("reactor",))


def test_soft_mpc_matches_hard_when_feasible_and_survives_infeasibility(gh):
    plant, mpc = gh
    soft = NMPC(plant, N=N, tol=1e-10, soft=1000.0)
    pr = _gh_problem(plant, t_upper=20.5, d=np.tile([0.5, 16.0], (N, 1)))
    hard_sol, soft_sol = mpc.solve(pr, warm=False), soft.solve(pr, warm=False)
    np.testing.assert_allclose(soft_sol.u, hard_sol.u, atol=1e-5)
    np.testing.assert_allclose(soft_sol.lam_x_upper, hard_sol.lam_x_upper, atol=1e-4)
    bad = _gh_problem(plant)
    bad.x_lower[0, 0] = 27.0
    s = soft.solve(bad, warm=False)  # violates the impossible bound instead of failing
    viol = 27.0 - s.x[1, 0]
    assert viol > 0  # the multiplier is the penalty's slope rho (1 + 2 e)
    assert s.lam_x_lower[0, 0] == pytest.approx(1000.0 * (1 + 2 * viol), rel=1e-3)
    with pytest.raises(ValueError, match="soft"):
        NMPC(plant, N=N, soft=-1.0)


def test_distractor_events_overlap_with_another_cause():
    plant = get_plant("hvac")
    sch = make_schedule(plant, 2, 5, N, np.random.default_rng(3), distractor=0.5)
    assert all(e.distractor not in (-1, e.cause) for e in sch.events)
    clean = make_schedule(plant, 2, 5, N, np.random.default_rng(3), distractor=0.0)
    assert all(e.distractor == -1 for e in clean.events)
    with pytest.raises(ValueError, match="distractor"):
        make_schedule(plant, 1, 5, N, np.random.default_rng(0), distractor=1.5)


def test_a_small_run_end_to_end_scores_every_method_on_the_test_moves():
    from minirepro.papers.hca.experiment import METHODS, accuracy_table, predictions, run_domain

    cfg = Config.preset("smoke", lime_samples=10, shap_samples=10, random_per_day=2, domains=("hvac",))
    run = run_domain("hvac", cfg, seed=4)
    m = run.moves
    test = m[m.split == "test"]
    assert len(m) + run.info["skipped_moves"] == 5 + 2 and len(test) >= 1
    assert (m.origin == "random").sum() + run.info["skipped_moves"] >= 2 and m.t.is_monotonic_increasing
    assert (m[m.origin == "random"].design == -1).all() and (m[m.origin == "event"].design >= 0).all()
    assert (test.lime >= 0).all() and (test.shap >= 0).all() and (m[m.split == "early"].lime == -1).all()
    acc = accuracy_table([run])
    assert set(acc.method) == set(METHODS) and acc.accuracy.between(0, 1).all()
    for oracle in ("interventional", "design"):
        pred = predictions(run, HCAParams(), oracle)
        ev_test = [run.evidence[i] for i in np.flatnonzero((m.split == "test") & (m[oracle] >= 0))]
        assert pred["KKT only"].tolist() == [int(np.argmax(e.kkt)) for e in ev_test]
        assert (pred["label"] >= 0).all() and (oracle == "interventional" or (pred.origin == "event").all())
        counts = np.bincount(pred["label"])
        majority = acc[(acc.oracle == oracle) & (acc.method == "majority")].accuracy.item()
        assert majority == pytest.approx(counts.max() / counts.sum())
    assert run.p_matrix.shape == (6, 6, cfg.tau_max + 1)


def test_per_seed_accuracy_pools_domains_by_moves_and_summary():
    import pandas as pd

    from minirepro.papers import hca

    acc = pd.DataFrame({"domain": ["g", "h", "g", "h"], "seed": [0, 0, 1, 1], "oracle": "design",
                        "method": "HCA", "accuracy": [1.0, 0.0, 0.5, 0.5], "n": [3, 1, 2, 2],
                        "tau": 0.1})
    ps = hca.per_seed_accuracy(acc, "design")
    assert list(ps.index) == [0, 1] and ps["HCA"].tolist() == [0.75, 0.5]
    s = hca.summarise(acc)
    assert s.loc[0, "mean"] == 0.5 and s.loc[0, "runs"] == 4 and s.loc[0, "lo"] < 0.5 < s.loc[0, "hi"]
    with pytest.raises(ValueError, match="oracle"):
        hca.per_seed_accuracy(acc, "experts")


def test_one_move_is_the_largest_change_one_flipped_move_makes_to_the_mean_accuracy():
    import pandas as pd

    from minirepro.papers import hca

    acc = pd.DataFrame({"domain": ["g", "h", "c"], "seed": 0, "oracle": "design", "method": "KernelSHAP",
                        "accuracy": [0.5, 0.25, float("nan")], "n": [2, 4, 0], "tau": 0.1})
    before = hca.mean_accuracy(acc, "KernelSHAP", "design")
    flipped = acc.assign(accuracy=[1.0, 0.25, float("nan")])  # one move of the 2-move run
    assert hca.one_move(acc, "KernelSHAP", "design") == pytest.approx(
        hca.mean_accuracy(flipped, "KernelSHAP", "design") - before) == pytest.approx(1 / 4)
    with pytest.raises(ValueError, match="no scored move"):
        hca.one_move(acc, "HCA", "design")


def test_random_moves_avoid_the_event_anchored_ones_and_fill_every_day():
    from minirepro.papers.hca.experiment import random_moves

    plant = get_plant("greenhouse")
    sch = make_schedule(plant, 3, 5, N, np.random.default_rng(0))
    ts = random_moves(sch, 9, np.random.default_rng(1))
    events = {e.t_explain for e in sch.events}
    assert len(ts) == len(set(ts)) == 27 and not events & set(ts) and 0 not in ts
    assert np.bincount(np.array(ts) // STEPS_PER_DAY).tolist() == [9, 9, 9]
    assert ts == random_moves(sch, 9, np.random.default_rng(1))


def _fake_run(domain, seed, n, rng):
    import pandas as pd

    from minirepro.papers.hca.experiment import Run

    ev = [Evidence(kg_support=rng.integers(0, 2, 5).astype(float), kg_consistent=np.ones(5),
                   kkt=rng.exponential(0.3, 5) * (rng.random(5) < 0.5), pcmci=rng.random(5)) for _ in range(n)]
    moves = pd.DataFrame({"split": ["early"] * (n - 3) + ["test"] * 3, "t": np.arange(n),
                          "origin": "event", "interventional": rng.integers(0, 5, n),
                          "design": rng.integers(-1, 5, n), "lime": -1, "shap": -1})
    return Run(domain, seed, {}, moves, ev, np.zeros((1, 1, 1)), 0.0)


def test_pooled_calibration_uses_every_early_move_of_the_domain_and_no_other():
    from minirepro.papers.hca.experiment import move_table, pooled_taus

    rng = np.random.default_rng(0)
    runs = [_fake_run(d, s, 12, rng) for d in ("greenhouse", "hvac") for s in range(3)]
    p = HCAParams()
    taus = pooled_taus(runs, p)
    for dom in ("greenhouse", "hvac"):
        for oracle in ("interventional", "design"):
            ev, lab = [], []
            for r in runs:
                if r.plant_name == dom:
                    keep = (r.moves.split == "early").to_numpy() & (r.moves[oracle] >= 0).to_numpy()
                    ev += [e for e, k in zip(r.evidence, keep) if k]
                    lab += r.moves[oracle].to_numpy()[keep].tolist()
            assert taus[dom, oracle] == calibrate_tau(ev, lab, p)
    mv = move_table(runs, p)
    assert set(zip(mv.domain, mv.oracle, mv.tau)) == {(d, o, t) for (d, o), t in taus.items()}


def test_mcnemar_sample_size_matches_the_closed_form_and_a_simulation():
    from scipy.stats import norm

    from minirepro.papers.hca.experiment import mcnemar_moves, mcnemar_power

    delta, p_disc = 0.2, 0.4
    z_a, z_b = norm.ppf(0.975), norm.ppf(0.8)
    closed = ((z_a * np.sqrt(p_disc) + z_b * np.sqrt(p_disc - delta ** 2)) / delta) ** 2
    n = mcnemar_moves(delta, p_disc)
    assert n == int(np.ceil(closed))
    assert mcnemar_power(n - 1, delta, p_disc) < 0.8 <= mcnemar_power(n, delta, p_disc)
    rng = np.random.default_rng(0)  # simulate: p10 = 0.3, p01 = 0.1, McNemar's z test
    cells = rng.multinomial(n, [(p_disc + delta) / 2, (p_disc - delta) / 2, 1 - p_disc], size=4000)
    b, c = cells[:, 0], cells[:, 1]
    z = np.abs(b - c) / np.sqrt(np.maximum(b + c, 1))
    assert abs(np.mean(z > z_a) - mcnemar_power(n, delta, p_disc)) < 0.05
    with pytest.raises(ValueError):
        mcnemar_power(10, 0.5, 0.4)


def test_cstr_reaches_the_textbook_steady_state_and_its_closed_form():
    """Seborg et al.'s exothermic CSTR at q = 100, Tc = 300 K: T = 324.5 K, C_A = 0.877 mol/L;
    at any steady state C_A = C_Af / (1 + (V/q) k(T)) and the energy balance closes."""
    from minirepro.papers.hca.plants import CSTR

    plant = get_plant("cstr")
    p = CSTR
    for tc, q, ref in ((300.0, 100.0, (324.5, 0.877)), (295.0, 90.0, None)):
        x = np.array([330.0, 0.8])
        for _ in range(400):
            x = plant.step(x, [tc, q], [1.0, 350.0])
        k = p["k0"] * np.exp(-p["E_R"] / x[0])
        assert x[1] == pytest.approx(1.0 / (1.0 + p["V"] / q * k), rel=1e-6)
        heat = q / p["V"] * (350.0 - x[0]) + p["dH"] / p["rho_cp"] * k * x[1] + p["UA"] / (p["V"] * p["rho_cp"]) * (tc - x[0])
        assert heat == pytest.approx(0.0, abs=1e-6)
        if ref:
            assert x[0] == pytest.approx(ref[0], abs=0.05) and x[1] == pytest.approx(ref[1], abs=0.001)
    G = knowledge_graph(plant)  # a rising temperature calls for colder coolant; feed-rich -> hotter
    assert G.edges["T", "T_coolant"]["sign"] == -1 and G.edges["CA_feed forecast", "T"]["sign"] == 1
    x, u = np.array([325.0, 0.87]), np.array([300.0, 100.0])
    assert path_signs(G, "T upper bound", "feed", x, u, np.array([1.0, 350.0])) == [-1]  # hot feed: less of it
    assert path_signs(G, "T upper bound", "feed", x, u, np.array([1.0, 300.0])) == [1]  # cold feed: more
