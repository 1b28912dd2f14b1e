"""Models: helpers against a manual forward, KV cache, reward head, checkpoints by path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from minirepro.core.lm.bpe import train_bpe
from minirepro.core.lm.corpus import CorpusConfig, build_corpus
from minirepro.core.lm.eval import BigramLM, family_accuracy, generate, perplexity
from minirepro.core.lm.hub import HubUnavailable, load_checkpoint, n_params
from minirepro.core.lm.models import (
    ModelConfig,
    build_lm,
    ffn_activations,
    layer_kv,
    load_lm,
    prefill,
    residual_stream,
    reward_model,
)
from minirepro.core.lm.train import (
    TrainConfig,
    encode_examples,
    length_batches,
    train_substrate,
)

CORPUS = build_corpus(CorpusConfig(n_train=300, n_val=40, n_test=60))
TOK = train_bpe(CORPUS.texts("train"), vocab_size=600)
SMALL = ModelConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_len=256)
OPT = dataclasses.replace(SMALL, arch="opt", n_kv_heads=4)


def _ids(text: str = "calc 3 + 4 * 2 = 4 keys a 1 ; get a = 1") -> torch.Tensor:
    return TOK([text], return_tensors="pt")["input_ids"]


@pytest.mark.parametrize("cfg", [SMALL, OPT], ids=["llama", "opt"])
def test_ffn_preactivations_equal_a_manual_forward(cfg):
    model = build_lm(cfg, TOK, seed=1)
    layers = model.get_decoder().layers
    with torch.no_grad():  # silence attention: the FFN input is then norm(residual stream)
        for layer in layers:
            attn = layer.self_attn
            out = attn.o_proj if hasattr(attn, "o_proj") else attn.out_proj
            out.weight.zero_()
            if out.bias is not None:
                out.bias.zero_()
    x = _ids()
    acts = ffn_activations(model, x)
    hs = residual_stream(model, x)
    assert len(acts) == cfg.n_layers and len(hs) == cfg.n_layers + 1
    for i, layer in enumerate(layers):
        assert acts[i].pre.shape == acts[i].hidden.shape == (1, x.shape[1], cfg.d_ff)
        assert hs[i].shape == (1, x.shape[1], cfg.d_model)
        with torch.no_grad():
            if cfg.arch == "llama":
                xin = layer.post_attention_layernorm(hs[i])
                torch.testing.assert_close(acts[i].pre, layer.mlp.gate_proj(xin))
                torch.testing.assert_close(acts[i].up, layer.mlp.up_proj(xin))
                torch.testing.assert_close(acts[i].hidden, torch.nn.functional.silu(acts[i].pre) * acts[i].up)
                nxt = hs[i] + layer.mlp.down_proj(acts[i].hidden)
            else:
                xin = layer.final_layer_norm(hs[i])
                torch.testing.assert_close(acts[i].pre, layer.fc1(xin))
                assert acts[i].up is None
                torch.testing.assert_close(acts[i].hidden, torch.relu(acts[i].pre))
                nxt = hs[i] + layer.fc2(acts[i].hidden)
        if i < cfg.n_layers - 1:  # the last hidden state is after the final norm
            torch.testing.assert_close(nxt, hs[i + 1])
    if cfg.arch == "opt":
        assert any((a.hidden == 0).float().mean() > 0.2 for a in acts)  # ReLU: exact zeros


def test_kv_cache_shapes_and_prefill_equals_full_forward():
    model = build_lm(SMALL, TOK, seed=2)
    x = _ids()
    logits, cache = prefill(model, x)
    k, v = layer_kv(cache, 1)
    assert k.shape == v.shape == (1, SMALL.n_kv_heads, x.shape[1], SMALL.d_model // SMALL.n_heads)
    torch.testing.assert_close(logits, model(input_ids=x).logits)
    with pytest.raises(IndexError):
        layer_kv(cache, 5)


def test_cache_and_no_cache_generation_agree_token_for_token():
    model = build_lm(SMALL, TOK, seed=3)
    prompts = [e.prompt for e in CORPUS.test[:12]]
    enc = TOK(prompts[:1], return_tensors="pt")
    kw = dict(max_new_tokens=12, do_sample=False, min_new_tokens=12, pad_token_id=0, eos_token_id=2)
    a = model.generate(**enc, use_cache=True, **kw)
    b = model.generate(**enc, use_cache=False, **kw)
    assert torch.equal(a, b) and a.shape[1] == enc["input_ids"].shape[1] + 12
    assert generate(model, TOK, prompts, 6, use_cache=True) == generate(
        model, TOK, prompts, 6, use_cache=False)


def test_reward_head_loads_from_the_backbone(tmp_path):
    lm = build_lm(SMALL, TOK, seed=4)
    lm.save_pretrained(tmp_path)
    rm = reward_model(tmp_path)
    assert type(rm).__name__ == "LlamaForSequenceClassification"
    lm_sd, rm_sd = lm.state_dict(), rm.state_dict()
    backbone = [k for k in rm_sd if k.startswith("model.")]
    assert backbone and all(torch.equal(rm_sd[k], lm_sd[k]) for k in backbone)
    assert rm.score.weight.shape == (1, SMALL.d_model)
    enc = TOK(["calc 1 + 2 = 3", "keys a 1 b 2 ; get b = 2"], return_tensors="pt", padding=True)
    r = rm(**enc).logits
    assert r.shape == (2, 1)
    alone = rm(**TOK(["calc 1 + 2 = 3"], return_tensors="pt")).logits
    torch.testing.assert_close(r[:1], alone)  # read at the last real token, padding ignored


def test_model_name_loads_a_local_checkpoint_and_evaluates(tmp_path):
    lm = build_lm(SMALL, TOK, seed=5)
    lm.save_pretrained(tmp_path)
    TOK.save_pretrained(tmp_path)
    model, tok = load_checkpoint(str(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), lm.state_dict().values()))
    assert tok(CORPUS.test[0].text)["input_ids"] == TOK(CORPUS.test[0].text)["input_ids"]
    acc = family_accuracy(model, tok, CORPUS.test[:20], max_new_tokens=4)
    assert set(acc) >= {"arith", "all"} and 0 <= acc["all"] <= 1
    assert perplexity(model, tok, CORPUS.texts("test")[:10]) > 1


def test_offline_hub_id_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnavailable, match="not reachable"):
        load_checkpoint("some-org/some-model")
    with pytest.raises(ValueError):
        load_checkpoint("")


def test_training_records_the_curve_and_is_reproducible():
    cfg = TrainConfig(steps=6, batch_size=4, warmup=2, eval_every=3, eval_examples=8,
                        vocab_size=600)
    a = train_substrate(CORPUS, SMALL, cfg, tokenizer=TOK)
    b = train_substrate(CORPUS, SMALL, cfg, tokenizer=TOK)
    assert len(a.curve["train_loss"]) == 6 and a.curve["eval_step"] == [0, 3, 6]
    assert a.curve == b.curve and a.tokens_seen > 0
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(),
                                                 b.model.state_dict().values()))
    assert n_params(a.model) < sum(p.numel() for p in a.model.state_dict().values())  # tied


def test_token_budget_batches_cover_an_epoch_within_the_budget():
    rng = np.random.default_rng(0)
    lens = list(rng.integers(5, 120, size=3000))
    batches = length_batches(lens, 12, np.random.default_rng(1), batch_tokens=1024)
    flat = np.concatenate(batches)
    assert len(flat) == len(set(flat.tolist())) and len(flat) >= 0.98 * len(lens)
    arr = np.asarray(lens)
    padded = [len(b) * arr[b].max() for b in batches]
    assert max(padded) <= 1024 and np.mean(padded) > 0.85 * 1024
    assert all(len(b) == 12 for b in length_batches(lens, 12, np.random.default_rng(1)))
    with pytest.raises(ValueError, match="does not fit batch_tokens"):
        length_batches([5, 300], 2, np.random.default_rng(0), batch_tokens=256)


def test_training_with_token_batches_is_reproducible():
    cfg = TrainConfig(steps=4, batch_tokens=256, warmup=1, eval_every=2, eval_examples=8,
                        vocab_size=600)
    a = train_substrate(CORPUS, SMALL, cfg, tokenizer=TOK)
    b = train_substrate(CORPUS, SMALL, cfg, tokenizer=TOK)
    assert a.curve == b.curve and 0 < a.tokens_seen <= 4 * 256


def test_bigram_baseline_beats_uniform():
    bi = BigramLM(TOK, CORPUS.texts("train"))
    nll, n = bi.nll(CORPUS.texts("test"))
    assert nll / n < torch.log(torch.tensor(float(len(TOK)))).item()
    assert len(bi.generate(["calc 1 + 2 ="], 3)) == 1


def test_bad_input(tmp_path):
    model = build_lm(SMALL, TOK)
    long = torch.ones((1, SMALL.max_len + 1), dtype=torch.long)
    with pytest.raises(ValueError, match="longer than the model's context"):
        ffn_activations(model, long)
    with pytest.raises(ValueError, match="longer than the model's context"):
        residual_stream(model, long)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        prefill(model, torch.ones(5, dtype=torch.long))
    with pytest.raises(ValueError, match="exceeds the model's context"):
        generate(model, TOK, [" ".join(["a"] * 300)], 4)
    with pytest.raises(ValueError, match="longer than max_len"):
        encode_examples(TOK, CORPUS.test[:20], max_len=8)
    with pytest.raises(ValueError, match="arch"):
        ModelConfig(arch="gpt5")
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="batch_tokens"):
        TrainConfig(batch_tokens=-1)
    with pytest.raises(OSError):
        load_lm(tmp_path / "missing")
