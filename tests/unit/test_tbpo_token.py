"""The token-level Bradley-Terry testbed: its labels, and (before any run) that the TBPO-Q loss
as reconstructed here is minimised at pi* there, computed exactly on an enumerable MDP."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minirepro.papers.tbpo import losses as L
from minirepro.papers.tbpo.mdp import (
    enumerate_responses,
    make_mdp,
    make_token_preferences,
    response_mask,
    sequence_reward,
    soft_bellman,
    table_logprob,
    token_q_values,
)


@pytest.fixture(scope="module")
def population():
    """Every pair of responses (same prompt) of a tiny MDP with its pi_ref x pi_ref weight."""
    mdp = make_mdp(n_tokens=2, horizon=3, beta=0.7, reward_scale=1.0, seed=4)
    Q, Vs, pi_star = soft_bellman(mdp)
    rows = []
    for x in range(mdp.n_tokens):
        y, n = enumerate_responses(mdp, x)
        px = np.full(len(n), x)
        w = np.exp(table_logprob(mdp, mdp.ref_table(), px, y, n))
        i, j = np.meshgrid(np.arange(len(n)), np.arange(len(n)), indexing="ij")
        i, j = i.ravel(), j.ravel()
        rows.append(dict(x=px[i], yw=y[i], yl=y[j], nw=n[i], nl=n[j],
                         weight=mdp.prompt_probs[x] * w[i] * w[j]))
    pop = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    d = token_q_values(mdp, Q, pop["x"], pop["yw"], pop["nw"]) - token_q_values(mdp, Q, pop["x"], pop["yl"], pop["nl"])
    pop["p_token"] = 1 / (1 + np.exp(-d))                                     # token-level BT
    pop["p_token_seq"] = np.broadcast_to(1 / (1 + np.exp(-d.sum(1)))[:, None], d.shape)  # its collapse
    r = sequence_reward(mdp, pop["x"], pop["yw"], pop["nw"]) - sequence_reward(mdp, pop["x"], pop["yl"], pop["nl"])
    pop["p_seq"] = np.broadcast_to(1 / (1 + np.exp(-r))[:, None], d.shape)    # sequence-level BT on R
    return mdp, Q, Vs, pi_star, pop


def _stats(mdp, logits, vtab, x, y, n):
    T, V = mdp.horizon, mdp.n_tokens
    prev = torch.as_tensor(np.where(np.concatenate([x[:, None], y[:, :-1]], 1) >= V, 0,
                                    np.concatenate([x[:, None], y[:, :-1]], 1)))
    t = torch.arange(T)[None, :]
    logp = torch.log_softmax(logits, -1)[t, prev]                          # (B, T, V + 1)
    lref = torch.log(torch.as_tensor(mdp.pi_ref))[prev]
    mask = torch.as_tensor(response_mask(n, T), dtype=torch.float64)
    a = torch.as_tensor(y)[..., None]
    lr = (logp - lref).gather(-1, a).squeeze(-1) * mask
    kl = (logp.exp() * (logp - lref)).sum(-1) * mask
    return lr, mask, vtab[t, prev] * mask, kl


def _population_loss(mdp, pop, logits, vtab, method, label):
    """The exact expected loss over all pairs and labels (labels enter as win probabilities)."""
    sw = _stats(mdp, logits, vtab, pop["x"], pop["yw"], pop["nw"])
    sl = _stats(mdp, logits, vtab, pop["x"], pop["yl"], pop["nl"])
    weight = torch.as_tensor(pop["weight"])
    p = torch.as_tensor(np.ascontiguousarray(pop[label]))
    b = mdp.beta
    if method == "dpo":
        m = b * L.sequence_margin(sw[0], sw[1], sl[0], sl[1])
        per = -p[:, 0] * F.logsigmoid(m) - (1 - p[:, 0]) * F.logsigmoid(-m)
        return (weight * per).sum()
    if method == "tbpo-q":
        qw, ql = L.tbpo_q_values(sw[0], sw[1], sw[2], b), L.tbpo_q_values(sl[0], sl[1], sl[2], b)
    else:
        qw, ql = L.tbpo_a_values(sw[0], sw[1], sw[3], b), L.tbpo_a_values(sl[0], sl[1], sl[3], b)
    per = torch.stack([L.tbpo_token_loss(qw[k:k + 1], sw[1][k:k + 1], ql[k:k + 1], sl[1][k:k + 1],
                                         win=p[k:k + 1]) for k in range(len(weight))])
    return (weight * per).sum()


def _grad_at_optimum(population, method, label):
    mdp, Q, Vs, pi_star, pop = population
    logits = torch.tensor(np.log(pi_star), requires_grad=True)
    vtab = torch.tensor(Vs[:mdp.horizon], requires_grad=True)
    loss = _population_loss(mdp, pop, logits, vtab, method, label)
    g = torch.autograd.grad(loss, [logits, vtab], allow_unused=True)
    return loss.item(), max(float(x.abs().max()) for x in g if x is not None)


def test_tbpo_q_loss_is_minimised_at_pi_star_under_token_level_labels(population):
    """Gradient in the policy and the baseline vanishes at (pi*, V*); each position's term is
    convex in its value difference and minimised there, so (pi*, V*) is a global minimum."""
    loss0, g = _grad_at_optimum(population, "tbpo-q", "p_token")
    assert g < 1e-10
    mdp, Q, Vs, pi_star, pop = population
    rng = np.random.default_rng(0)
    for _ in range(3):  # random perturbations of the policy and the baseline never lower it
        logits = torch.tensor(np.log(pi_star) + 0.1 * rng.normal(size=pi_star.shape))
        vtab = torch.tensor(Vs[:mdp.horizon] + 0.1 * rng.normal(size=Vs[:mdp.horizon].shape))
        assert _population_loss(mdp, pop, logits, vtab, "tbpo-q", "p_token").item() > loss0


def test_the_minimiser_check_can_fail(population):
    """The same harness finds a non-zero gradient at pi* where theory says there is one:
    TBPO-Q with the sequence label given to every token (the sequence testbed), TBPO-A (its
    mean-zero normalisation shifts Q* by a state-dependent amount), and DPO on the collapsed
    token-level label; and a zero gradient for DPO on sequence-level labels (its known optimum)."""
    assert _grad_at_optimum(population, "tbpo-q", "p_seq")[1] > 1e-3
    assert _grad_at_optimum(population, "tbpo-a", "p_token")[1] > 1e-3
    assert _grad_at_optimum(population, "dpo", "p_token_seq")[1] > 1e-3
    assert _grad_at_optimum(population, "dpo", "p_seq")[1] < 1e-10


def test_token_labels_follow_the_token_level_model():
    mdp = make_mdp(n_tokens=3, horizon=4, seed=1)
    prefs = make_token_preferences(mdp, 20000, np.random.default_rng(0))
    cover = response_mask(np.maximum(prefs["len_chosen"], prefs["len_rejected"]), mdp.horizon)
    assert np.all(prefs["token_win"][~cover] == 0) and np.all(prefs["p_token"][~cover] == 0)
    p, z = prefs["p_token"][cover], prefs["token_win"][cover]
    for lo, hi in ((0.0, 0.3), (0.3, 0.7), (0.7, 1.0)):  # calibration by bins
        sel = (p >= lo) & (p < hi)
        assert abs(z[sel].mean() - p[sel].mean()) < 4 * np.sqrt(0.25 / sel.sum()) + 1e-3
    # the sequence label is the collapsed model: chosen wins with probability p_chosen >= its draw rate
    assert abs(prefs["p_chosen"].mean() - 0.5) > 0.05  # chosen tends to be the higher-Q response
    Q, _, _ = soft_bellman(mdp)
    qw = token_q_values(mdp, Q, prefs["prompt"], prefs["chosen"], prefs["len_chosen"])
    ql = token_q_values(mdp, Q, prefs["prompt"], prefs["rejected"], prefs["len_rejected"])
    np.testing.assert_allclose(prefs["p_chosen"], 1 / (1 + np.exp(-(qw - ql).sum(1))))
    np.testing.assert_allclose(prefs["p_token"], np.where(cover, 1 / (1 + np.exp(-(qw - ql))), 0))


def test_win_none_equals_all_ones_and_soft_labels_mix():
    g = torch.Generator().manual_seed(0)
    qw, ql = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
    mw = (torch.rand(4, 5, generator=g) > 0.3).float()
    ml = torch.ones(4, 5)
    base = L.tbpo_token_loss(qw, mw, ql, ml)
    torch.testing.assert_close(L.tbpo_token_loss(qw, mw, ql, ml, win=torch.ones(4, 5)), base)
    swapped = L.tbpo_token_loss(ql, ml, qw, mw)
    torch.testing.assert_close(L.tbpo_token_loss(qw, mw, ql, ml, win=torch.zeros(4, 5)), swapped)
    half = L.tbpo_token_loss(qw, mw, ql, ml, win=torch.full((4, 5), 0.5))
    torch.testing.assert_close(half, (base + swapped) / 2)
    with pytest.raises(ValueError, match="win must have shape"):
        L.tbpo_token_loss(qw, mw, ql, ml, win=torch.ones(4))


def test_ipo_and_simpo_equal_their_formulas_by_brute_force():
    g = torch.Generator().manual_seed(1)
    lw, ll = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
    mw = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float32)
    ml = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    tau, beta, gamma = 0.7, 2.0, 1.0
    ipo, simpo = [], []
    for k in range(3):
        m = sum(float(lw[k, t]) for t in range(4) if mw[k, t]) - sum(float(ll[k, t]) for t in range(4) if ml[k, t])
        ipo.append((m - 1 / (2 * tau)) ** 2)
        aw = sum(float(lw[k, t]) for t in range(4) if mw[k, t]) / float(mw[k].sum())
        al = sum(float(ll[k, t]) for t in range(4) if ml[k, t]) / float(ml[k].sum())
        simpo.append(np.log1p(np.exp(-(beta * (aw - al) - gamma))))
    assert abs(L.ipo_loss(lw, mw, ll, ml, tau).item() - np.mean(ipo)) < 1e-5
    assert abs(L.simpo_loss(lw, mw, ll, ml, beta, gamma).item() - np.mean(simpo)) < 1e-5
    # IPO's population minimiser is a finite margin: with p = P(w wins), m* = (2p - 1) / (2 tau)
    m = torch.zeros(1, 1, requires_grad=True)
    opt = torch.optim.SGD([m], lr=0.2)
    for _ in range(300):
        z = torch.zeros(1, 1)
        loss = 0.8 * L.ipo_loss(m, torch.ones(1, 1), z, torch.ones(1, 1), tau) + \
            0.2 * L.ipo_loss(z, torch.ones(1, 1), m, torch.ones(1, 1), tau)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert abs(m.item() - 0.6 / (2 * tau)) < 1e-4


def test_exact_frontier_dominates_every_policy_and_shortfall_is_zero_on_it():
    from minirepro.papers.tbpo.analysis import frontier_shortfall
    from minirepro.papers.tbpo.mdp import exact_frontier, exact_metrics

    mdp = make_mdp(n_tokens=3, horizon=4, seed=2)
    fk, fr = exact_frontier(mdp, n=120)
    assert np.all(np.diff(fk) >= 0) and np.all(np.diff(fr) >= -1e-9) and fk[0] == 0.0
    rng = np.random.default_rng(0)
    _, _, pi_star = soft_bellman(mdp)
    for k in range(20):  # random tables and mixtures with pi*: never above the frontier
        table = rng.dirichlet(np.ones(mdp.n_tokens + 1), size=(mdp.horizon, mdp.n_tokens))
        table = (k / 20) * pi_star + (1 - k / 20) * table
        m = exact_metrics(mdp, table)
        if m["kl_ref"] <= fk[-1]:
            assert m["reward"] <= np.interp(m["kl_ref"], fk, fr) + 1e-3
    on = exact_metrics(mdp, pi_star)
    assert abs(frontier_shortfall(np.array([on["kl_ref"]]), np.array([on["reward"]]), (fk, fr))) < 1e-3
    assert frontier_shortfall(np.array([0.5, 1.0]), np.interp([0.5, 1.0], fk, fr) - 0.2, (fk, fr)) == \
        pytest.approx(0.2)
    with pytest.raises(ValueError):
        frontier_shortfall(np.array([]), np.array([]), (fk, fr))
