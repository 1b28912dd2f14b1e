"""The shipped substrate: loads from its artifact, matches its build, model_name by path."""

from __future__ import annotations

import pytest
import torch

from minirepro.core.lm.bpe import tokenizer_digest
from minirepro.core.lm.corpus import FAMILIES
from minirepro.core.lm.eval import family_accuracy, generate
from minirepro.core.lm.hub import HubUnavailable
from minirepro.core.lm.substrate import load_substrate


@pytest.fixture(scope="module")
def smoke():
    return load_substrate("smoke")


def test_smoke_substrate_is_the_model_the_recipe_evaluated(smoke):
    assert type(smoke.model).__name__ == "LlamaForCausalLM"
    assert smoke.model.config.max_position_embeddings == 256
    assert tokenizer_digest(smoke.tokenizer) == smoke.eval["tokenizer_sha256"]
    # the corpus rebuilt here is byte-identical to the one the build evaluated on
    assert smoke.corpus.fingerprint(("val", "test")) == smoke.eval["val_fingerprint"]
    assert set(smoke.eval["test_acc"]) == {*FAMILIES, "all"}
    assert len(smoke.curve["train_loss"]) == 300 and smoke.curve["eval_step"][-1] == 300
    assert smoke.curve["val_loss"][-1] < smoke.curve["val_loss"][0]


def test_cache_and_no_cache_generation_agree_on_the_trained_model(smoke):
    prompts = [e.prompt for e in smoke.corpus.test[:30]]
    assert generate(smoke.model, smoke.tokenizer, prompts, 8, use_cache=True) == generate(
        smoke.model, smoke.tokenizer, prompts, 8, use_cache=False)
    enc = smoke.tokenizer([smoke.corpus.test[5].prompt], return_tensors="pt")
    kw = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0)
    assert torch.equal(smoke.model.generate(**enc, use_cache=True, **kw),
                       smoke.model.generate(**enc, use_cache=False, **kw))


def test_model_name_loads_a_saved_checkpoint_through_the_same_path(smoke, tmp_path):
    smoke.model.save_pretrained(tmp_path)
    smoke.tokenizer.save_pretrained(tmp_path)
    other = load_substrate("smoke", model_name=str(tmp_path))
    assert other.model_name == str(tmp_path) and other.corpus.config == smoke.corpus.config
    x = smoke.tokenizer([smoke.corpus.test[0].prompt], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(other.model(input_ids=x).logits, smoke.model(input_ids=x).logits)
    acc = family_accuracy(other.model, other.tokenizer, other.corpus.test[:40])
    ref = family_accuracy(smoke.model, smoke.tokenizer, smoke.corpus.test[:40])
    assert acc == ref


def test_bad_input(monkeypatch):
    with pytest.raises(ValueError, match="unknown substrate preset 'huge'; presets: book, smoke"):
        load_substrate("huge")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnavailable, match="not reachable"):
        load_substrate("smoke", model_name="some-org/some-model")
