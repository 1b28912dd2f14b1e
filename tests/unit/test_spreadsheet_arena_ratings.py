"""SpreadsheetArena ratings: Bradley-Terry against scikit-learn, bootstrap, online Elo, style control."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import check_grad
from sklearn.linear_model import LogisticRegression

from minirepro.papers.spreadsheet_arena import ratings as R
from minirepro.papers.spreadsheet_arena.voters import OUTCOMES, outcome_probs

NAMES = ["m0", "m1", "m2", "m3", "m4"]


def _bt_battles(strength: np.ndarray, n: int, rng: np.random.Generator, tie_rate: float = 0.0
                ) -> pd.DataFrame:
    k = len(strength)
    a = rng.integers(k, size=n)
    b = (a + rng.integers(1, k, size=n)) % k
    p = 1 / (1 + np.exp(-(strength[a] - strength[b])))
    win = np.where(rng.random(n) < p, "model_a", "model_b")
    win = np.where(rng.random(n) < tie_rate, "tie", win)
    names = np.array(NAMES[:k])
    return pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": win})


@pytest.mark.parametrize("tie_rate", [0.0, 0.2])
def test_bt_matches_sklearn_logistic_regression(tie_rate):
    """BT is a logistic regression on the pair design matrix x = e_a - e_b (anchor column dropped);
    a tie is two half-weight rows, one won by each side."""
    rng = np.random.default_rng(0)
    df = _bt_battles(np.array([0.0, 0.4, -0.3, 0.9, 0.1]), 3000, rng, tie_rate)
    k = len(NAMES)
    X = np.zeros((len(df), k))
    idx = {m: i for i, m in enumerate(NAMES)}
    X[np.arange(len(df)), df["model_a"].map(idx)] += 1
    X[np.arange(len(df)), df["model_b"].map(idx)] -= 1
    X = X[:, 1:]
    tie = (df["winner"] == "tie").to_numpy()
    y = (df["winner"] == "model_a").to_numpy().astype(int)
    Xs = np.vstack([X[~tie], X[tie], X[tie]])
    ys = np.concatenate([y[~tie], np.ones(tie.sum(), int), np.zeros(tie.sum(), int)])
    w = np.concatenate([np.ones((~tie).sum()), np.full(tie.sum(), 0.5), np.full(tie.sum(), 0.5)])
    lr = LogisticRegression(C=1e12, fit_intercept=False, tol=1e-12, max_iter=10_000)  # ~unpenalised
    lr.fit(Xs, ys, sample_weight=w)
    ours = R.fit_bt(R.win_matrix(df, NAMES), anchor=0, ridge=0.0)
    np.testing.assert_allclose(ours[1:], lr.coef_[0], atol=1e-4)
    assert ours[0] == 0.0


def test_bt_recovers_strengths_and_batches():
    rng = np.random.default_rng(1)
    s = np.array([0.0, 0.5, -0.5, 1.0, 0.2])
    df = _bt_battles(s, 40_000, rng)
    W = R.win_matrix(df, NAMES)
    b = R.fit_bt(W)
    assert np.abs(b - s).max() < 0.06
    Ws = np.stack([W, 2 * W, W.T])
    B = R.fit_bt(Ws)
    np.testing.assert_allclose(B[0], b, atol=1e-8)
    np.testing.assert_allclose(B[1], b, atol=1e-5)  # scaling the data keeps the MLE
    np.testing.assert_allclose(B[2], -b, atol=1e-6)  # swapping winners negates it


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=3, max_size=6), st.integers(0, 10_000))
def test_bt_equivariant_under_relabelling(strength, seed):
    s = np.array(strength)
    rng = np.random.default_rng(seed)
    k = len(s)
    W = rng.integers(1, 30, size=(k, k)).astype(float) * (1 / (1 + np.exp(-(s[:, None] - s[None]))))
    np.fill_diagonal(W, 0)
    perm = rng.permutation(k)
    b = R.fit_bt(W, anchor=0)
    bp = R.fit_bt(W[np.ix_(perm, perm)], anchor=int(np.flatnonzero(perm == 0)[0]))
    np.testing.assert_allclose(bp, b[perm], atol=1e-6)
    g = (W - (W + W.T) / (1 + np.exp(-(b[:, None] - b[None])))).sum(1)
    assert np.abs(g[1:] - 1e-6 * b[1:]).max() < 1e-6  # the score equations hold


def test_elo_scale_and_bad_input():
    r = R.to_elo(np.array([0.0, np.log(10.0), -np.log(10.0)]), anchor=0)
    np.testing.assert_allclose(r, [1000, 1400, 600])
    with pytest.raises(ValueError):
        R.fit_bt(np.ones((3, 2)))
    with pytest.raises(ValueError):
        R.fit_bt(-np.ones((3, 3)))
    with pytest.raises(ValueError):
        R.fit_bt(np.ones((3, 3)), anchor=5)
    bad = pd.DataFrame({"model_a": ["x"], "model_b": ["y"], "winner": ["left"]})
    with pytest.raises(ValueError, match="winner"):
        R.check_battles(bad)
    with pytest.raises(ValueError, match="missing"):
        R.check_battles(pd.DataFrame({"model_a": ["x"]}))
    with pytest.raises(ValueError, match="itself"):
        R.check_battles(pd.DataFrame({"model_a": ["x"], "model_b": ["x"], "winner": ["tie"]}))
    with pytest.raises(ValueError, match="no votes"):
        R.check_battles(pd.DataFrame({"model_a": [], "model_b": [], "winner": []}))


def test_bootstrap_matches_row_resampling_and_shrinks():
    rng = np.random.default_rng(2)
    s = np.array([0.0, 0.3, -0.2, 0.6, 0.1])
    df = _bt_battles(s, 2000, rng, 0.1)
    fast = R.bootstrap_bt(df, NAMES, 400, np.random.default_rng(3))
    slow = np.stack([R.to_elo(R.fit_bt(R.win_matrix(df.iloc[rng.integers(len(df), size=len(df))], NAMES)))
                     for _ in range(150)])
    np.testing.assert_allclose(fast.std(0)[1:], slow.std(0)[1:], rtol=0.25)
    big = R.bootstrap_bt(_bt_battles(s, 8000, rng, 0.1), NAMES, 400, np.random.default_rng(4))
    ratio = big.std(0)[1:] / fast.std(0)[1:]
    assert np.all((ratio > 0.35) & (ratio < 0.7))  # about 1/2 for 4x the votes
    lb = R.leaderboard(df, NAMES, 200, np.random.default_rng(5), anchor="m0")
    assert (lb.lower <= lb.rating + 1e-9).all() and (lb.rating <= lb.upper + 1e-9).all()
    assert lb.frame()["model"][0] == "m3"


def test_online_elo_conserves_points_and_depends_on_order():
    rng = np.random.default_rng(3)
    df = _bt_battles(np.array([0.0, 0.5, -0.5, 1.0, 0.2]), 2000, rng, 0.1)
    t1 = R.online_elo(df, NAMES)
    t2 = R.online_elo(df, NAMES, order=rng.permutation(len(df)))
    np.testing.assert_allclose(t1.sum(1), 5000.0)
    assert np.abs(t1[-1] - t2[-1]).max() > 1.0
    one = pd.DataFrame({"model_a": ["m0"], "model_b": ["m1"], "winner": ["model_a"]})
    np.testing.assert_allclose(R.online_elo(one, ["m0", "m1"], k_factor=32)[-1], [1016, 984])


def _rk_data(n, rng, b, g, tau, corr=0.3):
    k, f = len(b), len(g)
    a = rng.integers(k, size=n)
    bb = (a + rng.integers(1, k, size=n)) % k
    xa = rng.random((n, f)) + corr * a[:, None]
    xb = rng.random((n, f)) + corr * bb[:, None]
    pr = outcome_probs(b[a] - b[bb] + (xa - xb) @ g, tau)
    u = rng.random(n)
    o = np.where(u < pr[:, 0], 0, np.where(u < pr[:, 0] + pr[:, 1], 1, 2))
    names = np.array(NAMES[:k])
    return pd.DataFrame({"model_a": names[a], "model_b": names[bb],
                         "winner": np.array(OUTCOMES)[o]}), xa, xb


def test_style_control_recovers_planted_parameters():
    rng = np.random.default_rng(4)
    b, g, tau = np.array([0.0, 0.5, -0.3, 1.0]), np.array([0.8, -1.2, 0.0]), 0.4
    df, xa, xb = _rk_data(20_000, rng, b, g, tau)
    fit = R.fit_style_control(df, xa, xb, NAMES[:4], anchor=0)
    assert np.all(np.abs(fit.gamma - g) < 4 * fit.gamma_se)
    assert np.abs(fit.b - b).max() < 0.1 and abs(fit.tau - tau) < 0.05
    assert np.all(fit.gamma_se > 0.005) and np.all(fit.gamma_se < 0.1)


def test_style_control_gradient_and_bad_input():
    rng = np.random.default_rng(5)
    df, xa, xb = _rk_data(300, rng, np.array([0.0, 0.3, -0.2]), np.array([0.5, -0.5]), 0.3)
    D = rng.normal(size=(300, 2))
    y = rng.integers(0, 3, 300)
    X = xa - xb
    f = lambda p: R._rk_nll(p, D, X, y, 2, 1e-3)[0]  # noqa: E731
    gr = lambda p: R._rk_nll(p, D, X, y, 2, 1e-3)[1]  # noqa: E731
    p0 = np.array([0.1, -0.2, 0.3, 0.4, np.log(0.5)])
    assert check_grad(f, gr, p0) < 1e-4
    fd = np.stack([(gr(p0 + 1e-6 * e) - gr(p0 - 1e-6 * e)) / 2e-6 for e in np.eye(5)], axis=1)
    np.testing.assert_allclose(R._rk_hessian(p0, D, X, y, 2, 1e-3), fd, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="feats"):
        R.fit_style_control(df, xa[:10], xb, NAMES[:3])
    only_bad = df.assign(winner="both_bad")
    with pytest.raises(ValueError, match="both_bad"):
        R.fit_style_control(only_bad, xa, xb, NAMES[:3])


def _prompt_battles(n_prompts: int, per_prompt: int, effect_sd: float, rng: np.random.Generator
                    ) -> pd.DataFrame:
    """BT votes in which every prompt shifts the strengths by its own N(0, effect_sd^2) draw."""
    base = np.array([0.0, 0.4, 0.8, 1.2])
    frames = []
    for p in range(n_prompts):
        df = _bt_battles(base + rng.normal(0, effect_sd, size=4), per_prompt, rng)
        frames.append(df.assign(prompt_id=f"p{p}"))
    return pd.concat(frames, ignore_index=True)


def test_prompt_bootstrap_is_wider_when_prompts_share_effects():
    """Battles of one prompt share its effect: resampling prompts sees that noise, resampling
    battles does not. Without prompt effects the two agree."""
    rng = np.random.default_rng(11)
    widths = {}
    for sd in (0.0, 0.8):
        df = _prompt_battles(20, 200, sd, rng)
        battle = R.bootstrap_bt(df, NAMES[:4], 400, rng)
        prompt = R.bootstrap_bt_clustered(df, NAMES[:4], 400, rng)
        widths[sd] = np.std(prompt[:, 1:], axis=0) / np.std(battle[:, 1:], axis=0)
    assert np.all(widths[0.8] > 1.5), widths
    assert np.all((widths[0.0] > 0.75) & (widths[0.0] < 1.33)), widths
    # one cluster per battle is the battle bootstrap (in distribution): same spread
    df = _prompt_battles(1, 3000, 0.0, rng).assign(prompt_id=lambda d: np.arange(len(d)))
    one = np.std(R.bootstrap_bt_clustered(df, NAMES[:4], 300, rng)[:, 1:], axis=0)
    ref = np.std(R.bootstrap_bt(df, NAMES[:4], 300, rng)[:, 1:], axis=0)
    assert np.all(np.abs(one / ref - 1) < 0.25)
    with pytest.raises(ValueError, match="cluster"):
        R.bootstrap_bt_clustered(df.drop(columns="prompt_id"), NAMES[:4], 10, rng)
