"""Tests of the TBPO chapter's testbed, losses and training loop (paper 16)."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirepro.papers.tbpo import evaluation as evaluation_module
from minirepro.papers.tbpo import experiment as experiment_module
from minirepro.papers.tbpo import losses as L
from minirepro.papers.tbpo import policy as policy_module
from minirepro.papers.tbpo.analysis import (
    headline,
    matched_kappa,
    oscillation,
    paired,
    per_seed,
    reward_at_kl,
)
from minirepro.papers.tbpo.config import TOKEN_METHODS, Config
from minirepro.papers.tbpo.evaluation import distinct_n, evaluate, make_eval_set
from minirepro.papers.tbpo.experiment import logistic_vs_dpo, run_experiment
from minirepro.papers.tbpo.losses import METHODS, method_loss
from minirepro.papers.tbpo.mdp import (
    TokenMDP,
    enumerate_responses,
    exact_metrics,
    make_mdp,
    make_preferences,
    n_responses,
    sample_responses,
    sequence_reward,
    soft_bellman,
    state_distribution,
    table_logprob,
)
from minirepro.papers.tbpo.policy import (
    Policy,
    TablePolicy,
    fit_reference,
    log_reference,
    token_stats,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one intra-op thread (as the chapter uses), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


MEMBER_CASES = [("logistic", 1.0), ("kliep", 1.0), ("lsif", 1.0), ("ba", -0.5), ("ba", 0.5), ("ba", 2.0)]


def _pair(B: int = 5, T: int = 4, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    lw, ll = torch.randn(B, T, generator=g, dtype=dtype), torch.randn(B, T, generator=g, dtype=dtype)
    nw = torch.randint(1, T + 1, (B,), generator=g)
    nl = torch.randint(1, T + 1, (B,), generator=g)
    mw = (torch.arange(T)[None] < nw[:, None]).to(dtype)
    ml = (torch.arange(T)[None] < nl[:, None]).to(dtype)
    return lw, mw, ll, ml


# ---------------------------------------------------------------- Bregman family

@pytest.mark.parametrize("member,lam", MEMBER_CASES)
@settings(max_examples=15, deadline=None)
@given(p=st.floats(0.05, 0.95))
def test_population_minimiser_is_R_data(member, lam, p):
    """For every member, argmin_R p l(R) + (1-p) l(1/R) is R_data = (1-p)/p."""
    R = L.population_minimiser(member, p, lam)
    assert R == pytest.approx((1 - p) / p, rel=1e-4)


@pytest.mark.parametrize("member,lam", MEMBER_CASES)
def test_closed_form_is_the_bregman_objective(member, lam):
    """c_h [h'(R) R - h(R) - h'(1/R)], with h' by autograd from h, equals the closed form
    up to an additive constant."""
    R = torch.linspace(0.05, 8.0, 200, dtype=torch.float64, requires_grad=True)
    hp = torch.autograd.grad(L.bregman_h(R, member, lam).sum(), R)[0]
    Rinv = (1 / R).detach().requires_grad_(True)
    hp_inv = torch.autograd.grad(L.bregman_h(Rinv, member, lam).sum(), Rinv)[0]
    generic = L.bregman_scale(member, lam) * (hp * R - L.bregman_h(R, member, lam) - hp_inv)
    closed = L.bregman_ell(torch.log(R), member, lam)
    diff = (generic - closed).detach()
    assert torch.allclose(diff, diff[0].expand_as(diff), atol=1e-9)


@pytest.mark.parametrize("member,lam", MEMBER_CASES)
def test_every_member_has_dpo_slope_at_zero_margin(member, lam):
    m = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    one = torch.ones(1, 1, dtype=torch.float64)
    beta = 0.7
    loss = L.bregman_sequence_loss(m, one, torch.zeros_like(m), one, beta, member, lam)
    (g,) = torch.autograd.grad(loss, m)
    assert float(g) == pytest.approx(-beta / 2, rel=1e-9)


def test_logistic_member_equals_dpo_exactly():
    lw, mw, ll, ml = _pair(B=64, T=6, seed=3)
    lw.requires_grad_(True)
    for beta in (0.1, 1.0, 3.0):
        a = L.bregman_sequence_loss(lw, mw, ll, ml, beta, "logistic")
        b = L.dpo_loss(lw, mw, ll, ml, beta)
        assert torch.equal(a, b)
        ga = torch.autograd.grad(a, lw)[0]
        gb = torch.autograd.grad(b, lw)[0]
        assert torch.equal(ga, gb)


def test_tbpo_on_one_token_collapses_to_dpo():
    """With one token per response and no baseline, the token-level logistic loss is DPO."""
    lw, mw, ll, ml = _pair(B=16, T=1, seed=4)
    mw, ml = torch.ones_like(mw), torch.ones_like(ml)
    beta = 0.5
    q_w = L.tbpo_q_values(lw, mw, torch.zeros_like(lw), beta)
    q_l = L.tbpo_q_values(ll, ml, torch.zeros_like(ll), beta)
    assert torch.allclose(L.tbpo_token_loss(q_w, mw, q_l, ml), L.dpo_loss(lw, mw, ll, ml, beta), atol=1e-14)


def test_masks_ignore_padding_and_handle_unequal_lengths():
    lw, mw, ll, ml = _pair(B=8, T=5, seed=5)
    junk_w = lw + 100.0 * (1 - mw) * torch.randn_like(lw)
    junk_l = ll + 100.0 * (1 - ml) * torch.randn_like(ll)
    assert (mw.sum(1) != ml.sum(1)).any()  # the case really has unequal lengths
    for fn in (lambda a, b: L.dpo_loss(a, mw, b, ml, 1.0),
               lambda a, b: L.bregman_sequence_loss(a, mw, b, ml, 1.0, "kliep"),
               lambda a, b: L.tdpo_loss(a, mw, b, ml, a.abs(), b.abs(), 1.0),
               lambda a, b: L.tbpo_token_loss(a, mw, b, ml)):
        assert torch.allclose(fn(lw, ll), fn(junk_w, junk_l), atol=1e-12)
    # token loss by hand: positions up to the longer response, ended responses count q = 0
    q_w, q_l = lw * mw, ll * ml
    manual = []
    for i in range(8):
        n = int(max(mw[i].sum(), ml[i].sum()))
        manual.append(np.mean([math.log1p(math.exp(-(q_w[i, t] - q_l[i, t]))) for t in range(n)]))
    assert float(L.tbpo_token_loss(q_w, mw, q_l, ml)) == pytest.approx(np.mean(manual), rel=1e-12)


def test_loss_input_errors():
    lw, mw, ll, ml = _pair()
    with pytest.raises(ValueError, match="unknown Bregman member"):
        L.bregman_sequence_loss(lw, mw, ll, ml, 1.0, "hinge")
    with pytest.raises(ValueError, match="lam > -1"):
        L.bregman_ell(lw, "ba", 0.0)
    with pytest.raises(ValueError, match="beta must be positive"):
        L.dpo_loss(lw, mw, ll, ml, 0.0)
    with pytest.raises(ValueError, match="shape"):
        L.dpo_loss(lw, mw[:, :2], ll, ml, 1.0)
    with pytest.raises(ValueError, match="empty batch"):
        L.dpo_loss(lw[:0], mw[:0], ll[:0], ml[:0], 1.0)
    with pytest.raises(ValueError, match="p must be in"):
        L.population_minimiser("kliep", 1.0)


# ---------------------------------------------------------------- the testbed

def _tiny() -> TokenMDP:
    return make_mdp(n_tokens=2, horizon=3, beta=0.8, reward_scale=1.0, eos_prob=0.3, seed=1)


def test_soft_bellman_equation_holds():
    mdp = make_mdp(n_tokens=4, horizon=5, beta=0.6, seed=2)
    Q, Vs, pi = soft_bellman(mdp)
    assert np.allclose(pi.sum(-1), 1.0)
    for t in range(mdp.horizon):
        cont = np.append(Vs[t + 1], 0.0)
        assert np.allclose(Q[t], mdp.reward[t] + cont[None])
        rhs = mdp.beta * np.log(np.sum(mdp.pi_ref * np.exp(Q[t] / mdp.beta), axis=1))
        assert np.allclose(Vs[t], rhs)
        assert np.allclose(mdp.beta * np.log(pi[t] / mdp.pi_ref), Q[t] - Vs[t][:, None])
    # the optimal objective is the soft value of the start state
    assert exact_metrics(mdp, pi)["objective"] == pytest.approx(float(mdp.prompt_probs @ Vs[0]), rel=1e-10)


def test_dp_optimum_matches_brute_force_sequence_optimum():
    """pi*(y|x) = pi_ref(y|x) exp(R(x,y)/beta) / Z(x), checked on every response."""
    mdp = _tiny()
    _, _, pi = soft_bellman(mdp)
    for x in range(mdp.n_tokens):
        toks, lens = enumerate_responses(mdp, x)
        xs = np.full(len(toks), x)
        lref = table_logprob(mdp, mdp.ref_table(), xs, toks, lens)
        R = sequence_reward(mdp, xs, toks, lens)
        target = lref + R / mdp.beta
        target -= np.logaddexp.reduce(target)
        assert np.allclose(table_logprob(mdp, pi, xs, toks, lens), target, atol=1e-10)
        assert np.isclose(np.exp(lref).sum(), 1.0)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.01, 2.0))
def test_pi_star_maximises_the_regularised_objective(seed, scale):
    mdp = _tiny()
    _, _, pi = soft_bellman(mdp)
    rng = np.random.default_rng(seed)
    other = pi * np.exp(scale * rng.normal(size=pi.shape))
    other /= other.sum(-1, keepdims=True)
    assert exact_metrics(mdp, other)["objective"] <= exact_metrics(mdp, pi)["objective"] + 1e-12


def test_exact_metrics_match_enumeration():
    mdp = _tiny()
    _, _, pi = soft_bellman(mdp)
    tot = {"reward": 0.0, "kl_ref": 0.0, "entropy": 0.0}
    for x in range(mdp.n_tokens):
        toks, lens = enumerate_responses(mdp, x)
        xs = np.full(len(toks), x)
        lp = table_logprob(mdp, pi, xs, toks, lens)
        p = np.exp(lp) * mdp.prompt_probs[x]
        tot["reward"] += p @ sequence_reward(mdp, xs, toks, lens)
        tot["kl_ref"] += p @ (lp - table_logprob(mdp, mdp.ref_table(), xs, toks, lens))
        tot["entropy"] += -(p @ lp)
    m = exact_metrics(mdp, pi)
    for k, v in tot.items():
        assert m[k] == pytest.approx(v, rel=1e-10)


def test_sampling_matches_state_distribution():
    mdp = make_mdp(n_tokens=3, horizon=4, seed=3)
    _, _, pi = soft_bellman(mdp)
    x, y, n = sample_responses(mdp, pi, 40_000, np.random.default_rng(0))
    d = state_distribution(mdp, pi)
    emp = np.zeros_like(d)
    prev = np.concatenate([x[:, None], y[:, :-1]], 1)
    for t in range(mdp.horizon):
        alive = n > t
        emp[t] = np.bincount(prev[alive, t], minlength=mdp.n_tokens) / len(x)
    assert np.abs(emp - d).max() < 0.01
    after = np.arange(mdp.horizon)[None] >= n[:, None]
    before_last = np.arange(mdp.horizon)[None] < n[:, None] - 1
    assert np.all(y[after] == mdp.eos) and not np.any(y[before_last] == mdp.eos)


def test_preference_labels_follow_bradley_terry():
    mdp = make_mdp(n_tokens=4, horizon=4, reward_scale=1.0, seed=4)
    prefs = make_preferences(mdp, 30_000, np.random.default_rng(1))
    rc = sequence_reward(mdp, prefs["prompt"], prefs["chosen"], prefs["len_chosen"])
    rr = sequence_reward(mdp, prefs["prompt"], prefs["rejected"], prefs["len_rejected"])
    assert np.allclose(prefs["p_chosen"], 1 / (1 + np.exp(-(rc - rr))))
    # BT: chosen is the higher-reward response with probability E[sigmoid(|dR|)] (noisy labels)
    diff = rc - rr
    keep = diff != 0
    expected = np.mean(1 / (1 + np.exp(-np.abs(diff[keep]))))
    assert np.mean(diff[keep] > 0) == pytest.approx(expected, abs=0.01)
    assert np.mean(diff[keep] > 0) < 0.99  # labels are noisy


def test_mdp_input_errors():
    mdp = make_mdp(n_tokens=3, horizon=2)
    with pytest.raises(ValueError, match="pi_ref must have shape"):
        TokenMDP(mdp.pi_ref[:, :3], mdp.reward, mdp.prompt_probs, 1.0)
    with pytest.raises(ValueError, match="beta must be positive"):
        TokenMDP(mdp.pi_ref, mdp.reward, mdp.prompt_probs, -1.0)
    with pytest.raises(ValueError, match="policy table"):
        exact_metrics(mdp, np.ones((2, 3, 3)))
    with pytest.raises(ValueError, match="eos_prob"):
        make_mdp(eos_prob=1.5)
    with pytest.raises(ValueError, match="unknown methods"):
        Config.preset("smoke", methods=("PPO",))


# ---------------------------------------------------------------- policy and loop

def _cfg() -> Config:
    return Config.preset("smoke", n_tokens=4, horizon=4)


def test_identical_responses_give_zero_gradient():
    cfg = _cfg()
    mdp = cfg.make_mdp()
    torch.manual_seed(0)
    policy = Policy(mdp.n_tokens, mdp.horizon, 16, 1, 2)
    with torch.no_grad():  # a non-zero baseline head, so TBPO-Q's V_phi is exercised
        policy.value.weight.normal_()
    log_ref = torch.log(torch.as_tensor(mdp.pi_ref, dtype=torch.float32))
    x, y, n = (torch.as_tensor(a) for a in sample_responses(mdp, mdp.ref_table(), 6, np.random.default_rng(0)))
    for method in METHODS:
        policy.zero_grad()
        s = token_stats(policy, log_ref, torch.cat([x, x]), torch.cat([y, y]), torch.cat([n, n]))
        sw = {k: v[:6] for k, v in s.items()}
        sl = {k: v[6:] for k, v in s.items()}
        method_loss(method, sw, sl, cfg).backward()
        g = max(float(p.grad.abs().max()) for p in policy.parameters() if p.grad is not None)
        if method == "TDPO":
            # TDPO2 stops the gradient of the chosen response's KL only, so it keeps pulling
            # the rejected response's sequential KL down even when the two are the same.
            assert g > 1e-4
        else:
            assert g < 1e-6, method
    # and a pair that differs does move the policy (the check above can fail)
    s = token_stats(policy, log_ref, torch.cat([x, x]), torch.cat([y, y.flip(0)]), torch.cat([n, n.flip(0)]))
    policy.zero_grad()
    method_loss("DPO", {k: v[:6] for k, v in s.items()}, {k: v[6:] for k, v in s.items()}, cfg).backward()
    assert max(float(p.grad.abs().max()) for p in policy.lm.parameters()) > 1e-4


def test_policy_is_causal_so_padding_after_the_end_is_ignored():
    mdp = _cfg().make_mdp()
    torch.manual_seed(1)
    policy = Policy(mdp.n_tokens, mdp.horizon, 16, 1, 2)
    log_ref = torch.log(torch.as_tensor(mdp.pi_ref, dtype=torch.float32))
    x = torch.tensor([0, 1])
    y = torch.tensor([[1, mdp.eos, mdp.eos, mdp.eos], [2, 3, 1, 0]])
    n = torch.tensor([2, 4])
    y2 = y.clone()
    y2[0, 2:] = torch.tensor([3, 2])  # junk after the EOS
    a = token_stats(policy, log_ref, x, y, n)
    b = token_stats(policy, log_ref, x, y2, n)
    for k in ("lr", "kl_pi_ref", "kl_ref_pi", "entropy", "mask"):
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    assert a["mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]


def test_evaluate_with_table_policies_matches_exact_values():
    mdp = make_mdp(n_tokens=4, horizon=4, seed=5)
    _, _, pi = soft_bellman(mdp)
    ev = make_eval_set(mdp, 4000, seed=0)
    star = evaluate(TablePolicy(pi), mdp, ev)
    assert star["state_kl"] == pytest.approx(0.0, abs=1e-6)
    ref = evaluate(TablePolicy(mdp.ref_table()), mdp, ev)
    exact = exact_metrics(mdp, mdp.ref_table(), target=pi)
    assert ref["state_kl"] == pytest.approx(exact["state_kl"], rel=0.05)
    assert ref["reward"] == pytest.approx(exact["reward"], abs=0.05)
    assert ref["entropy"] == pytest.approx(exact["entropy"], rel=0.03)
    assert ref["kl_ref"] == pytest.approx(0.0, abs=1e-5)


def test_fit_reference_brings_the_policy_close_to_pi_ref():
    cfg = _cfg()
    mdp = cfg.make_mdp()
    torch.manual_seed(0)
    policy = Policy(mdp.n_tokens, mdp.horizon, 16, 1, 2)
    losses = fit_reference(policy, mdp, steps=60, batch_size=64, lr=1e-2)
    assert np.mean(losses[-10:]) < 0.2 * losses[0]


def test_reward_at_kl_and_distinct_n():
    assert reward_at_kl(np.array([0.0, 1.0, 2.0]), np.array([0.0, 10.0, 12.0]), 1.5) == pytest.approx(11.0)
    assert math.isnan(reward_at_kl(np.array([0.0, 1.0]), np.array([0.0, 1.0]), 5.0))
    with pytest.raises(ValueError):
        reward_at_kl(np.array([0.0]), np.array([0.0, 1.0]), 1.0)
    toks = np.array([[1, 2, 3, 9], [1, 2, 3, 4]])
    assert distinct_n(toks, np.array([4, 4]), 3, eos=9) == pytest.approx(2 / 3)  # (1,2,3) x2, (2,3,4)
    assert distinct_n(toks, np.array([4, 4]), 2, eos=9) == pytest.approx(3 / 5)


def test_config_presets_and_replace():
    smoke, book = Config.preset("smoke"), Config.preset("book")
    assert smoke.steps < book.steps and smoke.n_pairs < book.n_pairs
    with pytest.raises(ValueError, match="tbpo_member"):
        dataclasses.replace(book, tbpo_member="hinge")


def test_token_testbed_config_changes_only_labels_methods_and_evaluation_spacing():
    for scale in ("smoke", "book"):
        cfg = Config.preset(scale, seed=7)
        tok = cfg.token_testbed()
        assert tok.labels == "token" and tok.methods == TOKEN_METHODS == ("DPO", "IPO", "SimPO", "TBPO-Q", "TBPO-A")
        assert tok.eval_every == 2 * cfg.eval_every
        same = {f.name for f in dataclasses.fields(Config)} - {"labels", "methods", "eval_every"}
        assert all(getattr(tok, n) == getattr(cfg, n) for n in same)
        assert cfg.labels == "sequence" and tok.seeds == cfg.seeds  # the original is unchanged


def test_per_seed_headline_and_pairing_on_a_known_table():
    import pandas as pd

    rows = []
    for m, slope, final_kl in (("DPO", 1.0, 2.0), ("TBPO-Q", 2.0, 1.0), ("TBPO-A", 0.5, 4.0)):
        for seed in (0, 1):
            for step, frac in ((0, 0.0), (5, 0.5), (10, 1.0)):
                kl = final_kl * frac
                rows.append({"method": m, "seed": seed, "step": step, "kl_ref": kl, "reward": slope * kl,
                             "state_kl": final_kl + seed - frac, "entropy": 1.0, "distinct3": 0.5})
    evals = pd.DataFrame(rows)
    kappa = matched_kappa(evals)
    assert kappa == pytest.approx(0.9)  # 0.9 x the smallest final KL of any run
    per = per_seed(evals, kappa)
    assert list(per["method"]) == ["DPO", "DPO", "TBPO-Q", "TBPO-Q", "TBPO-A", "TBPO-A"]
    assert per.set_index(["method", "seed"]).loc[("TBPO-Q", 1), "reward@kl"] == pytest.approx(1.8)
    assert (per["oscillation"] == 0).all()  # every state_kl curve is monotone
    tab = headline(per)
    assert tab.loc["TBPO-A", "reward@kl mean"] == pytest.approx(0.45)
    assert tab.loc["DPO", "state_kl mean"] == pytest.approx(1.5)
    d = paired(per, "state_kl", "TBPO-Q")
    assert d["method"].tolist() == [0.0, 1.0] and d["baseline"].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="not in the table"):
        paired(per, "state_kl", "PPO")


def test_oscillation_is_zero_for_monotone_curves_and_counts_reversals():
    assert oscillation(np.array([3.0, 2.0, 1.5, 1.0])) == 0.0
    assert oscillation(np.array([1.0])) == 0.0
    assert oscillation(np.array([1.0, 0.5, 0.8, 0.4])) == pytest.approx(0.6)  # 0.5 + 0.3 + 0.4 - 0.6
    with pytest.raises(ValueError):
        oscillation(np.array([]))


@pytest.mark.parametrize("member,lam", MEMBER_CASES)
def test_generic_bregman_matches_the_closed_form_up_to_a_constant(member, lam):
    log_R = torch.linspace(-3.0, 3.0, 41, dtype=torch.float64)
    diff = L.generic_bregman_ell(log_R, member, lam) - L.bregman_ell(log_R, member, lam)
    assert torch.allclose(diff, diff[0].expand_as(diff), atol=1e-9)
    if member == "logistic":  # no constant: the logistic member is DPO's loss itself
        assert diff.abs().max().item() < 1e-12


def test_generic_bregman_check_fails_for_a_wrong_loss():
    """The check behind the logistic-is-dpo claim can fail: LSIF's published typo R^2 - 2R
    is not c_h [h'(R) R - h(R) - h'(1/R)] up to a constant."""
    log_R = torch.linspace(-2.0, 2.0, 21, dtype=torch.float64)
    wrong = (torch.exp(2 * log_R) - 2 * torch.exp(log_R)) / 8.0
    diff = L.generic_bregman_ell(log_R, "lsif") - wrong
    assert (diff.max() - diff.min()).item() > 0.1


def test_logistic_vs_dpo_on_a_tiny_experiment():
    cfg = Config.preset("smoke", n_tokens=4, horizon=4, steps=2, fit_steps=5, n_pairs=64, n_eval=16,
                        eval_every=2, methods=("DPO", "TBPO-A"))
    ex = run_experiment(cfg)
    eq = logistic_vs_dpo(ex, n=32)
    assert eq["n_pairs"] == 32 and eq["loss"] < 1e-12 and eq["grad"] < 1e-6
    per = per_seed(ex.evals)
    assert set(per["method"]) == {"DPO", "TBPO-A"} and len(per) == 2


def test_make_policy_draws_what_a_hand_built_policy_draws_and_loads_a_state():
    cfg = Config.preset("smoke", n_tokens=4, horizon=5, hidden=16, heads=2)
    torch.manual_seed(3)
    made, after_made = cfg.make_policy(), torch.rand(1)
    torch.manual_seed(3)
    by_hand, after_hand = Policy(cfg.n_tokens, cfg.horizon, cfg.hidden, cfg.layers, cfg.heads), torch.rand(1)
    assert made.state_dict().keys() == by_hand.state_dict().keys()
    assert all(torch.equal(v, by_hand.state_dict()[k]) for k, v in made.state_dict().items())
    assert torch.equal(after_made, after_hand)  # the same random draws, no more
    assert (made.lm.config.vocab_size, made.lm.config.n_positions, made.lm.config.n_embd) == (5, 5, 16)
    torch.manual_seed(4)
    loaded = cfg.make_policy(made.state_dict())
    assert all(torch.equal(v, made.state_dict()[k]) for k, v in loaded.state_dict().items())


def test_log_pi_ref_is_computed_once_per_run_and_shared_by_every_step(monkeypatch):
    calls = []

    def counted(mdp):
        calls.append(mdp)
        return log_reference(mdp)

    for module in (policy_module, evaluation_module, experiment_module):
        monkeypatch.setattr(module, "log_reference", counted)
    cfg = Config.preset("smoke", n_tokens=4, horizon=4, steps=2, fit_steps=3, n_pairs=32, n_eval=8,
                        eval_every=2, methods=("DPO", "TBPO-Q"))
    ex = run_experiment(cfg)
    assert len(calls) == 1  # the fit, the evaluation set, every training step: one log pi_ref
    assert torch.equal(ex.log_ref, torch.log(torch.as_tensor(ex.mdp.pi_ref, dtype=torch.float32)))
    logistic_vs_dpo(ex, n=8)
    run_experiment(cfg.token_testbed(), start=ex)
    assert len(calls) == 2  # the check reuses the run's; a second run computes its own once


@pytest.mark.parametrize("V,T", [(2, 1), (3, 3), (4, 4), (2, 6)])
def test_n_responses_counts_what_enumerate_lists(V, T):
    mdp = make_mdp(n_tokens=V, horizon=T, seed=0)
    assert n_responses(V, T) == len(enumerate_responses(mdp, 0)[0])
    assert n_responses(V, T) == (V**T - 1) // (V - 1) + V**T  # the closed form the page once computed


def _headline_table():
    import pandas as pd

    return pd.DataFrame({"state_kl mean": [0.12345, 1.0], "state_kl std": [0.0015, 0.25],
                         "kl_ref mean": [2.0, -0.5], "kl_ref std": [0.1, float("nan")]}, index=["DPO", "TBPO-Q"])


def test_mean_std_table_formats_each_column_per_method():
    from minirepro.papers.tbpo.report import mean_std_table

    out = mean_std_table(_headline_table(), ("state_kl", "kl_ref"))
    assert list(out.index) == ["DPO", "TBPO-Q"] and list(out.columns) == ["state_kl", "kl_ref"]
    assert out.loc["DPO", "state_kl"] == "0.123 ± 0.002" and out.loc["TBPO-Q", "kl_ref"] == "-0.500 ± nan"


def test_comparison_table_adds_the_objective_and_the_exact_rows():
    import pandas as pd

    from minirepro.papers.tbpo.report import comparison_table

    rows = [{"method": m, "seed": s, "step": step, "state_kl": 1.0, "reward": r + step, "kl_ref": k * step,
             "entropy": 2.0, "distinct3": 0.5}
            for m, r, k in (("DPO", 1.0, 1.0), ("TBPO-A", 0.0, 0.5)) for s in (0, 1) for step in (0, 2)]
    exact = pd.DataFrame([{"method": "reference", "state_kl": 0.3, "reward": 0.0, "kl_ref": 0.0,
                           "entropy": 3.0, "distinct3": 0.6, "length": 4.0},
                          {"method": "optimum", "state_kl": 0.0, "reward": 2.0, "kl_ref": 1.0,
                           "entropy": 2.5, "distinct3": 0.55, "length": 3.0}])
    ex = SimpleNamespace(evals=pd.DataFrame(rows), exact=exact, cfg=SimpleNamespace(beta=0.5))
    tab = comparison_table(ex)
    assert list(tab.index) == ["DPO", "TBPO-A", "reference", "optimum"]
    assert list(tab.columns) == ["state_kl", "reward", "kl_ref", "entropy", "distinct3", "objective"]
    assert tab.loc["DPO", "reward"] == 3.0 and tab.loc["DPO", "objective"] == pytest.approx(3.0 - 0.5 * 2.0)
    assert tab.loc["optimum", "objective"] == pytest.approx(1.5)


def test_distance_sentence_says_closer_only_when_both_tbpo_variants_are_closer():
    import pandas as pd

    from minirepro.papers.tbpo.report import distance_sentence

    tab = pd.DataFrame({"kl_ref": [2.0, 1.0, 1.5, 3.0]}, index=["DPO", "TBPO-Q", "TBPO-A", "optimum"])
    assert distance_sentence(tab) == ("final KL to the reference (nats): DPO 2.00, TBPO-Q 1.00, TBPO-A 1.50; "
                                      "the optimum: 3.00. The TBPO variants end closer to the reference than DPO.")
    tab.loc["TBPO-A", "kl_ref"] = 2.0  # a tie is not closer
    assert distance_sentence(tab).endswith("The TBPO variants end no closer to the reference than DPO.")


def test_verdict_sentence_lists_the_parts_or_the_measured_value():
    from minirepro.papers.tbpo.report import verdict_sentence

    claim = SimpleNamespace(id="state-kl", verdict="supported", measured="m", details={
        "TBPO-Q": {"verdict": "supported", "estimate": 0.0125, "low": 0.01, "high": 0.015},
        "TBPO-A": {"verdict": "not testable", "estimate": -0.5, "low": "nan", "high": "nan"},
        "note": "3 pairs", "rule": {"min_effect": 0.1}})
    assert verdict_sentence(claim) == (
        "**state-kl**: supported (TBPO-Q: supported, mean improvement +0.013 [+0.010, +0.015]; "
        "TBPO-A: not testable, mean improvement -0.500 [nan, nan]).")
    check = SimpleNamespace(id="logistic-is-dpo", verdict="supported", measured="loss 1e-16", details={})
    assert verdict_sentence(check) == "**logistic-is-dpo**: supported (loss 1e-16)."
