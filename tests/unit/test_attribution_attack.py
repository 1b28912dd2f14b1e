"""Attribution attack (paper 18): evaluators, defences, FedAvg and the attack's pieces.

References: games with known values (glove, additive, unanimity), Shapley by brute force
over permutations, Krum by brute force over neighbour subsets, FedAvg by a plain loop
per coalition, torch autograd for the local gradient, and axioms as hypothesis properties.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirepro.papers import attribution_attack as A


def table(v, n: int) -> np.ndarray:
    """A characteristic function on player sets, as a bitmask table of length 2**n."""
    return np.array([v({k for k in range(n) if b >> k & 1}) for b in range(2 ** n)], dtype=float)


def brute_shapley(U: np.ndarray, n: int) -> np.ndarray:
    phi = np.zeros(n)
    for order in itertools.permutations(range(n)):
        b = 0
        for k in order:
            phi[k] += U[b | 1 << k] - U[b]
            b |= 1 << k
    return phi / math.factorial(n)


# ------------------------------------------------------------------ evaluators


def test_glove_game_has_its_known_values_and_the_axioms():
    # players 0, 1 hold left gloves, 2 a right glove, 3 nothing (null player)
    U = table(lambda S: min(len(S & {0, 1}), len(S & {2})), 4)
    phi = A.exact_shapley(U)
    assert np.allclose(phi, [1 / 6, 1 / 6, 2 / 3, 0.0])
    assert math.isclose(phi.sum(), U[-1] - U[0])            # efficiency
    assert phi[0] == pytest.approx(phi[1])                   # symmetry
    assert A.banzhaf(U)[3] == 0 and A.leave_one_out(U)[3] == 0  # null player
    assert np.allclose(A.leave_one_out(U), [0, 0, 1, 0])
    assert np.allclose(A.banzhaf(U), [1 / 4, 1 / 4, 3 / 4, 0])  # mean marginals over 8 coalitions


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(0, 10_000))
def test_exact_shapley_equals_permutation_brute_force_and_is_efficient(n, seed):
    U = np.random.default_rng(seed).normal(size=2 ** n)
    phi = A.exact_shapley(U)
    assert np.allclose(phi, brute_shapley(U, n))
    assert math.isclose(phi.sum(), U[-1] - U[0], abs_tol=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=2, max_size=7), st.integers(1, 7))
def test_additive_and_unanimity_games_closed_forms(a, t):
    n = len(a)
    U = table(lambda S: sum(a[k] for k in S), n)
    for f in (A.exact_shapley, A.banzhaf, A.leave_one_out):
        assert np.allclose(f(U), a)
    T = set(range(min(t, n)))
    U = table(lambda S: float(T <= S), n)
    inside = np.array([k in T for k in range(n)])
    assert np.allclose(A.exact_shapley(U), np.where(inside, 1 / len(T), 0))
    assert np.allclose(A.banzhaf(U), np.where(inside, 0.5 ** (len(T) - 1), 0))
    assert np.allclose(A.leave_one_out(U), inside.astype(float))


def test_monte_carlo_shapley_converges_to_the_exact_value():
    n = 6
    U = np.random.default_rng(3).uniform(size=2 ** n)
    exact = A.exact_shapley(U)
    errs = [np.abs(A.monte_carlo_shapley(U, n, T, seed=1) - exact).max() for T in (10, 100, 3000)]
    assert errs[2] < errs[0] and errs[2] < 0.05
    # unbiased: the mean over independent short runs approaches the exact value
    runs = np.mean([A.monte_carlo_shapley(U, n, 5, seed=s) for s in range(400)], axis=0)
    assert np.abs(runs - exact).max() < 0.05
    # a callable utility gives the same answer as the table
    assert np.allclose(A.monte_carlo_shapley(lambda b: U[b], n, 20, seed=2),
                       A.monte_carlo_shapley(U, n, 20, seed=2))


def test_exact_shapley_refuses_more_than_12_clients_and_suggests_monte_carlo():
    with pytest.raises(ValueError, match="monte_carlo_shapley"):
        A.exact_shapley(np.zeros(2 ** 13))
    with pytest.raises(ValueError, match="2\\*\\*n"):
        A.exact_shapley(np.zeros(7))
    with pytest.raises(ValueError, match="non-finite"):
        A.banzhaf(np.array([0.0, np.nan]))
    with pytest.raises(ValueError):
        A.monte_carlo_shapley(np.zeros(8), 3, 0)
    with pytest.raises(ValueError, match="zero"):
        A.share(np.zeros(3))
    assert np.abs(A.share([2.0, -1.0, 1.0])).sum() == pytest.approx(1.0)


# ------------------------------------------------------------------ defences


def brute_krum(u: np.ndarray, f: int) -> np.ndarray:
    n, m = len(u), len(u) - f - 2
    out = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        out.append(min(sum(float(np.sum((u[i] - u[j]) ** 2)) for j in sub)
                       for sub in itertools.combinations(others, m)))
    return np.array(out)


@settings(max_examples=30, deadline=None)
@given(st.integers(4, 8), st.integers(0, 2), st.integers(0, 10_000))
def test_krum_scores_and_selection_match_brute_force(n, f, seed):
    if n <= f + 2:
        return
    u = np.random.default_rng(seed).normal(size=(n, 3, 2))
    assert np.allclose(A.krum_scores(u, f), brute_krum(u.reshape(n, -1), f))
    flags = A.krum_flags(u, f)
    assert flags.sum() == f
    assert not flags[np.argmin(brute_krum(u.reshape(n, -1), f))]  # Krum's choice is kept


def test_krum_drops_an_outlier_and_rejects_too_few_clients():
    u = np.zeros((6, 4))
    u[:5] = np.random.default_rng(0).normal(scale=0.1, size=(5, 4))
    u[5] = 10.0
    assert A.krum_flags(u, 1).tolist() == [False] * 5 + [True]
    with pytest.raises(ValueError, match="n > f \\+ 2"):
        A.krum_scores(u[:3], 1)


def test_foolsgold_zeroes_sybils_and_keeps_distinct_clients():
    e = np.eye(5)
    h = np.stack([e[0], e[1], e[2], e[3], e[3]])  # clients 3 and 4 push the same direction
    w = A.foolsgold_weights(h)
    assert np.allclose(w[:3], 1.0) and np.allclose(w[3:], 0.0)
    assert np.allclose(A.foolsgold_weights(e), 1.0)


def test_norm_clipping_flags_only_large_updates():
    u = np.ones((5, 3))
    u[2] *= 3.0
    assert A.clip_flags(u, 2.0).tolist() == [False, False, True, False, False]
    with pytest.raises(ValueError):
        A.clip_flags(u, 0.0)


# ------------------------------------------------------------------ FedAvg and the attack


def test_local_update_gradient_matches_torch_autograd():
    rng = np.random.default_rng(0)
    X, y = rng.uniform(size=(20, 64)), rng.integers(0, 10, 20)
    W = rng.normal(scale=0.1, size=(65, 10))
    upd = A.local_update(W, A.fedavg.add_bias(X), y, steps=1, lr=0.5, weight_decay=0.01)
    Wt = torch.tensor(W, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(torch.tensor(A.fedavg.add_bias(X)) @ Wt, torch.tensor(y)) \
        + 0.005 * (Wt ** 2).sum()
    loss.backward()
    assert np.allclose(upd, -0.5 * Wt.grad.numpy())


def test_coalition_fedavg_equals_a_plain_loop_per_coalition():
    rng = np.random.default_rng(1)
    clients = [(rng.uniform(size=(n, 64)), rng.integers(0, 10, n)) for n in (7, 9, 5)]
    run = A.fedavg_coalitions(clients, rounds=3, local_steps=2, lr=0.7, weight_decay=0.0)
    for b, mask in enumerate(A.all_masks(3)):
        W = np.zeros((65, 10))
        for _ in range(3):
            ups = [A.local_update(W, A.fedavg.add_bias(X), y, 2, 0.7, 0.0)
                   for k, (X, y) in enumerate(clients) if mask[k]]
            W = W + (np.mean(ups, axis=0) if ups else 0.0)
        assert np.allclose(run.W[b], W), b
    assert np.allclose(run.history[-1], run.W[-1])
    assert run.updates.shape == (3, 3, 65, 10)


def test_torch_local_step_of_the_attack_equals_the_numpy_client():
    rng = np.random.default_rng(2)
    X, y = A.fedavg.add_bias(rng.uniform(size=(12, 64))), rng.integers(0, 10, 12)
    W = rng.normal(scale=0.1, size=(65, 10))
    Y = torch.nn.functional.one_hot(torch.tensor(y), 10).double()
    t = A.attack._local(torch.tensor(W), torch.tensor(X), Y, 4, 0.3, 1e-3).numpy()
    assert np.allclose(t, A.local_update(W, X, y, 4, 0.3, 1e-3))


def test_pca_decoder_round_trips_and_rejects_bad_rank():
    X = np.random.default_rng(0).uniform(0.2, 0.8, size=(30, 8))
    dec = A.PCADecoder.fit(X, 8)
    back = dec.decode(torch.tensor(dec.encode(X))).numpy()
    assert np.allclose(back, X)
    with pytest.raises(ValueError):
        A.PCADecoder.fit(X, 30)


def test_federation_splits_are_disjoint_and_the_adversary_is_a_typical_client():
    fed = A.make_federation(0)
    sets = [fed.val[0], fed.proxy[0], fed.reserve[0]] + [X for X, _ in fed.clients]
    rows = [{r.tobytes() for r in S} for S in sets]
    sizes = sum(len(r) for r in rows)
    assert len(set().union(*rows)) >= sizes - 5  # disjoint up to duplicate images in digits
    assert len(fed.clients) == 6 and sorted(np.unique(fed.clients[0][1])) == sorted(
        c for c, r in fed.roles.items() if r == "adversary")
    held = [set(np.unique(y)) for _, y in fed.clients[1:]]
    for c in fed.clients[0][1][:1]:
        assert sum(c in h for h in held) == 1  # each adversary class is also held by one benign client
    with pytest.raises(ValueError):
        A.make_federation(0, per_class=500)


# --- the defence study ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_attackers_are_the_ones_each_defence_is_built_for(seed):
    """The planted boosted update is what Krum and clipping flag; the planted sybil is what
    FoolsGold flags (both copies), on random updates of several rounds; the input is not changed."""
    rng = np.random.default_rng(seed)
    ups = rng.normal(size=(8, 6, 5, 10))
    before = ups.copy()
    boosted = A.experiment.planted_updates(ups, "Krum")
    assert np.array_equal(ups, before) and np.allclose(boosted[:, 0], 3.0 * ups[:, 0])
    assert np.allclose(boosted[:, 1:], ups[:, 1:])
    assert np.array_equal(A.experiment.planted_updates(ups, "norm clip"), boosted)
    sybil = A.experiment.planted_updates(ups, "FoolsGold")
    assert np.array_equal(sybil[:, 1], ups[:, 0]) and np.array_equal(sybil[:, 2:], ups[:, 2:])
    rep = A.defence_report(boosted, 1, 0.5, 2.0)
    assert rep["krum_flag"][:, 0].all() and rep["norm_flag"][:, 0].all()
    rep = A.defence_report(sybil, 1, 0.5, 2.0)
    assert rep["foolsgold_flag"][:, :2].all() and not rep["foolsgold_flag"][:, 2:].any()
    with pytest.raises(ValueError, match="unknown defence"):
        A.experiment.planted_updates(ups, "median")


def test_defence_study_equals_the_full_runs_grand_coalition_and_pairs_by_seed():
    """The defence study trains the full federation alone; its flags equal those of the grand
    coalition in the run over all 64 coalitions (same seed, same crafted batch), for two seeds;
    flag_rise pairs the two arms of the same seed."""
    import pandas as pd

    cfg = A.Config.preset("smoke", rounds=4, attack_steps=5, mc_permutations=5, n_defence_seeds=2)
    study = A.run_defences(cfg)
    for s in cfg.defence_seeds:
        full = pd.DataFrame(A.run_seed(cfg, s)["flags"])
        full = full[full.arm.isin(["honest", "attack"])].set_index(["arm", "defence", "client"]).flag_rate
        mine = study[(study.seed == s) & study.arm.isin(["honest", "attack"])]
        mine = mine.set_index(["arm", "defence", "client"]).flag_rate
        assert np.allclose(mine.sort_index().to_numpy(), full.sort_index().to_numpy())
    r = A.flag_rise(study, "Krum")
    assert list(r.index) == cfg.defence_seeds
    adv = study[(study.defence == "Krum") & (study.client == 0)]
    for s in cfg.defence_seeds:
        a = adv[(adv.seed == s) & (adv.arm == "attack")].flag_rate.item()
        h = adv[(adv.seed == s) & (adv.arm == "honest")].flag_rate.item()
        assert r.loc[s, "rise"] == pytest.approx(a - h)
    ben = study[(study.defence == "Krum") & (study.client > 0) & (study.arm == "attack")]
    assert r["benign attack"].to_numpy() == pytest.approx(ben.groupby("seed").flag_rate.mean().to_numpy())
    # Multi-Krum drops exactly f of the n clients every round: the rates average to f/n
    per_round = study[(study.defence == "Krum") & (study.arm == "honest")].groupby("seed").flag_rate.sum()
    assert np.allclose(per_round.to_numpy(), cfg.krum_f)


def test_config_refuses_no_defence_seeds_and_lists_them():
    assert A.Config(seed=3, n_defence_seeds=4).defence_seeds == [3, 4, 5, 6]
    with pytest.raises(ValueError, match="n_defence_seeds"):
        A.Config(n_defence_seeds=0)
