"""Pre-training and its cache: loss falls, hits give identical weights, corruption is rebuilt."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from minirepro.core.lm import (
    CorpusConfig,
    LMConfig,
    TrainConfig,
    cache_key,
    perplexity,
    pretrain,
    unigram_loss,
    verify_entry,
)

LM = LMConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, max_len=64)
TRAIN = TrainConfig(steps=60, batch_size=16, lr=5e-3, warmup=5)
CORPUS = CorpusConfig(n_train=400, n_val=40, n_test=40)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIREPRO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return tmp_path / "cache"


def same_weights(m1, m2) -> bool:
    s1, s2 = m1.state_dict(), m2.state_dict()
    return s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)


def test_loss_decreases_and_beats_the_unigram_baseline(cache):
    lm = pretrain(LM, TRAIN, CORPUS)
    first, last = np.mean(lm.losses[:5]), np.mean(lm.losses[-5:])
    assert last < first - 1.0
    val = lm.corpus.texts("val")
    assert np.log(perplexity(lm.model, lm.tokenizer, val)) < unigram_loss(lm.tokenizer, lm.corpus.texts(), val)


def test_cache_hit_gives_identical_weights_and_training_is_deterministic(cache):
    a = pretrain(LM, TRAIN, CORPUS)
    assert not a.from_cache and a.path is not None and verify_entry(a.path) is None
    b = pretrain(LM, TRAIN, CORPUS)
    assert b.from_cache and same_weights(a.model, b.model) and b.losses == a.losses
    assert b.tokenizer("calc 1 + 2 =")["input_ids"] == a.tokenizer("calc 1 + 2 =")["input_ids"]
    c = pretrain(LM, TRAIN, CORPUS, use_cache=False)  # retrain from scratch: same weights
    assert not c.from_cache and same_weights(a.model, c.model)


@pytest.mark.parametrize("damage", ["flip_weights", "drop_manifest", "truncate_meta"])
def test_corrupt_or_partial_entry_is_rebuilt_not_loaded(cache, damage):
    a = pretrain(LM, TRAIN, CORPUS)
    folder = a.path
    if damage == "flip_weights":
        p = folder / "model.safetensors"
        raw = bytearray(p.read_bytes())
        raw[-100] ^= 0xFF
        p.write_bytes(bytes(raw))
    elif damage == "drop_manifest":
        (folder / "MANIFEST.json").unlink()
    else:
        (folder / "meta.json").write_text("{")
    assert verify_entry(folder) is not None
    with pytest.warns(UserWarning, match="rebuilding"):
        b = pretrain(LM, TRAIN, CORPUS)
    assert not b.from_cache and same_weights(a.model, b.model)
    assert verify_entry(folder) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pretrain(LM, TRAIN, CORPUS).from_cache


def test_key_depends_on_config_data_and_seed(cache):
    from minirepro.core.lm import build_corpus
    corpus = build_corpus(CORPUS)
    k = cache_key(LM, TRAIN, corpus)
    assert k == cache_key(LM, TrainConfig(steps=60, batch_size=16, lr=5e-3, warmup=5), corpus)
    assert k != cache_key(LM, TrainConfig(steps=60, batch_size=16, lr=5e-3, warmup=5, seed=1), corpus)
    assert k != cache_key(LMConfig(d_model=32, n_layers=3, n_heads=2, d_ff=64), TRAIN, corpus)
    assert k != cache_key(LM, TRAIN, build_corpus(CorpusConfig(n_train=400, n_val=40, n_test=40, seed=5)))


def test_no_temporary_folders_left_and_meta_is_complete(cache):
    a = pretrain(LM, TRAIN, CORPUS)
    assert [p.name for p in (cache / "lm").iterdir()] == [a.path.name]
    meta = json.loads((a.path / "meta.json").read_text())
    assert meta["key"] == a.key and len(meta["losses"]) == TRAIN.steps


def test_bad_train_config():
    with pytest.raises(ValueError):
        TrainConfig(steps=0)
    with pytest.raises(ValueError):
        TrainConfig(lr=-1.0)


def test_llama_trains_and_reloads_from_the_cache(cache):
    llama = LMConfig(arch="llama", d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, max_len=64)
    short = TrainConfig(steps=15, batch_size=16, lr=5e-3, warmup=3)
    a = pretrain(llama, short, CORPUS)
    assert a.losses[-1] < a.losses[0]
    b = pretrain(llama, short, CORPUS)
    assert b.from_cache and type(b.model).__name__ == "LlamaForCausalLM" and same_weights(a.model, b.model)
