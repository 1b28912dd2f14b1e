"""The synthetic corpus: determinism, answers recomputed independently, scoring."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minirepro.core.lm.corpus import (
    FAMILIES,
    CorpusConfig,
    Example,
    build_corpus,
    chance_accuracy,
    check_answer,
    generate_split,
    score_answers,
    solve,
)

SMALL = dict(n_train=200, n_val=40, n_test=40)


def test_same_config_same_corpus_byte_for_byte():
    a, b = build_corpus(CorpusConfig(**SMALL)), build_corpus(CorpusConfig(**SMALL))
    assert a.texts("train") == b.texts("train") and a.texts("test") == b.texts("test")
    assert a.fingerprint() == b.fingerprint()


def test_other_seed_other_corpus_and_splits_differ():
    a = build_corpus(CorpusConfig(**SMALL))
    b = build_corpus(CorpusConfig(**SMALL, seed=99))
    assert a.fingerprint() != b.fingerprint()
    assert a.texts("train")[:40] != a.texts("test")


def test_families_interleave_and_topics_are_distinct():
    c = build_corpus(CorpusConfig(**SMALL))
    assert [e.family for e in c.train[:8]] == list(FAMILIES) * 2
    topics = {e.topic for e in c.train if e.family == "text"}
    assert topics <= set(CorpusConfig().topic_names) and len(topics) >= 4


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), modulus=st.integers(2, 10), steps=st.integers(1, 5))
def test_every_answer_is_what_an_independent_solver_computes(seed, modulus, steps):
    cfg = CorpusConfig(n_train=40, n_val=1, n_test=1, seed=seed, modulus=modulus,
                       arith_steps=(1, steps), trace_steps=(1, steps))
    for e in generate_split(cfg, 40, seed):
        assert solve(e, modulus) == e.answer, e.text
        assert e.prompt.endswith(("=", "?")) and e.text == f"{e.prompt} {e.answer}"
        if e.family != "text":
            assert 0 <= int(e.answer) < (10 if e.family == "recall" else modulus)


def test_arith_is_left_to_right_modular():
    assert solve(Example("arith", "calc 7 + 5 * 3 =", "6", "arith"), 10) == "6"  # (7+5)%10=2, 2*3=6
    assert solve(Example("trace", "prog x = 4 ; y = x - 6 ; print y =", "8", "trace"), 10) == "8"


def test_check_answer_uses_first_word_exactly():
    e = Example("recall", "keys a 7 ; get a =", "7", "recall")
    assert check_answer(e, " 7") and check_answer(e, "7 calc 3")
    assert not check_answer(e, "71") and not check_answer(e, "") and not check_answer(e, "3 7")


def test_score_answers_per_family_and_overall():
    ex = [Example("arith", "p", "1", "arith"), Example("arith", "p", "2", "arith"),
          Example("text", "p", "ocean", "ocean")]
    s = score_answers(ex, ["1", "3", "ocean"])
    assert s == {"arith": 0.5, "text": 1.0, "all": pytest.approx(2 / 3)}
    with pytest.raises(ValueError, match="outputs"):
        score_answers(ex, ["1"])
    with pytest.raises(ValueError, match="at least one"):
        score_answers([], [])


def test_chance_accuracy():
    c = chance_accuracy(CorpusConfig(modulus=5, topics=4))
    assert c["arith"] == 0.2 and c["text"] == 0.25 and c["recall"] == 0.1


@pytest.mark.parametrize("bad", [dict(families=("poetry",)), dict(topics=1), dict(modulus=11),
                                 dict(n_train=0), dict(arith_steps=(3, 2))])
def test_bad_config_is_a_clear_error(bad):
    with pytest.raises(ValueError):
        CorpusConfig(**bad)


def test_presets_use_scaled_config():
    assert CorpusConfig.preset("smoke").n_train < CorpusConfig.preset("book").n_train
    with pytest.raises(ValueError, match="split"):
        build_corpus(CorpusConfig(**SMALL)).split("dev")
