"""SparseInfer's token-overlap control (the similarity observation with token overlap held fixed).

The earlier same-family stability pairing, the core-set Jaccard matrix over the substrate's
families and the substrate's prompt sampler went with the chapter's move to SmolLM2 and its
topic texts (their replacements are tested in test_sparseinfer.py)."""

from __future__ import annotations

import numpy as np
import pytest

from minirepro.papers.sparseinfer.protocol import token_jaccard_matrix, token_overlap_control


def test_token_jaccard_matrix_is_the_set_formula():
    T = token_jaccard_matrix([[1, 2, 3], [2, 3, 4, 4], [9]])
    assert T[0, 1] == pytest.approx(2 / 4) and T[0, 2] == 0 and T[1, 1] == 1 and T[1, 0] == T[0, 1]


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


def test_token_overlap_control_without_same_topic_pairs_is_refused():
    labels = ["a", "b", "c", "d"]
    tok = token_jaccard_matrix([[1, 2], [2, 3], [3, 4], [4, 5]])
    with pytest.raises(ValueError, match="same-label and different-label pairs"):
        token_overlap_control(np.eye(4) + 0.1, tok, labels)
    with pytest.raises(ValueError):
        token_overlap_control(np.eye(3), np.eye(4), labels)
