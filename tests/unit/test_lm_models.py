"""Model construction, the evaluation helpers, and generation with and without the KV cache."""

from __future__ import annotations

import math
import os
import time

import pytest
import torch

from minirepro.core.lm import (
    CorpusConfig,
    HubUnavailable,
    LMConfig,
    build_corpus,
    build_model,
    generate,
    greedy_decode,
    load_pretrained,
    perplexity,
    pretrain,
    token_nll,
    train_tokenizer,
    unigram_loss,
)

CORPUS = build_corpus(CorpusConfig(n_train=300, n_val=30, n_test=30))
TOK = train_tokenizer(CORPUS.texts("train"))
TINY = dict(d_model=32, n_layers=2, n_heads=2, d_ff=64)


@pytest.fixture(params=["opt", "llama"])
def model(request):
    return build_model(LMConfig(arch=request.param, **TINY), TOK, seed=1)


def test_architectures_are_what_they_claim():
    opt = build_model(LMConfig(arch="opt", **TINY), TOK)
    assert opt.config.activation_function == "relu" and opt.model.decoder.layers[0].fc1.out_features == 64
    llama = build_model(LMConfig(arch="llama", n_kv_heads=1, **TINY), TOK)
    mlp = llama.model.layers[0].mlp
    assert llama.config.hidden_act == "silu" and mlp.gate_proj.out_features == 64
    assert llama.config.num_key_value_heads == 1 and hasattr(llama.model, "rotary_emb")


def test_greedy_decode_with_and_without_cache_agree_token_for_token(model):
    ids = torch.tensor([TOK(CORPUS.test[i].prompt)["input_ids"] for i in (0, 4)][:1])
    for prompt in (CORPUS.test[0].prompt, CORPUS.test[3].prompt):
        ids = torch.tensor([TOK(prompt)["input_ids"]])
        a = greedy_decode(model, ids, 12, use_cache=True)
        b = greedy_decode(model, ids, 12, use_cache=False)
        assert torch.equal(a, b)
        hf = model.generate(ids, max_new_tokens=12, do_sample=False, use_cache=True,
                            pad_token_id=TOK.pad_token_id, eos_token_id=None)
        assert torch.equal(a, hf)


def test_batched_generate_cache_on_off_agree(model):
    prompts = [e.prompt for e in CORPUS.test[:6]]  # different lengths: left padding
    on = generate(model, TOK, prompts, max_new_tokens=6, use_cache=True)
    off = generate(model, TOK, prompts, max_new_tokens=6, use_cache=False)
    assert on == off


def test_perplexity_matches_the_models_own_loss(model):
    text = CORPUS.val[3].text
    ids = torch.tensor([TOK(text)["input_ids"] + [TOK.eos_token_id]])
    with torch.no_grad():
        ref = model(input_ids=ids, labels=ids).loss.item()
    total, n = token_nll(model, TOK, [text])
    assert n == ids.shape[1] - 1
    assert total / n == pytest.approx(ref, rel=1e-4)
    assert perplexity(model, TOK, [text]) == pytest.approx(math.exp(ref), rel=1e-4)


def test_unigram_loss_closed_form():
    texts = ["calc 1 =", "calc 1 ="]
    ids = TOK(texts[0])["input_ids"][1:] + [TOK.eos_token_id]
    # every token appears twice in train (4 tokens x 2), add-one over the vocabulary
    expected = -math.log((2 + 1) / (2 * len(ids) + len(TOK)))
    assert unigram_loss(TOK, texts, texts[:1]) == pytest.approx(expected)


def test_greedy_decode_bad_input(model):
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        greedy_decode(model, torch.tensor([1, 2, 3]), 3)


def test_hub_id_offline_fails_fast_with_a_clear_message(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(HubUnavailable, match="not reachable"):
        load_pretrained("facebook/opt-125m")
    with pytest.raises(HubUnavailable):
        pretrain(model_name="facebook/opt-125m", corpus_config=CorpusConfig(n_train=10, n_val=2, n_test=2))
    assert time.perf_counter() - t0 < 5
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_lm_config_validation():
    with pytest.raises(ValueError, match="divisible"):
        LMConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="arch"):
        LMConfig(arch="gpt5")
    assert LMConfig.preset("smoke").d_model < LMConfig.preset("book").d_model
