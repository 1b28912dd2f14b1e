"""The byte-level BPE: fixed special ids, exact round trips, and the same ids in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from minirepro.core.lm.bpe import (
    BOS_ID,
    EOS_ID,
    N_RESERVED,
    PAD_ID,
    RESERVED,
    UNK_ID,
    load_bpe,
    save_bpe,
    tokenizer_digest,
    train_bpe,
)
from minirepro.core.lm.corpus import CorpusConfig, build_corpus

CFG = CorpusConfig(n_train=1500, n_val=50, n_test=100)
CORPUS = build_corpus(CFG)
TOK = train_bpe(CORPUS.texts("train"), vocab_size=700)

_CHILD = """
import json, sys
from minirepro.core.lm.bpe import train_bpe, tokenizer_digest
from minirepro.core.lm.corpus import CorpusConfig, build_corpus
c = build_corpus(CorpusConfig(n_train=1500, n_val=50, n_test=100))
tok = train_bpe(c.texts("train"), vocab_size=700)
print(json.dumps({"digest": tokenizer_digest(tok),
                  "ids": [tok(e.text)["input_ids"] for e in c.test]}))
"""


def _child(hashseed: str, rayon: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": hashseed, "RAYON_NUM_THREADS": rayon,
           "TQDM_DISABLE": "1"}
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                         check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_two_fresh_processes_train_the_same_tokenizer():
    a = _child("1", "1")
    b = _child("987", "2")
    assert a["digest"] == b["digest"]
    assert a["ids"] == b["ids"]
    assert a["digest"] == tokenizer_digest(TOK)  # and the same as this process's


def test_fixed_special_and_reserved_ids():
    assert (TOK.pad_token_id, TOK.bos_token_id, TOK.eos_token_id, TOK.unk_token_id) == (
        PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert [TOK.convert_tokens_to_ids(t) for t in RESERVED] == list(range(4, 4 + N_RESERVED))
    used = {i for e in CORPUS.train for i in TOK(e.text)["input_ids"]}
    assert not used & set(range(4, 4 + N_RESERVED))  # the corpus never uses a reserved token
    assert TOK("calc 1 + 2 =")["input_ids"][0] == BOS_ID


def test_round_trip_is_exact_and_never_unknown():
    for text in [*CORPUS.texts("test"), "Unseen Words: naïve café, tabs\tand  spaces 12345!"]:
        ids = TOK(text)["input_ids"]
        assert TOK.decode(ids, skip_special_tokens=True) == text
        assert UNK_ID not in ids


def test_digits_are_single_tokens_and_prompts_are_prefixes():
    for d in "0123456789":
        assert len(TOK(" " + d, add_special_tokens=False)["input_ids"]) == 1
    assert len(TOK(" 37", add_special_tokens=False)["input_ids"]) == 2
    for e in CORPUS.test:
        p, line = TOK(e.prompt)["input_ids"], TOK(e.text)["input_ids"]
        assert line[:len(p)] == p


def test_save_and_load_keep_the_ids(tmp_path):
    save_bpe(TOK, tmp_path)
    again = load_bpe(tmp_path)
    assert tokenizer_digest(again) == tokenizer_digest(TOK)
    assert again(CORPUS.test[0].text)["input_ids"] == TOK(CORPUS.test[0].text)["input_ids"]


def test_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        train_bpe([])
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe(["a b c"], vocab_size=100)
    with pytest.raises(FileNotFoundError):
        load_bpe("/nonexistent-folder")
