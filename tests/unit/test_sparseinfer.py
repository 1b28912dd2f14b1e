"""SparseInfer: selection against brute force, slicing against masking, the batched padded
protocol against one unit at a time and a no-cache forward, the baselines, the statistics."""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from minirepro.core.lm import ModelConfig, build_lm, ffn_activations, load_model
from minirepro.papers.sparseinfer import (
    Config,
    budget,
    byte_bound,
    capture_hidden,
    core_neurons,
    decode_macs,
    dense_generate,
    draw_units,
    encode_units,
    evaluate,
    ffn_blocks,
    fit_similarity_index,
    flop_bound,
    jaccard,
    masked_ffn,
    masked_vs_sliced,
    oracle_selector,
    random_sets,
    sentence_core_neurons,
    similarity,
    sliced_ffn,
    sparse_layer_ids,
    sparseinfer_generate,
    stability,
    static_hot_sets,
    token_core_neurons,
    token_overlap_control,
)
from minirepro.papers.sparseinfer.neurons import set_mask
from minirepro.papers.sparseinfer.protocol import continuation_pass, jaccard_matrix, prompt_pass
from minirepro.papers.sparseinfer.texts import TOPIC_SENTENCES

warnings.filterwarnings("ignore", category=FutureWarning)
_, TOK = load_model("lm-smoke")


def tiny(arch: str = "llama", seed: int = 3):
    cfg = ModelConfig(arch=arch, d_model=32, n_layers=3, n_heads=2, n_kv_heads=2 if arch == "opt" else 1,
                      d_ff=64, max_len=256)
    return build_lm(cfg, TOK, seed=seed)


def prompt_ids(i: int = 3) -> torch.Tensor:
    return torch.tensor([TOK(draw_units(8, i)[i % 8].prompt)["input_ids"]])


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 12), d=st.integers(4, 40), alpha=st.floats(0.05, 1.0), gamma=st.floats(0.05, 1.0),
       relu=st.booleans(), seed=st.integers(0, 999))
@example(T=4, d=4, alpha=1.0, gamma=1.0, relu=True, seed=0)  # ties among a ReLU row's zeros (failed on CI)
def test_core_neurons_match_brute_force(T, d, alpha, gamma, relu, seed):
    h = torch.randn(T, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    if relu:
        h = h.clamp(min=0)
    sets = token_core_neurons(h, alpha)
    n_act = (h != 0).sum(1).double().mean().item()
    k_tok = max(1, min(d, int(alpha * n_act)))
    assert sets.shape == (T, k_tok)
    for t in range(T):  # each row: k_tok of the largest magnitudes of that token (ties, such as the
        # zeros of a ReLU row, may be broken either way: every chosen one is at least every other)
        mag = np.abs(h[t].numpy())
        chosen = set(sets[t].tolist())
        assert len(chosen) == k_tok
        rest = [j for j in range(d) if j not in chosen]
        assert not rest or min(mag[j] for j in chosen) >= max(mag[j] for j in rest)
    core = sentence_core_neurons(sets, h, gamma)
    k = max(1, int(gamma * d))
    counts = Counter(sets.reshape(-1).tolist())
    mass = h.abs().sum(0)
    key = {j: (-counts.get(j, 0), -mass[j].item()) for j in range(d)}
    got = set(core.tolist())
    assert len(got) == k
    others = [j for j in range(d) if j not in got]  # the k best by (count, mass), ties either way
    assert not others or max(key[j] for j in got) <= min(key[j] for j in others)


def test_core_neurons_rank_by_magnitude_and_find_the_neurons_a_prompt_uses():
    h = 0.1 * torch.ones(10, 50)
    h[:, [3, 7]] = 5.0 + torch.rand(10, 2)
    h[:, 11] = -6.0  # a strongly negative SiLU-gated activation is a used neuron
    h[:5, 20] = 9.0
    assert set(core_neurons(h, token_sparsity=0.08, sparsity=0.08).tolist()) == {3, 7, 11, 20}


def test_captured_hidden_is_the_substrate_helpers():
    for arch in ("llama", "opt"):
        model, ids = tiny(arch), prompt_ids()
        store: dict = {}
        with capture_hidden(model, store), torch.no_grad():
            model(input_ids=ids, use_cache=False)
        for i, r in enumerate(ffn_activations(model, ids)):
            assert torch.allclose(torch.cat(store[i]), r.hidden, atol=1e-6)


@pytest.mark.parametrize("arch", ["opt", "llama"])
def test_slicing_equals_masking_and_restores_the_model(arch):
    model = tiny(arch)
    ids = prompt_ids()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    modules = [id(m) for m in model.modules()]
    sets = random_sets(np.random.default_rng(0), 64, [0, 2], 0.4)
    with torch.no_grad():
        with sliced_ffn(model, sets):
            sliced = model(input_ids=ids).logits
            assert ffn_blocks(model)[0].down.in_features == budget(64, 0.4)
        masks = {i: set_mask(s, 64) for i, s in sets.items()}
        with masked_ffn(model, lambda i, h: masks[i], [0, 2]):
            masked = model(input_ids=ids).logits
        dense = model(input_ids=ids).logits
    assert torch.allclose(sliced, masked, atol=1e-5)
    assert not torch.allclose(sliced, dense, atol=1e-3)
    assert [id(m) for m in model.modules()] == modules
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_dense_generate_is_transformers_greedy_generate():
    model, ids = tiny(), prompt_ids(5)
    ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                         eos_token_id=None, pad_token_id=TOK.pad_token_id)
    assert torch.equal(dense_generate(model, ids, 12), ref)


def test_keeping_every_neuron_is_dense_decoding_token_for_token():
    model, ids = tiny(), prompt_ids(7)
    for layers in ([1], [0, 1, 2]):
        assert torch.equal(sparseinfer_generate(model, ids, 15, layers, 0.2, 1.0), dense_generate(model, ids, 15))


def test_batched_padded_continuations_equal_a_no_cache_forward_per_unit():
    model = tiny()
    units = draw_units(6, 11)
    b = encode_units(TOK, units)
    assert len(set(b.prompt_len.tolist())) > 1  # padding is exercised
    cache, _ = prompt_pass(model, b)
    logits, _ = continuation_pass(model, b, cache)
    for r in range(len(b)):
        tp, tc = int(b.prompt_len[r]), int(b.cont_len[r])
        ids = torch.cat([b.prompt_ids[r, :tp], b.cont_ids[r, :tc]])[None]
        with torch.no_grad():
            ref = model(input_ids=ids, use_cache=False).logits[0, tp:]
        assert torch.allclose(logits[r, :tc], ref, atol=1e-4)


def test_batched_masked_sets_equal_slicing_unit_by_unit():
    assert masked_vs_sliced(tiny(), TOK, draw_units(4, 2), [0, 1, 2], 0.2, 0.4) < 1e-4


def test_evaluate_dense_agrees_with_itself_and_skipping_the_ffn_hurts():
    model = tiny()
    ev = evaluate(model, TOK, draw_units(8, 5), [1], 0.2, 0.4, np.random.default_rng(0),
                  methods=("dense", "SparseInfer", "random", "per-token oracle", "FFN skipped"), chunk=4)
    assert np.all(ev["agree"]["dense"] == 1.0)
    assert ev["nll"]["dense"].shape == (8,) and np.isfinite(ev["nll_other_prompt"]).all()
    assert not np.allclose(ev["nll"]["FFN skipped"], ev["nll"]["dense"])
    with pytest.raises(ValueError, match="dense"):
        evaluate(model, TOK, draw_units(2, 5), [1], 0.2, 0.4, np.random.default_rng(0), methods=("random",))
    with pytest.raises(ValueError, match="static hot"):
        evaluate(model, TOK, draw_units(2, 5), [1], 0.2, 0.4, np.random.default_rng(0),
                 methods=("dense", "static hot"))


def test_oracle_and_static_hot_sets_are_brute_force_top_k():
    h = torch.randn(2, 5, 30, generator=torch.Generator().manual_seed(4))
    keep = oracle_selector(0.2)(0, h)
    for b in range(2):
        for t in range(5):
            assert set(torch.nonzero(keep[b, t]).flatten().tolist()) == \
                set(np.argsort(-h[b, t].abs().numpy())[:6].tolist())
    a = torch.randn(200, 30, generator=torch.Generator().manual_seed(1))
    a[:, 4] += 3
    a[:, 9] -= 4
    assert static_hot_sets([[a[:100]], [a[100:]]], [0], 2 / 30)[0].tolist() == [4, 9]


def test_similarity_index_recovers_two_groups():
    g = torch.Generator().manual_seed(0)
    calib = []
    for j in range(20):
        a = 0.1 * torch.randn(6, 40, generator=g)
        a[:, (0 if j % 2 else 20):(0 if j % 2 else 20) + 10] += 3
        calib.append([a, a])
    idx = fit_similarity_index(calib, [0, 1], n_clusters=2, token_sparsity=0.25, sparsity=0.25)
    labels = [idx.assign(c[1]) for c in calib]
    assert len(set(labels[0::2])) == 1 and len(set(labels[1::2])) == 1 and labels[0] != labels[1]
    assert set(idx.sets_for(calib[1])[0].tolist()) == set(range(10))


@settings(max_examples=30, deadline=None)
@given(st.sets(st.integers(0, 30)), st.sets(st.integers(0, 30)))
def test_jaccard_is_the_set_formula(s1, s2):
    ref = 1.0 if not (s1 | s2) else len(s1 & s2) / len(s1 | s2)
    assert jaccard(torch.tensor(sorted(s1), dtype=torch.long), torch.tensor(sorted(s2), dtype=torch.long)) == ref


def test_jaccard_matrix_is_pairwise_jaccard_averaged_over_layers():
    rng = np.random.default_rng(0)
    a = [{i: torch.as_tensor(np.sort(rng.choice(20, 7, replace=False))) for i in (1, 2)} for _ in range(4)]
    b = [{i: torch.as_tensor(np.sort(rng.choice(20, 7, replace=False))) for i in (1, 2)} for _ in range(3)]
    J = jaccard_matrix(a, b, [1, 2], 20)
    for r in range(4):
        for q in range(3):
            assert J[r, q] == pytest.approx(np.mean([jaccard(a[r][i], b[q][i]) for i in (1, 2)]))


def test_units_pairs_are_disjoint_same_topic_and_stability_partners():
    units = draw_units(20, 3)
    assert draw_units(20, 3) == units and draw_units(20, 4) != units
    for j, u in enumerate(units):
        p = units[u.partner]
        assert p.partner == j and p.topic == u.topic and not set(p.sentences) & set(u.sentences)
        bank = TOPIC_SENTENCES[u.topic]
        assert u.prompt.startswith(bank[u.sentences[0]]) and u.continuation.endswith(bank[u.sentences[-1]])
    rng = np.random.default_rng(0)
    core = [{0: torch.as_tensor(np.sort(rng.choice(64, 25, replace=False)))} for _ in units]
    s = stability(core, core, units, [0], 64, 0.4)
    assert np.all(s["self"] == 1.0)
    mc = np.mean([jaccard(*(torch.as_tensor(rng.choice(64, 25, replace=False)) for _ in range(2)))
                  for _ in range(3000)])
    assert s["random"] == pytest.approx(mc, abs=0.01) and s["other topic"].mean() == pytest.approx(mc, abs=0.05)
    g = budget(1536, 0.4) / 1536  # exercise 2 (autogradable): SmolLM2's random Jaccard
    mc1536 = np.mean([jaccard(*(torch.as_tensor(rng.choice(1536, 614, replace=False)) for _ in range(2)))
                      for _ in range(300)])
    assert g / (2 - g) == pytest.approx(mc1536, abs=0.005)


def test_similarity_and_token_control_recover_a_planted_topic_effect():
    rng = np.random.default_rng(1)
    labels = ["a"] * 6 + ["b"] * 6 + ["c"] * 6
    base = {t: rng.choice(100, 40, replace=False) for t in "abc"}
    core = []
    for lab in labels:  # 30 neurons from the topic's 40, 10 random
        own = rng.choice(base[lab], 30, replace=False)
        rest = rng.choice(np.setdiff1d(np.arange(100), own), 10, replace=False)
        core.append({0: torch.as_tensor(np.sort(np.concatenate([own, rest])))})
    sim, M, names, J = similarity(core, labels, [0], 100)
    assert (sim["within"] - sim["across"]).mean() > 0.2 and names == ["a", "b", "c"]
    assert np.all(np.diag(M) > M[0, 1])
    n = len(labels)
    tok = rng.uniform(0, 1, (n, n))
    tok = (tok + tok.T) / 2
    same = np.equal.outer(np.array(labels), np.array(labels)).astype(float)
    y = 0.2 + 0.5 * tok + 0.1 * same
    ctl = token_overlap_control(y, tok, labels)
    assert ctl["same-topic effect"] == pytest.approx(0.1) and ctl["token slope"] == pytest.approx(0.5)
    assert ctl["per unit"] == pytest.approx(np.full(n, 0.1))


def test_flop_and_byte_bounds_closed_form():
    model = tiny()
    dense, sparse = decode_macs(model, 1.0, [1], context=10)
    assert dense == sparse and flop_bound(model, 1.0, [1], 10) == 1.0 and byte_bound(model, 1.0, [1], 10) == 1.0
    d, f, v, L, kv = 32, 64, len(TOK), 3, 16  # one KV head of 16
    assert dense == L * (2 * d * d + 2 * d * kv + 3 * d * f + 2 * d * 10) + d * v
    _, sparse = decode_macs(model, 0.5, [0, 1, 2], context=10)
    assert dense - sparse == 3 * 3 * d * f / 2
    w = L * (2 * d * d + 2 * d * kv + 3 * d * f) + d * v + L * 2 * kv * 10
    assert byte_bound(model, 0.5, [0, 1, 2], 10) == pytest.approx(w / (w - 3 * 3 * d * f / 2))


def test_config_layers_and_bad_inputs():
    assert sparse_layer_ids(4, "middle") == [1, 2] and sparse_layer_ids(2, "middle") == [0, 1]
    assert Config.preset("smoke").model_name == "lm-smoke" and Config.preset("book").model_name == "smollm2-135m"
    with pytest.raises(ValueError, match="layers"):
        sparse_layer_ids(4, "odd")
    with pytest.raises(ValueError, match=r"\(T, d_ff\)"):
        token_core_neurons(torch.zeros(5))
    with pytest.raises(ValueError, match="NaN"):
        token_core_neurons(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(ValueError, match="sparsity"):
        sentence_core_neurons(torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 4), 0.0)
    model = tiny()
    with pytest.raises(ValueError, match="layer 9"):
        with sliced_ffn(model, {9: torch.arange(3)}):
            pass
    with pytest.raises(ValueError, match="index set"):
        with sliced_ffn(model, {0: torch.tensor([0, 99])}):
            pass
    assert ffn_blocks(model)[0].down.in_features == 64  # restored after the failure
    with pytest.raises(ValueError, match="layer 7"):
        with masked_ffn(model, lambda i, h: h > 0, [7]):
            pass
    for bad in (dict(sparsity=1.5), dict(n_units=5), dict(timing_repeats=3), dict(n_sweep=1)):
        with pytest.raises(ValueError):
            Config(**bad)
    with pytest.raises(ValueError, match="even"):
        draw_units(3, 0)
    with pytest.raises(ValueError, match="unknown topics"):
        draw_units(2, 0, topics=("poetry",))
    with pytest.raises(ValueError, match="FFN"):
        ffn_blocks(torch.nn.Linear(3, 3))
    with pytest.raises(ValueError, match="at least one unit"):
        encode_units(TOK, [])


def test_token_core_neurons_counts_in_float64():
    """floor(alpha * mean active count) must not fall below an exact integer by float32 rounding:
    three tokens with 4, 3 and 3 active neurons (mean 10/3) at alpha 0.6 keep 2 neurons each."""
    import torch

    from minirepro.papers.sparseinfer.neurons import token_core_neurons

    h = torch.zeros(3, 8)
    h[0, :4] = torch.tensor([4.0, 3.0, 2.0, 1.0])
    h[1, :3] = torch.tensor([3.0, 2.0, 1.0])
    h[2, 2:5] = torch.tensor([1.0, 5.0, 2.0])
    assert token_core_neurons(h, 0.6).shape == (3, 2)
