"""Mechanistic reward shaping: projection, Gram-Schmidt, Bradley-Terry, probes, data, pooling.

References: ``numpy.linalg.qr`` (Gram-Schmidt), invariance under span(B) (hypothesis),
scikit-learn's logistic regression and the planted utilities (Bradley-Terry), the
planted data generator read back (data), and ``transformers``' own
sequence-classification pooling (the head's input h).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression

from minirepro.papers import reward_shaping as rs

# ------------------------------------------------------------------ projection


@settings(max_examples=40, deadline=None)
@given(d=st.integers(3, 24), k=st.integers(1, 3), seed=st.integers(0, 10_000),
       alpha=st.floats(0.5, 1.5))
def test_shaped_reward_invariant_to_span_of_basis(d, k, seed, alpha):
    """head(h - B^T B h) does not change when any vector of span(B) is added to h (alpha=1),
    and only span(B) is touched: the component orthogonal to B is left exactly."""
    rng = np.random.default_rng(seed)
    B = rs.gram_schmidt(rng.normal(size=(k, d)))
    h = rng.normal(size=(5, d))
    v = rng.normal(size=(5, k)) @ B                     # vectors in span(B)
    w = rng.normal(size=d)
    np.testing.assert_allclose(rs.project_out(h + v, B) @ w, rs.project_out(h, B) @ w, atol=1e-9)
    # the projection removes exactly span(B): nothing of B is left, the orthogonal part is unchanged
    out = rs.project_out(h, B)
    np.testing.assert_allclose(out @ B.T, 0.0, atol=1e-9)
    perp = h - (h @ B.T) @ B
    np.testing.assert_allclose(out, perp, atol=1e-9)
    # alpha scales only the removed component: h - alpha * P h
    np.testing.assert_allclose(rs.project_out(h, B, alpha), h - alpha * (h - perp), atol=1e-9)


def test_projection_of_torch_head_matches_library_head():
    """Shaper = RewardHead(project_out(h)); for a linear head that is (w - B^T B w).h + b."""
    rng = np.random.default_rng(0)
    head = rs.RewardHead(6)
    B = rs.gram_schmidt(rng.normal(size=(2, 6)))
    h = rng.normal(size=(4, 6)).astype(np.float32)
    w = head.net.weight.detach().double().numpy()[0]
    b = float(head.net.bias.detach()[0])
    w_null = w - B.T @ (B @ w)
    np.testing.assert_allclose(rs.Shaper(head, B)(h), h @ w_null + b, atol=1e-5)


# ------------------------------------------------------------------ Gram-Schmidt


@settings(max_examples=40, deadline=None)
@given(d=st.integers(2, 30), k=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_gram_schmidt_matches_numpy_qr(d, k, seed):
    """Same span and, up to the sign of each vector, the same vectors as numpy.linalg.qr."""
    k = min(k, d)
    P = np.random.default_rng(seed).normal(size=(k, d))
    B = rs.gram_schmidt(P)
    Q, R = np.linalg.qr(P.T)
    assert B.shape == (k, d)
    np.testing.assert_allclose(B @ B.T, np.eye(k), atol=1e-10)
    signs = np.sign(np.diag(R))
    np.testing.assert_allclose(B, (Q * signs).T, atol=1e-8)


def test_gram_schmidt_drops_dependent_probes():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=8), rng.normal(size=8)
    B = rs.gram_schmidt([a, b, 2 * a - 3 * b])
    assert B.shape == (2, 8)
    Q, _ = np.linalg.qr(np.stack([a, b]).T)
    np.testing.assert_allclose(B.T @ B, Q @ Q.T, atol=1e-10)    # same projector


# ------------------------------------------------------------------ probes


def test_diff_of_means_probe_and_cleaning():
    rng = np.random.default_rng(2)
    d = 10
    u = np.eye(d)[0]
    c = np.eye(d)[1]
    base = rng.normal(size=(200, d))
    pos = base + 3 * u + 1.0 * c           # the attribute is confounded with correctness
    p = rs.diff_of_means_probe(pos, base)
    np.testing.assert_allclose(p, (3 * u + c) / np.sqrt(10), atol=1e-12)
    q = rs.clean_probe(p, c)
    np.testing.assert_allclose(q, u, atol=1e-12)
    assert abs(q @ c) < 1e-12


def test_bad_input_raises_clearly():
    good = np.ones((3, 4))
    with pytest.raises(ValueError, match="non-empty"):
        rs.diff_of_means_probe(np.zeros((0, 4)), good)
    with pytest.raises(ValueError, match="different widths"):
        rs.diff_of_means_probe(good, np.ones((3, 5)))
    with pytest.raises(ValueError, match="same mean"):
        rs.diff_of_means_probe(good, good)
    with pytest.raises(ValueError, match="NaN"):
        rs.diff_of_means_probe(np.full((2, 4), np.nan), good)
    B = rs.gram_schmidt(np.eye(4)[:2])
    with pytest.raises(ValueError, match="width 5 but the probes have width 4"):
        rs.project_out(np.ones((2, 5)), B)
    with pytest.raises(ValueError, match="at least one probe"):
        rs.gram_schmidt(np.zeros((0, 4)))
    with pytest.raises(ValueError, match="all probes are zero"):
        rs.gram_schmidt(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="one width"):
        rs.clean_probe(np.ones(4), np.ones(5))
    with pytest.raises(ValueError, match="parallel"):
        rs.clean_probe(np.eye(4)[0], np.eye(4)[0])
    with pytest.raises(ValueError, match="n >= 1"):
        rs.contrast_pairs("length", 0, 0)
    with pytest.raises(ValueError, match="unknown bias"):
        rs.contrast_pairs("verbosity", 4, 0)
    with pytest.raises(ValueError, match="states must be"):
        rs.RewardHead(4).reward(np.ones((2, 3)))
    with pytest.raises(ValueError, match="same shape|one shape"):
        rs.train_bt(np.ones((3, 4)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="non-empty"):
        rs.train_bt(np.zeros((0, 4)), np.zeros((0, 4)))


# ------------------------------------------------------------------ Bradley-Terry


def _toy(n: int, beta: np.ndarray, seed: int):
    rng = np.random.default_rng(seed)
    x1, x2 = rng.integers(0, 2, size=(2, n, beta.size)).astype(float)
    first = rng.random(n) < 1 / (1 + np.exp(-(x1 - x2) @ beta))
    chosen = np.where(first[:, None], x1, x2)
    rejected = np.where(first[:, None], x2, x1)
    return chosen, rejected


def test_bradley_terry_recovers_planted_utilities():
    """A linear BT head on one-hot attributes recovers the planted utilities (up to the
    sampling error of 6000 pairs) and agrees with scikit-learn's unpenalised logistic
    regression on the differences."""
    beta = np.array([3.0, 1.5, -1.5, 1.0, 0.0])
    c, r = _toy(6000, beta, 0)
    fit = rs.train_bt(c, r, hidden=0, steps=1500, lr=0.05, weight_decay=0.0)
    w = fit.head.net.weight.detach().double().numpy()[0]
    np.testing.assert_allclose(w, beta, atol=0.2)
    X = np.concatenate([c - r, r - c])
    y = np.r_[np.ones(len(c)), np.zeros(len(c))]
    lr = LogisticRegression(C=np.inf, fit_intercept=False, max_iter=5000).fit(X, y)
    np.testing.assert_allclose(w, lr.coef_[0], atol=0.02)
    assert fit.losses[-1] < fit.losses[0]


def test_bt_loss_closed_form():
    rc, rr = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 1.0])
    expect = np.mean([np.log1p(np.exp(-2.0)), np.log1p(np.exp(1.0))])
    assert float(rs.bt_loss(rc, rr)) == pytest.approx(expect, rel=1e-6)


# ------------------------------------------------------------------ data


def test_planted_correlations_in_training_pairs():
    pool = rs.make_preferences(3000, 7)
    assert abs(pool.shares["chosen_longer"] - 0.85) < 0.03
    # with the correct option at a 70% of the time, correct-and-at-a choices dominate
    assert pool.shares["chosen_at_a"] > 0.45
    assert pool.shares["chosen_correct"] > 0.6
    # the planted utility read back: a hedged response is chosen less often than chance
    hedged = [(a[0]["hedge"], a[1]["hedge"]) for a in pool.attrs]
    diff = [h for h in hedged if h[0] != h[1]]
    assert np.mean([h[0] for h in diff]) < 0.45


@pytest.mark.parametrize("bias", rs.BIASES + ("correctness",))
def test_contrast_pairs_differ_only_in_the_attribute(bias):
    pos, neg = rs.contrast_pairs(bias, 20, 3)
    assert len(pos) == len(neg) == 20
    for a, b in zip(pos, neg):
        assert a != b
        if bias in ("hedge", "style"):
            marker = "i am not sure , but" if bias == "hedge" else "certainly !"
            assert a.replace(" " + marker, "") == b
        if bias == "length":
            assert len(a.split()) > len(b.split())
        if bias == "position":
            assert a.split("answer :")[1].strip().split()[-3] == "a"
            assert b.split("answer :")[1].strip().split()[-3] != "a"


def test_question_rotation_keeps_options():
    q = rs.make_question(np.random.default_rng(0))
    for k in range(4):
        r = q.with_option_at(q.topic, k)
        assert r.correct_pos == k and sorted(r.options) == sorted(q.options)


# ------------------------------------------------------------------ h = the library's pooled state


def test_last_token_states_match_sequence_classification_pooling():
    """With the library's own score head, head(h) equals AutoModelForSequenceClassification's
    logits (which pools the last non-pad token): our h is the reward head's input."""
    from minirepro.core.lm import load_substrate, reward_model

    sub = load_substrate("smoke")
    rm = reward_model(sub.path)
    texts = ["text : the salty wave swims . topic ? ocean", "calc 3 + 4 =",
             "quiz : which topic : a b c options : a ) city . answer : a ) city"]
    h = rs.last_token_states(rm.model, sub.tokenizer, texts, batch_size=2)
    with torch.no_grad():
        enc = sub.tokenizer(texts, return_tensors="pt", padding=True)
        logits = rm(**enc).logits[:, 0].numpy()
        mine = rm.score(torch.from_numpy(h))[:, 0].numpy()
    np.testing.assert_allclose(mine, logits, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="no texts"):
        rs.last_token_states(rm.model, sub.tokenizer, [])


def test_preference_rate_ties_and_errors():
    assert rs.preference_rate(np.array([1.0, 0.0, 2.0]), np.array([0.0, 0.0, 3.0])) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        rs.preference_rate(np.array([]), np.array([]))
