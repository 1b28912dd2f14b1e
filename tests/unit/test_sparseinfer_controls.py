"""SparseInfer's controls (issue 26): same-family stability pairing and the token-overlap control."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from minirepro.papers.sparseinfer import stability
from minirepro.papers.sparseinfer.protocol import (
    core_jaccard_matrix,
    token_jaccard_matrix,
    token_overlap_control,
)


def _acts(rng, n, T=6, d_ff=40, hot=None):
    """Per item one layer of (2T, d_ff) pre-activations; item j's neurons ``hot[j]`` fire everywhere."""
    out = []
    for j in range(n):
        a = torch.as_tensor(rng.normal(0, 0.1, (2 * T, d_ff)), dtype=torch.float32)
        if hot is not None:
            a[:, hot[j]] += 5.0
        out.append([a])
    return out


def test_same_family_pairing_with_one_family_is_the_old_pairing():
    rng = np.random.default_rng(0)
    acts = _acts(rng, 5)
    old = stability(acts, [6] * 5, [0], 0.2, 0.4)
    assert stability(acts, [6] * 5, [0], 0.2, 0.4, groups=["a"] * 5) == old


def test_same_family_pairing_picks_the_partner_within_the_family():
    # families a and b use disjoint neurons; interleaved, the old "next item" is always of the other family
    rng = np.random.default_rng(1)
    hot = [list(range(0, 16)) if j % 2 == 0 else list(range(20, 36)) for j in range(6)]
    acts = _acts(rng, 6, hot=hot)
    groups = ["a" if j % 2 == 0 else "b" for j in range(6)]
    across = stability(acts, [6] * 6, [0], 0.5, 0.4)
    within = stability(acts, [6] * 6, [0], 0.5, 0.4, groups=groups)
    assert within["self"] == across["self"]
    assert within["other"] > across["other"] + 0.3  # a same-family continuation shares the family's neurons
    with pytest.raises(ValueError):
        stability(acts, [6] * 6, [0], 0.5, 0.4, groups=["a"] * 5 + ["c"])


def test_token_jaccard_matrix_is_the_set_formula():
    T = token_jaccard_matrix([[1, 2, 3], [2, 3, 4, 4], [9]])
    assert T[0, 1] == pytest.approx(2 / 4) and T[0, 2] == 0 and T[1, 1] == 1 and T[1, 0] == T[0, 1]


def test_core_jaccard_matrix_is_symmetric_with_unit_diagonal():
    J = core_jaccard_matrix(_acts(np.random.default_rng(2), 4), [0], 0.2, 0.4)
    assert np.allclose(J, J.T) and np.allclose(np.diag(J), 1) and ((J >= 0) & (J <= 1)).all()


def _pairs(rng, n=24, topics=4):
    labels = [f"t{j % topics}" for j in range(n)]
    lab = np.asarray(labels)
    same = lab[:, None] == lab[None, :]
    tok = np.clip(0.2 + 0.25 * same + rng.normal(0, 0.08, (n, n)), 0, 1)
    tok = np.triu(tok, 1) + np.triu(tok, 1).T + np.eye(n)
    return labels, same, tok


def test_token_overlap_control_recovers_a_planted_topic_effect():
    rng = np.random.default_rng(3)
    labels, same, tok = _pairs(rng)
    core = 0.3 + 0.5 * tok + 0.1 * same + 1e-3 * rng.normal(size=tok.shape)
    core = np.triu(core, 1) + np.triu(core, 1).T + np.eye(len(labels))
    out = token_overlap_control(core, tok, labels)
    assert out["same-topic effect"] == pytest.approx(0.1, abs=0.005)
    assert out["token slope"] == pytest.approx(0.5, abs=0.02)
    assert out["token J within"] > out["token J across"] + 0.2


def test_token_overlap_control_removes_a_gap_made_by_shared_tokens_alone():
    rng = np.random.default_rng(4)
    labels, same, tok = _pairs(rng)
    core = 0.3 + 0.5 * tok  # core sets follow the tokens only
    off = ~np.eye(len(labels), dtype=bool)
    raw_gap = core[same & off].mean() - core[~same].mean()
    out = token_overlap_control(core, tok, labels)
    assert raw_gap > 0.1 and abs(out["same-topic effect"]) < 1e-9


def test_token_overlap_control_without_same_topic_pairs_is_nan():
    labels = ["a", "b", "c", "d"]
    tok = token_jaccard_matrix([[1, 2], [2, 3], [3, 4], [4, 5]])
    out = token_overlap_control(np.eye(4) + 0.1, tok, labels)
    assert np.isnan(out["same-topic effect"]) and np.isnan(out["token J within"])
    with pytest.raises(ValueError):
        token_overlap_control(np.eye(3), np.eye(4), labels)


def test_fresh_prompts_work_with_a_token_weighted_corpus_config():
    """The book substrate's corpus weights its ten families; a subset of families must still draw prompts."""
    from minirepro.core.lm.corpus import FAMILIES, Corpus, CorpusConfig
    from minirepro.papers.sparseinfer.experiment import _prompts

    cfg = CorpusConfig(n_train=10, n_val=10, n_test=10,
                         train_weights=tuple(float(i + 1) for i in range(len(FAMILIES))))
    items = _prompts(Corpus(cfg), ("trace", "copy"), 6, seed=3)
    assert [e.family for e in items] == ["trace", "copy"] * 3
