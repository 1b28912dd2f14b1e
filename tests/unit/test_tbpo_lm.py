"""Tests of TBPO's second setting: the tiny substrate LM lm-smoke with a programmatic text reward."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from minirepro.core.lm import load_substrate
from minirepro.core.lm.corpus import TOPICS
from minirepro.papers.tbpo import lm_setting as S
from minirepro.papers.tbpo import losses as L
from minirepro.papers.tbpo.analysis import paired
from minirepro.papers.tbpo.losses import method_loss

OCEAN = sorted(S.topic_vocabulary("ocean"))
OTHER = sorted(S.topic_vocabulary("forest") - S.topic_vocabulary("ocean"))


@pytest.fixture(scope="module")
def lm():
    """The shipped smoke substrate (artifact lm-smoke; loaded, never trained)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_substrate("smoke")
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def prompt_ids(lm):
    return S.encode_prompts(lm.tokenizer, S.corpus_prompts(lm, 4))


def _cfg(**kw):
    base = dict(n_pairs=64, steps=3, n_eval=8, eval_every=3, n_seeds=1)
    base.update(kw)
    return S.LMSettingConfig.preset("smoke", **base)


# ---------------------------------------------------------------- the reward

def test_reward_on_known_texts():
    v = S.topic_vocabulary("ocean")
    assert {"wave", "whale", "salty", "swims"} <= v and "oak" not in v
    assert S.text_reward(["the", "salty", "wave", "swims"], v, 0.2) == pytest.approx(3 - 0.8)
    assert S.text_reward([], v, 0.2) == 0.0
    assert S.text_reward(["the", "oak", "."], v, 0.5) == pytest.approx(-1.5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(OCEAN + OTHER + ["the", "."]), max_size=8),
       st.sampled_from(OCEAN), st.sampled_from(OTHER), st.floats(0.0, 1.0))
def test_reward_counts_topic_words_minus_length(words, ocean_word, other_word, lp):
    v = S.topic_vocabulary("ocean")
    r = S.text_reward(words, v, lp)
    assert r == pytest.approx(sum(w in OCEAN for w in words) - lp * len(words))
    assert S.text_reward(words + [ocean_word], v, lp) == pytest.approx(r + 1 - lp)
    assert S.text_reward(words + [other_word], v, lp) == pytest.approx(r - lp)


def test_every_topic_has_a_vocabulary_and_bad_inputs_raise():
    for t in TOPICS:
        assert len(S.topic_vocabulary(t)) >= 15
    with pytest.raises(ValueError, match="unknown topic"):
        S.topic_vocabulary("jungle")
    with pytest.raises(ValueError, match="topic"):
        S.LMSettingConfig(topic="jungle")
    with pytest.raises(ValueError, match="model_name"):
        S.LMSettingConfig(model_name="")
    with pytest.raises(ValueError, match="unknown methods"):
        S.LMSettingConfig(methods=("DPO", "PPO"))
    with pytest.raises(ValueError, match="beta"):
        S.LMSettingConfig(beta=0.0)
    with pytest.raises(ValueError, match="steps"):
        S.LMSettingConfig(steps=0)


# ---------------------------------------------------------------- prompts, sampling

def test_corpus_prompts_are_distinct_openings_of_equal_length(lm, prompt_ids):
    prompts = S.corpus_prompts(lm, 4)
    assert len(set(prompts)) == 4 and all(p.startswith("text : ") for p in prompts)
    assert all(any(e.prompt.startswith(p + " ") for e in lm.corpus.val) for p in prompts)
    assert prompt_ids.shape == (4, 4) and (prompt_ids[:, 0] == lm.tokenizer.bos_token_id).all()
    with pytest.raises(ValueError, match="equal token lengths"):
        S.encode_prompts(lm.tokenizer, ["text : the", "text : we saw the"])
    with pytest.raises(ValueError, match="distinct text openings"):
        S.corpus_prompts(lm, 10_000)


def _sample_nocache(*args, **kw):
    return S.sample(*args, use_cache=False, **kw)


class _Fixed(torch.nn.Module):
    """A stub LM whose next-token distribution is one fixed vector (tests the sampler)."""

    def __init__(self, probs):
        super().__init__()
        self.logits = torch.log(torch.as_tensor(probs, dtype=torch.float32))

    def forward(self, input_ids):
        class Out:
            pass
        o = Out()
        o.logits = self.logits.expand(*input_ids.shape, -1)
        return o


def test_sampler_lengths_and_padding():  # the stub has no KV cache: re-read the prefix
    x = torch.ones(500, 2, dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    y, n = _sample_nocache(_Fixed([0.0, 0.0, 1.0, 0.0]), x, 5, eos=2, pad=0, generator=g)  # always EOS
    assert (n == 1).all() and (y[:, 0] == 2).all() and (y[:, 1:] == 0).all()
    y, n = _sample_nocache(_Fixed([0.0, 0.0, 0.0, 1.0]), x, 5, eos=2, pad=0, generator=g)  # never EOS
    assert (n == 5).all() and (y == 3).all()
    y, n = _sample_nocache(_Fixed([0.0, 0.0, 0.25, 0.75]), x, 6, eos=2, pad=0, generator=g)
    for row, ln in zip(y.tolist(), n.tolist()):
        assert all(t == 3 for t in row[:ln - 1]) and (ln == 6 or row[ln - 1] == 2)
        assert all(t == 0 for t in row[ln:])
    # lengths are geometric(0.25) truncated at 6: mean = sum_{k<6} 0.75^k
    assert n.float().mean().item() == pytest.approx(sum(0.75 ** k for k in range(6)), abs=0.25)
    with pytest.raises(ValueError, match="prompt_ids"):
        _sample_nocache(_Fixed([0.5, 0.5]), torch.ones(3, dtype=torch.long), 2, 1, 0, g)


# ---------------------------------------------------------------- token statistics

def test_stats_vanish_at_the_reference_and_sum_to_the_sequence_log_ratio(lm, prompt_ids):
    g = torch.Generator().manual_seed(1)
    x = prompt_ids[[0, 1, 2, 3, 0, 1]]
    y, n = S.sample(lm.model, x, 8, lm.tokenizer.eos_token_id, lm.tokenizer.pad_token_id, g)
    pol = S.LMPolicy(lm.model)
    s = S.lm_token_stats(pol, S.reference_logprobs(lm.model, x, y), x, y, n)
    for k in ("lr", "kl_pi_ref", "kl_ref_pi"):
        assert s[k].abs().max().item() < 1e-5
    with torch.no_grad():  # perturb the policy; compare with a one-sequence-at-a-time brute force
        for p in pol.lm.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    s = S.lm_token_stats(pol, S.reference_logprobs(lm.model, x, y), x, y, n)
    assert (s["kl_pi_ref"] >= -1e-6).all() and (s["kl_ref_pi"] >= -1e-6).all()
    for i in range(x.shape[0]):
        ids = torch.cat([x[i], y[i, :n[i]]])[None]
        with torch.no_grad():
            lp = torch.log_softmax(pol.lm(input_ids=ids).logits[0, :-1], -1)
            lr_ = torch.log_softmax(lm.model(input_ids=ids).logits[0, :-1], -1)
        P = x.shape[1]
        tgt = ids[0, 1:]
        brute = (lp - lr_).gather(-1, tgt[:, None]).squeeze(-1)[P - 1:].sum()
        assert s["lr"][i].sum().item() == pytest.approx(brute.item(), abs=1e-4)
    # tokens after a response's end change nothing (causal model, masks)
    y2 = y.clone()
    for i, ln in enumerate(n.tolist()):
        y2[i, ln:] = 7
    s2 = S.lm_token_stats(pol, S.reference_logprobs(lm.model, x, y2), x, y2, n)
    for k in ("lr", "kl_pi_ref", "v", "mask"):
        assert torch.allclose(s[k], s2[k], atol=1e-6)
    with pytest.raises(ValueError, match="expected prompt_ids"):
        S.lm_token_stats(pol, lm.model, x, y, n[:-1])


@pytest.mark.parametrize("method", ["DPO", "TBPO-A", "TBPO-Q"])
def test_identical_pair_gives_zero_gradient(lm, prompt_ids, method):
    g = torch.Generator().manual_seed(2)
    x = prompt_ids[[0, 1, 2]]
    y, n = S.sample(lm.model, x, 8, lm.tokenizer.eos_token_id, lm.tokenizer.pad_token_id, g)
    pol = S.LMPolicy(lm.model)
    with torch.no_grad():
        for p in pol.lm.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
        pol.value.weight.normal_(generator=g)
    xx, yy = torch.cat([x, x]), torch.cat([y, y])
    s = S.lm_token_stats(pol, S.reference_logprobs(lm.model, xx, yy), xx, yy, torch.cat([n, n]))
    loss = method_loss(method, {k: v[:3] for k, v in s.items()}, {k: v[3:] for k, v in s.items()},
                       _cfg())
    assert loss.item() == pytest.approx(math.log(2), abs=1e-6)
    params = [p for p in pol.parameters()]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    assert max(float(gr.abs().max()) for gr in grads if gr is not None) < 1e-6


# ---------------------------------------------------------------- preferences, training

def test_preferences_follow_bradley_terry_on_the_true_reward(lm, prompt_ids):
    cfg = _cfg(n_pairs=800)
    p = S.make_lm_preferences(lm, prompt_ids, cfg, seed=3)
    assert p["chosen"].shape == (800, cfg.max_new_tokens)
    assert (p["prompt"] == torch.arange(800) % 4).all()
    rc = S.rewards(lm.tokenizer, p["chosen"], p["len_chosen"], cfg)
    rr = S.rewards(lm.tokenizer, p["rejected"], p["len_rejected"], cfg)
    assert np.allclose(rc, p["r_chosen"].numpy(), atol=1e-5) and np.allclose(rr, p["r_rejected"].numpy(), atol=1e-5)
    d = rc - rr
    diff = d != 0
    assert diff.sum() > 200
    # P(the higher-reward response is chosen) = sigmoid(|d|) under Bradley-Terry
    observed = float((d[diff] > 0).mean())
    expected = float((1 / (1 + np.exp(-np.abs(d[diff])))).mean())
    assert observed == pytest.approx(expected, abs=4 / math.sqrt(diff.sum()))
    again = S.make_lm_preferences(lm, prompt_ids, cfg, seed=3)
    assert all(torch.equal(p[k], again[k]) for k in p)


def test_training_is_deterministic_and_starts_at_the_reference(lm, prompt_ids):
    cfg = _cfg()
    prefs = S.make_lm_preferences(lm, prompt_ids, cfg, seed=0)
    a = S.train_lm_method("TBPO-A", lm, prompt_ids, prefs, cfg, seed=0)
    b = S.train_lm_method("TBPO-A", lm, prompt_ids, prefs, cfg, seed=0)
    assert a.equals(b)
    assert list(a["step"]) == [0, 3]
    assert a.loc[0, "kl_ref"] == pytest.approx(0.0, abs=1e-5)
    assert a.loc[1, "kl_ref"] > 1e-3  # it moved
    fin = S.lm_final(a).set_index("method")
    assert fin.loc["reference", "kl_ref"] == pytest.approx(0.0, abs=1e-5)
    assert fin.loc["TBPO-A", "reward"] == pytest.approx(a.loc[1, "reward"])
    with pytest.raises(ValueError, match="unknown method"):
        S.train_lm_method("PPO", lm, prompt_ids, prefs, cfg, seed=0)


# ---------------------------------------------------------------- substrate specifics

def test_reference_logprobs_match_a_direct_forward_pass(lm, prompt_ids):
    """The stored reference log-probs are those of the loaded model, one sequence at a time."""
    g = torch.Generator().manual_seed(5)
    x = prompt_ids[[0, 1, 2, 3]]
    y, n = S.sample(lm.model, x, 6, lm.tokenizer.eos_token_id, lm.tokenizer.pad_token_id, g)
    lref = S.reference_logprobs(lm.model, x, y)
    assert lref.shape == (4, 6, lm.model.config.vocab_size)
    P = x.shape[1]
    for i in range(4):
        for t in range(int(n[i])):
            ids = torch.cat([x[i], y[i, :t]])[None]
            with torch.no_grad():
                direct = torch.log_softmax(lm.model(input_ids=ids).logits[0, -1].float(), -1)
            assert torch.allclose(lref[i, t], direct, atol=1e-4), (i, t, P)


def test_kv_cache_sampling_equals_rereading_the_prefix(lm, prompt_ids):
    x = prompt_ids[[0, 1, 2, 3, 0, 1]]
    a = S.sample(lm.model, x, 8, lm.tokenizer.eos_token_id, lm.tokenizer.pad_token_id,
                 torch.Generator().manual_seed(9), use_cache=True)
    b = S.sample(lm.model, x, 8, lm.tokenizer.eos_token_id, lm.tokenizer.pad_token_id,
                 torch.Generator().manual_seed(9), use_cache=False)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _brute_logratio(pol, ref, x, y, n):
    """Per-token log pi/pi_ref of one response, each token from its own forward pass."""
    out = []
    for t in range(int(n)):
        ids = torch.cat([x, y[:t]])[None]
        lp = torch.log_softmax(pol.lm(input_ids=ids).logits[0, -1].float(), -1)
        with torch.no_grad():
            lr_ = torch.log_softmax(ref(input_ids=ids).logits[0, -1].float(), -1)
        out.append((lp - lr_)[y[t]])
    return out


@pytest.mark.parametrize("method", ["DPO", "TBPO-A"])
def test_losses_on_the_lm_equal_a_brute_force_computation(lm, prompt_ids, method):
    """DPO (Eq. tbpo-eq-dpo) and TBPO-A (Eq. tbpo-eq-token) on a tiny batch of real pairs, written
    out token by token with one forward pass per prefix, equal the batched training loss."""
    cfg = _cfg(n_pairs=3, beta=0.3)
    prefs = S.make_lm_preferences(lm, prompt_ids, cfg, seed=4)
    pol = S.LMPolicy(lm.model)
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for p in pol.lm.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    x = prompt_ids[prefs["prompt"]]
    yy, nn_ = torch.cat([prefs["chosen"], prefs["rejected"]]), torch.cat([prefs["len_chosen"], prefs["len_rejected"]])
    s = S.lm_token_stats(pol, S.reference_logprobs(lm.model, torch.cat([x, x]), yy), torch.cat([x, x]), yy, nn_)
    batched = method_loss(method, {k: v[:3] for k, v in s.items()}, {k: v[3:] for k, v in s.items()}, cfg)
    b, T = cfg.beta, cfg.max_new_tokens
    per_pair = []
    with torch.no_grad():
        for i in range(3):
            w = _brute_logratio(pol, lm.model, x[i], prefs["chosen"][i], prefs["len_chosen"][i])
            lo = _brute_logratio(pol, lm.model, x[i], prefs["rejected"][i], prefs["len_rejected"][i])
            if method == "DPO":
                per_pair.append(-F.logsigmoid(b * (sum(w) - sum(lo))))
                continue
            def q(vals, kls):  # q_t = beta (log ratio - KL(pi||pi_ref)(s_t)); 0 after the end
                return [b * (v - k) for v, k in zip(vals, kls)] + [torch.tensor(0.0)] * (T - len(vals))
            qw = q(w, s["kl_pi_ref"][i][: len(w)])
            ql = q(lo, s["kl_pi_ref"][3 + i][: len(lo)])
            cover = max(len(w), len(lo))  # positions up to the longer response's end
            per_pair.append(sum(L.bregman_ell(-(a - c)[None], "logistic")[0]
                                for a, c in zip(qw[:cover], ql[:cover])) / cover)
    brute = torch.stack(per_pair).mean()
    assert batched.item() == pytest.approx(brute.item(), abs=2e-5)


def test_paired_aligns_values_by_seed():
    import pandas as pd

    frame = pd.DataFrame({"method": ["DPO", "DPO", "TBPO-A", "TBPO-A"], "seed": [11, 10, 10, 11],
                          "reward": [1.0, 2.0, 3.0, 5.0]})
    d = paired(frame, "reward", "TBPO-A")
    assert d["method"].tolist() == [3.0, 5.0] and d["baseline"].tolist() == [2.0, 1.0]
    with pytest.raises(ValueError, match="not in the table"):
        paired(frame, "reward", "TBPO-Q")


def test_model_name_runs_a_saved_checkpoint_offline(lm, tmp_path, monkeypatch):
    """A model saved with save_pretrained into a folder runs through the setting via model_name,
    with the hub unreachable, and gives the same evaluations as the shipped model it copies."""
    lm.model.save_pretrained(tmp_path)
    lm.tokenizer.save_pretrained(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = _cfg(n_pairs=16, steps=2, n_eval=4, eval_every=2, n_prompts=2, model_name=str(tmp_path), seed=3)
    ex = S.run_lm_experiment(cfg)
    assert ex.sub.model_name == str(tmp_path)
    assert sorted(ex.evals["step"].unique()) == [0, 2] and set(ex.evals["method"]) == set(cfg.methods)
    shipped = S.run_lm_experiment(_cfg(n_pairs=16, steps=2, n_eval=4, eval_every=2, n_prompts=2, seed=3))
    cols = ["reward", "kl_ref", "length"]
    np.testing.assert_allclose(ex.evals[cols].to_numpy(), shipped.evals[cols].to_numpy(), rtol=1e-5, atol=1e-6)


def test_model_name_is_a_config_field():
    from minirepro.papers.tbpo import Config

    assert Config.preset("smoke").model_name is None
    assert S.LMSettingConfig.preset("smoke", model_name="/x").model_name == "/x"
    assert S.LMSettingConfig.preset("book").model_name == "lm-smoke"  # the same model at every scale


def test_chapter_config_reads_only_the_shared_parameters():
    """The page's parameters cell gives the LM config: scale, seed, n_seeds, tbpo_member and
    model_name pass through (None: the preset's); the token-MDP parameters do not."""
    params = {"scale": "book", "seed": 10, "n_seeds": None, "steps": 999, "n_pairs": 7, "beta": 5.0,
              "lr": 1.0, "tbpo_member": "logistic", "model_name": None}
    cfg = S.chapter_config(params)
    book = S.LMSettingConfig.preset("book")
    assert cfg.seeds == [10, 11, 12] and cfg.model_name == "lm-smoke"
    assert (cfg.steps, cfg.n_pairs, cfg.beta, cfg.lr) == (book.steps, book.n_pairs, book.beta, book.lr)
    cfg = S.chapter_config({**params, "scale": "smoke", "n_seeds": 2, "tbpo_member": "kliep", "model_name": "/m"})
    assert cfg.seeds == [10, 11] and cfg.tbpo_member == "kliep" and cfg.model_name == "/m"
    assert cfg.n_pairs == S.LMSettingConfig.preset("smoke").n_pairs
    with pytest.raises(KeyError):
        S.chapter_config({"seed": 1})
    with pytest.raises(ValueError, match="tbpo_member"):
        S.chapter_config({**params, "tbpo_member": "hinge"})


def test_topic_word_rate_counts_topic_words_per_response(lm, prompt_ids):
    cfg = _cfg(n_pairs=40)
    prefs = S.make_lm_preferences(lm, prompt_ids, cfg, seed=7)
    vocab = S.topic_vocabulary("ocean")
    counts = []  # brute force: decode each response on its own
    for key, lk in (("chosen", "len_chosen"), ("rejected", "len_rejected")):
        for row, n in zip(prefs[key], prefs[lk]):
            words = lm.tokenizer.decode(row[: int(n)].tolist(), skip_special_tokens=True).split()
            counts.append(sum(w in vocab for w in words))
    assert S.topic_word_rate(lm.tokenizer, prefs, cfg) == pytest.approx(float(np.mean(counts)))
    # a pair whose responses are known words: 2 ocean words in 2 responses
    ids = lm.tokenizer(" whale wave oak", add_special_tokens=False)["input_ids"]
    row = torch.tensor([ids + [lm.tokenizer.pad_token_id] * 2])
    known = {"chosen": row, "rejected": row, "len_chosen": torch.tensor([len(ids)]),
             "len_rejected": torch.tensor([len(ids)])}
    assert S.topic_word_rate(lm.tokenizer, known, cfg) == pytest.approx(2.0)
    empty = {k: v[:0] for k, v in known.items()}
    with pytest.raises(ValueError, match="no responses"):
        S.topic_word_rate(lm.tokenizer, empty, cfg)
