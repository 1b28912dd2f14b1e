"""Mechanistic reward shaping: projection, Gram-Schmidt, Bradley-Terry, probes, data, pooling.

References: ``numpy.linalg.qr`` (Gram-Schmidt), invariance under span(B) (hypothesis),
scikit-learn's logistic regression and the planted utilities (Bradley-Terry), the
planted data generator read back (data), and ``transformers``' own
sequence-classification pooling (the head's input h).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
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
@example(d=5, k=5, seed=9320).via("ill-conditioned square probes: one MGS pass left |B B^T - I| = 1.2e-10")
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
    with pytest.raises(ValueError, match="n >= 1 questions"):
        rs.make_bundles(0, 0)
    with pytest.raises(ValueError, match="n_questions >= 1"):
        rs.make_preferences(0, 0)
    with pytest.raises(ValueError, match="no facts"):
        rs.make_question(np.random.default_rng(0), ())
    with pytest.raises(ValueError, match="batch_size"):
        rs.StateCache(None, None, batch_size=0)
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
    """The planted utility read back from the labels: verbose and agreeing responses are chosen
    more often, hedged ones less, correct ones far more; the correct option sits at A 70%."""
    pool = rs.make_preferences(1500, 7)
    assert pool.shares["chosen_correct"] > 0.85          # sigmoid(3) = 0.95 before the other terms
    assert 0.65 < pool.shares["chosen_longer"] < 0.9     # sigmoid(1.5) = 0.82
    keys = ("correct", "verbose", "hedge", "agree")
    fc = np.array([[a[0][k] for k in keys] for a in pool.attrs])
    fr = np.array([[a[1][k] for k in keys] for a in pool.attrs])
    for col, k in enumerate(keys):   # pairs that differ in this feature alone: P(chosen has it) = sigmoid(beta)
        only = (fc[:, col] != fr[:, col]) & ((fc != fr).sum(1) == 1)
        expect = 1 / (1 + np.exp(-rs.PLANTED[k]))
        se = np.sqrt(expect * (1 - expect) / only.sum())
        assert only.sum() > 30 and abs(fc[only, col].mean() - expect) < 4 * se + 0.01, k
    rng = np.random.default_rng(0)
    at_a = np.mean([rs.make_question(rng, rs.fact_bank(), 0.7).correct_pos == 0 for _ in range(3000)])
    assert abs(at_a - 0.7) < 0.03


def test_split_facts_disjoint_and_deterministic():
    a = rs.split_facts(3)
    assert a == rs.split_facts(3) and a != rs.split_facts(4)
    qs = [{f.question for f in part} for part in a]
    assert not (qs[0] & qs[1]) and not (qs[0] & qs[2]) and not (qs[1] & qs[2])
    assert sum(map(len, qs)) == len(rs.fact_bank())


def test_bank_answers_are_right_and_in_pools():
    """Independent check of the fact bank: sums computed, each answer among its options' pool."""
    for f in rs.fact_bank():
        assert f.answer in f.pool
        if f.question.startswith("What is ") and "+" in f.question:
            a, b = f.question[8:-1].split(" + ")
            assert int(f.answer) == int(a) + int(b)


def _response(text: str) -> str:
    return text.split("<|im_start|>assistant\n")[1]


def _prompt(text: str) -> str:
    return text.split("<|im_start|>assistant\n")[0]


@pytest.mark.parametrize("bias", list(rs.CONTRASTS))
def test_contrast_pairs_differ_only_in_the_attribute(bias):
    bundles = rs.make_bundles(30, 3)
    a_key, b_key = rs.CONTRASTS[bias]
    for x in bundles:
        a, b = x[a_key], x[b_key]
        assert a != b
        if bias in ("length", "length_ood", "hedge", "correctness"):
            assert _prompt(a) == _prompt(b)          # same question and options
        if bias in ("length", "length_ood"):
            assert _response(b)[:-len("<|im_end|>")] in _response(a)   # the concise answer inside
            assert len(a) > len(b)
        if bias == "length_ood":
            assert not any(f in a for f in rs.data.FILL_PRE + rs.data.FILL_POST)
        if bias == "hedge":
            assert any(h in _response(a) for h in rs.data.HEDGES)
            assert not any(h in _response(b) for h in rs.data.HEDGES)
        la, lb = (re.search(r" ([ABCD])\) ", _response(t)).group(1) for t in (a, b))
        if bias == "position":
            assert la == "A" and lb != "A"
            assert re.sub(r" [ABCD]\) ", " X) ", _response(a)) == re.sub(r" [ABCD]\) ", " X) ", _response(b))
            assert sorted(_prompt(a).split()) != sorted(_prompt(b).split()) or _prompt(a) != _prompt(b)
        if bias == "sycophancy":
            assert _response(a) == _response(b)
            assert f"I think the answer is {la}." in a and f"I think the answer is {la}." not in b


def test_question_rotation_keeps_options():
    q = rs.make_question(np.random.default_rng(0), rs.fact_bank())
    for k in range(4):
        r = q.with_option_at(q.fact.answer, k)
        assert r.correct_pos == k and sorted(r.options) == sorted(q.options)
    with pytest.raises(ValueError, match="cannot move"):
        q.with_option_at("not an option", 0)


def test_bundle_metrics_against_brute_force():
    """BundleStates.score on a planted reward (a linear function of toy states that encode each
    bundle member) equals the rates counted by hand."""
    bundles = rs.make_bundles(8, 1)
    table = {t: i for i, t in enumerate(dict.fromkeys(t for b in bundles for t in b.values()))}
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(len(table), 5))
    states = lambda texts: emb[[table[t] for t in texts]]  # noqa: E731
    bs = rs.BundleStates(bundles, states)
    w = rng.normal(size=5)
    out = bs.score(lambda h: h @ w)
    r = {t: emb[i] @ w for t, i in table.items()}
    for k in ("length", "hedge", "position", "sycophancy"):
        a, b = rs.CONTRASTS[k]
        expect = np.mean([(r[x[a]] > r[x[b]]) + 0.5 * (r[x[a]] == r[x[b]]) for x in bundles])
        assert out[f"rate/{k}"] == pytest.approx(expect)
        assert out[f"excess/{k}"] == pytest.approx(rs.PLANTED_SIGN[k] * (expect - 0.5))
    assert out["accuracy"] == pytest.approx(np.mean([r[x["base"]] > r[x["wrong"]] for x in bundles]))
    # a probe equal to w reads the reward's own order
    assert rs.probe_accuracy(w, *bs.pair("length")) == pytest.approx(out["rate/length"])


def test_standardised_head_is_linear_in_h_and_projection_invariant():
    """With standardize=True the head is still affine in h: the shaped reward is blind to span(B)."""
    rng = np.random.default_rng(2)
    a, b = rng.normal(3, 5, size=(40, 6)), rng.normal(3, 5, size=(40, 6))
    fit = rs.train_bt(a, b, steps=20, seed=0, standardize=True)
    B = rs.gram_schmidt(rng.normal(size=(2, 6)))
    h = rng.normal(size=(7, 6)).astype(np.float32)
    v = (rng.normal(size=(7, 2)) @ B).astype(np.float32)
    f = rs.Shaper(fit.head, B)
    np.testing.assert_allclose(f(h + v), f(h), atol=1e-4)
    x, y, t = h[:1], h[1:2], 0.3
    mix = fit.head.reward((1 - t) * x + t * y)
    assert mix[0] == pytest.approx((1 - t) * fit.head.reward(x)[0] + t * fit.head.reward(y)[0], abs=1e-4)


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


def test_last_token_states_do_not_depend_on_padding():
    """h of a text in a padded batch equals h of the text run alone (no padding): the mask-based
    read of the last real token is right even where the pad id is also a real token."""
    from minirepro.core.lm import load_model

    model, tok = load_model("lm-smoke")
    texts = rs.make_bundles(2, 0)[0]
    texts = [texts["base"], texts["verbose"], texts["agree"]]
    h = rs.last_token_states(model.model, tok, texts, batch_size=3)
    for t, row in zip(texts, h):
        with torch.no_grad():
            alone = model.model(input_ids=torch.tensor([tok(t)["input_ids"]])).last_hidden_state[0, -1]
        np.testing.assert_allclose(row, alone.numpy(), rtol=1e-4, atol=1e-4)


def test_preference_rate_ties_and_errors():
    assert rs.preference_rate(np.array([1.0, 0.0, 2.0]), np.array([0.0, 0.0, 3.0])) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        rs.preference_rate(np.array([]), np.array([]))
