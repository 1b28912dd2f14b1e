"""The tokenizer: trained with ``tokenizers``, used through ``transformers``, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerFast

from minirepro.core.lm.corpus import CorpusConfig, build_corpus
from minirepro.core.lm.tokenizer import load_tokenizer, train_tokenizer

CORPUS = build_corpus(CorpusConfig(n_train=400, n_val=50, n_test=50))
TOK = train_tokenizer(CORPUS.texts("train"), vocab_size=512)


def test_is_a_transformers_fast_tokenizer_with_specials():
    assert isinstance(TOK, PreTrainedTokenizerFast)
    assert TOK.pad_token_id == 0 and TOK.bos_token_id is not None and TOK.eos_token_id is not None
    assert TOK("calc 1 + 2 =")["input_ids"][0] == TOK.bos_token_id


@settings(max_examples=30, deadline=None)
@given(i=st.integers(0, 49))
def test_round_trip_on_unseen_lines(i):
    text = CORPUS.test[i].text
    ids = TOK(text)["input_ids"]
    assert TOK.decode(ids, skip_special_tokens=True) == text
    assert TOK.unk_token_id not in ids


def test_digits_and_answers_are_single_tokens():
    for e in CORPUS.test:
        assert len(TOK(e.answer, add_special_tokens=False)["input_ids"]) == 1, e.answer
    assert len(TOK("37", add_special_tokens=False)["input_ids"]) == 2


def test_save_and_reload_give_the_same_ids(tmp_path):
    TOK.save_pretrained(tmp_path)
    again = load_tokenizer(tmp_path)
    for t in CORPUS.texts("val")[:20]:
        assert again(t)["input_ids"] == TOK(t)["input_ids"]
    assert len(again) == len(TOK)


def test_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        train_tokenizer([])
    with pytest.raises(FileNotFoundError):
        load_tokenizer("/nonexistent/folder")
