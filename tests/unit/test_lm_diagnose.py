"""Diagnosis of the lookup circuit: each score against a loop over the attention maps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from minirepro.core.lm.bpe import train_bpe
from minirepro.core.lm.corpus import DRILLS, CorpusConfig, Example, build_corpus
from minirepro.core.lm.diagnose import (
    answer_counts,
    answer_token_loss,
    attention_maps,
    copy_attention,
    eager_attention,
    induction_scores,
    prompt_word_share,
    word_pool,
)
from minirepro.core.lm.models import ModelConfig, build_lm

CORPUS = build_corpus(CorpusConfig(n_train=800, n_val=40, n_test=60, drills=DRILLS))
TOK = train_bpe(CORPUS.texts("train"), vocab_size=900)
SMALL = ModelConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_len=256)
MODEL = build_lm(SMALL, TOK, seed=0)


def test_induction_scores_match_a_loop_over_the_attention():
    pool = word_pool(TOK)
    assert len(pool) > 100 and all(len(TOK.decode([i]).split()) == 1 for i in pool[:50])
    res = induction_scores(MODEL, TOK, length=6, n=3, seed=4, batch_size=2)
    rng = np.random.default_rng(4)
    seqs = [rng.choice(pool, size=6, replace=False) for _ in range(3)]
    pm = np.zeros((2, 4))
    pt = np.zeros((2, 4))
    hits = []
    for s in seqs:
        x = torch.tensor([[TOK.bos_token_id, *s, *s]])
        att = attention_maps(MODEL, x)[:, 0].numpy()                 # (L, H, T, T)
        with torch.no_grad():
            pred = MODEL(input_ids=x).logits[0].argmax(-1)
        for p in range(7, 13):                                       # the second copy
            prev_occurrence = p - 6
            pm += att[:, :, p, prev_occurrence + 1]
            pt += att[:, :, p, p - 1]
            if p < 12:
                hits.append(int(pred[p]) == int(x[0, p + 1]))
    np.testing.assert_allclose(res["prefix_matching"], (pm / 18).round(4), atol=1e-4)
    np.testing.assert_allclose(res["previous_token"], (pt / 18).round(4), atol=1e-4)
    assert res["copy_acc"] == pytest.approx(np.mean(hits))
    assert res["best_prefix_score"] == pytest.approx(pm.max() / 18, abs=1e-5)
    assert res["chance"] == pytest.approx(1 / len(pool))


def test_copy_attention_reads_the_word_to_copy():
    lines = [e for e in CORPUS.test if e.family == "copy"][:3]
    res = copy_attention(MODEL, TOK, lines)
    ref = np.zeros((2, 4))
    for e in lines:
        ids = TOK(e.text)["input_ids"]
        start = len(TOK(e.prompt)["input_ids"])
        att = attention_maps(MODEL, torch.tensor([ids]))[:, 0].numpy()
        for j in range(3):
            ref += att[:, :, start - 1 + j, ids.index(ids[start + j])] / 3
    np.testing.assert_allclose(res["mass"], (ref / 3).round(4), atol=1e-4)
    assert res["n_lines"] == 3 and len(res["mass_by_answer_word"]) == 3


def test_eager_attention_is_restored_and_changes_nothing():
    x = TOK([CORPUS.test[0].text], return_tensors="pt")["input_ids"]
    before = MODEL.config._attn_implementation
    with torch.no_grad():
        a = MODEL(input_ids=x).logits
        with eager_attention(MODEL):
            assert MODEL.config._attn_implementation == "eager"
            b = MODEL(input_ids=x).logits
    assert MODEL.config._attn_implementation == before
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_outputs_are_summarised():
    ex = [Example("copy", "copy : ab cd ef gh ; again : ab cd ->", "ef gh ij"),
          Example("mcq", "quiz : x ? answer :", "b")]
    assert prompt_word_share(ex[:1], ["ef ef zz"]) == pytest.approx(2 / 3)
    counts = answer_counts([ex[1]] * 3, ["c", "c", "b"])
    assert counts == {"given": {"c": 2, "b": 1}, "right": {"b": 3}}
    loss = answer_token_loss(MODEL, TOK, [e for e in CORPUS.test if e.family == "copy"][:4])
    assert len(loss) == 3 and all(0 < v < 20 for v in loss)


def test_bad_input():
    with pytest.raises(ValueError, match="length"):
        induction_scores(MODEL, TOK, length=200)
    with pytest.raises(ValueError, match="fewer than length"):
        induction_scores(MODEL, TOK, length=5, pool=[10, 11])
    with pytest.raises(ValueError, match="copy lines"):
        copy_attention(MODEL, TOK, [e for e in CORPUS.test if e.family == "arith"])
