"""TASM chapter: compressors and TASM's parts against independent references."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import jensenshannon

from minirepro.papers.tasm import compress, data, tasm
from minirepro.papers.tasm.model import KV, ICLTransformer, attend, token_layout


def _kv(B: int, H: int, T: int, dh: int, seed: int = 0) -> KV:
    g = torch.Generator().manual_seed(seed)
    return KV(torch.randn(B, H, T, dh, generator=g, dtype=torch.float64),
              torch.randn(B, H, T, dh, generator=g, dtype=torch.float64),
              torch.zeros(B, T, dtype=torch.float64))


# --- proportional attention ----------------------------------------------------------------

@given(st.integers(0, 10_000), st.lists(st.integers(1, 4), min_size=2, max_size=5))
@settings(max_examples=30, deadline=None)
def test_proportional_attention_equals_duplicated_originals(seed, counts):
    """Merging s identical tokens into one slot of size s (log s added to its logit) gives the
    same attention output as the s duplicated originals."""
    kv = _kv(1, 2, len(counts), 3, seed)
    q = torch.randn(1, 2, 4, 3, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    rep = torch.tensor(counts)
    dup = KV(kv.k.repeat_interleave(rep, 2), kv.v.repeat_interleave(rep, 2),
             torch.zeros(1, int(rep.sum()), dtype=torch.float64))
    # merge the duplicates back through the merge routine (identical keys merge to themselves)
    starts = torch.cumsum(rep, 0) - rep
    sinks = starts[None]
    others = torch.tensor([i for i in range(int(rep.sum())) if i not in set(starts.tolist())])
    owner = torch.repeat_interleave(torch.arange(len(counts)), rep)
    if len(others):
        merged = compress.merge_into_sinks(dup, sinks, others[None], owner[others][None],
                                           torch.full((1, len(others)), 2.7, dtype=torch.float64))
    else:
        merged = dup
    assert torch.allclose(merged.size, rep[None].double())
    assert torch.allclose(merged.k, kv.k) and torch.allclose(merged.v, kv.v)
    out_merged = tasm.proportional_attention(q, merged)
    out_dup, _ = attend(q, dup.k, dup.v)
    assert torch.allclose(out_merged, out_dup, atol=1e-12)
    # without the size term the merged cache is under-weighted (differs when counts differ)
    if len(set(counts)) > 1:
        plain, _ = attend(q, merged.k, merged.v)
        assert not torch.allclose(plain, out_dup, atol=1e-6)


def test_merge_is_weighted_average_by_hand():
    kv = _kv(1, 1, 3, 2, 3)
    m = compress.merge_into_sinks(kv, torch.tensor([[0]]), torch.tensor([[1, 2]]), torch.tensor([[0, 0]]),
                                  torch.tensor([[2.0, 1.0]], dtype=torch.float64))
    expect = (kv.k[0, 0, 0] + 2 * kv.k[0, 0, 1] + kv.k[0, 0, 2]) / 4
    assert torch.allclose(m.k[0, 0, 0], expect)
    assert math.isclose(float(m.size[0, 0]), 3.0)


# --- bipartite matching -------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_bipartite_assign_matches_brute_force(seed):
    """The assignment maximises sum M_ij w_ij (each source to at most one sink, only edges
    >= threshold): compare the achieved total with exhaustive search over all assignments."""
    rng = np.random.default_rng(seed)
    S, K, thr = 4, 3, 0.2
    w = rng.uniform(-1, 1, (S, K))
    w[rng.random((S, K)) < 0.25] = -np.inf
    best = -np.inf
    for choice in itertools.product(range(-1, K), repeat=S):
        if any(c >= 0 and not (w[i, c] >= thr) for i, c in enumerate(choice)):
            continue
        best = max(best, sum(w[i, c] for i, c in enumerate(choice) if c >= 0))
    got = compress.bipartite_assign(torch.from_numpy(w)[None], thr)[0].numpy()
    total = sum(w[i, c] for i, c in enumerate(got) if c >= 0)
    assert math.isclose(total, best, abs_tol=1e-12)  # best >= 0: assigning nothing is allowed
    assert all(c < 0 or w[i, c] >= thr for i, c in enumerate(got))


def test_tome_round_merges_most_similar_pairs_brute_force():
    """One ToMe round: the r merged A tokens are those whose best B partner is most similar."""
    kv = _kv(1, 1, 8, 3, 7)
    out = compress.tome_merge(kv, 6)  # r = 2
    keys = kv.k[0, 0]
    a, b = keys[0::2], keys[1::2]
    sim = torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(b, dim=-1).T
    best = sim.max(1).values
    merged_a = set(best.argsort(descending=True)[:2].tolist())
    assert out.k.shape[2] == 6
    assert math.isclose(float(out.size.sum()), 8.0)
    kept_a = [i for i in range(4) if i not in merged_a]
    head = out.k[0, 0, : len(kept_a)]
    for i in kept_a:  # every unmerged A token is carried over unchanged (in any order)
        assert any(torch.allclose(row, a[i]) for row in head)


def test_tome_reaches_budget_and_keeps_mass():
    kv = _kv(2, 2, 40, 4, 1)
    for b in (1, 4, 13, 40):
        out = compress.tome_merge(kv, b)
        assert out.k.shape[2] == b
        assert torch.allclose(out.size.sum(1), torch.full((2,), 40.0, dtype=torch.float64))


# --- H2O and SnapKV against a direct computation ----------------------------------------------

def _causal_attention(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Direct causal softmax attention, loops only: (T, d) x (T, d) -> (T, T)."""
    T = len(q)
    a = np.zeros((T, T))
    for i in range(T):
        logits = np.array([q[i] @ k[j] / math.sqrt(q.shape[1]) for j in range(i + 1)])
        e = np.exp(logits - logits.max())
        a[i, : i + 1] = e / e.sum()
    return a


@pytest.mark.parametrize("seed", range(3))
def test_h2o_and_snapkv_selections_direct(seed):
    rng = np.random.default_rng(seed)
    T, d, b = 24, 5, 8
    q, k = rng.normal(size=(T, d)), rng.normal(size=(T, d))
    A = _causal_attention(q, k)
    _, p = attend(torch.from_numpy(q)[None, None], torch.from_numpy(k)[None, None],
                  torch.from_numpy(k)[None, None], None, torch.ones(T, T, dtype=torch.bool).tril())
    attn = p[:, 0]
    assert np.allclose(attn[0].numpy(), A)
    # H2O: last b//2 tokens, then the largest column sums among the rest
    recent = list(range(T - b // 2, T))
    col = A.sum(0)
    heavy = [j for j in np.argsort(-col, kind="stable") if j not in recent][: b - b // 2]
    assert compress.h2o_select(attn, b)[0].tolist() == sorted(recent + heavy)
    # SnapKV: window = last w tokens; scores = window's attention, averaged over 5 neighbours
    w = min(8, b // 2)
    raw = A[T - w:].sum(0)
    pooled = np.array([raw[max(0, j - 2): j + 3].mean() for j in range(T)])
    win = list(range(T - w, T))
    top = [j for j in np.argsort(-pooled, kind="stable") if j not in win][: b - w]
    assert compress.snapkv_select(attn, b)[0].tolist() == sorted(win + top)
    # SnapKV with the query as window
    qa = rng.random((1, 3, T))
    raw = qa[0].sum(0)
    pooled = np.array([raw[max(0, j - 2): j + 3].mean() for j in range(T)])
    assert compress.snapkv_query_select(torch.from_numpy(qa), b)[0].tolist() == sorted(np.argsort(-pooled)[:b])


# --- JS divergence and the gate -----------------------------------------------------------------

@given(st.integers(0, 10_000), st.integers(2, 12), st.booleans())
@settings(max_examples=40, deadline=None)
def test_js_divergence_matches_scipy(seed, n, zeros):
    rng = np.random.default_rng(seed)
    p, q = rng.random(n), rng.random(n)
    if zeros:
        p[0], q[-1] = 0.0, 0.0
    p, q = p / p.sum(), q / q.sum()
    ours = float(compress.js_divergence(torch.from_numpy(p), torch.from_numpy(q)))
    assert math.isclose(ours, jensenshannon(p, q) ** 2, rel_tol=1e-9, abs_tol=1e-12)


def test_gate_closed_equals_core_and_open_at_zero_delta():
    kv = _kv(2, 2, 10, 4, 5)
    bank = _kv(2, 2, 6, 4, 6)
    q = torch.randn(2, 2, 3, 4, dtype=torch.float64)
    mask = torch.ones(3, 10, dtype=torch.bool)
    o, p = attend(q, kv.k, kv.v, kv.logsize, mask)
    shut, frac = tasm.Gate(top_m=2, delta=1e9).expand(q, kv.k, kv.v, kv.logsize, mask, bank, o, p, 10)
    assert frac == 0.0 and torch.equal(shut, o)
    opened, frac = tasm.Gate(top_m=6, delta=0.0).expand(q, kv.k, kv.v, kv.logsize, mask, bank, o, p, 10)
    full, _ = attend(q, torch.cat([kv.k, bank.k], 2), torch.cat([kv.v, bank.v], 2))
    assert frac == 1.0 and torch.allclose(opened, full)


# --- TASM pieces ----------------------------------------------------------------------------

def test_layer_weight_schedule():
    assert math.isclose(tasm.layer_weight(0, 3), 0.1 + 0.8 / (1 + math.exp(5)))
    assert math.isclose(tasm.layer_weight(1, 3), 0.5)
    assert tasm.layer_weight(2, 3) > 0.89


def test_merge_window_forbids_far_and_cross_type_pairs():
    torch.manual_seed(0)
    model = ICLTransformer().eval()
    ep = data.make_episodes(2, 5, 1, 0)
    pre = model.prefill(ep.demo_patches, ep.demo_labels, "image-first")
    T = pre.is_label.numel()
    sinks = torch.arange(0, T, 3)[None].expand(2, -1)
    sources = torch.tensor([i for i in range(T) if i % 3])[None].expand(2, -1)
    w = tasm.merge_weights(compress.flat_keys(pre.kv[0]), pre, sinks, sources)
    for s_pos, s in enumerate(sources[0].tolist()):
        for k_pos, k in enumerate(sinks[0].tolist()):
            lab_s, lab_k = bool(pre.is_label[s]), bool(pre.is_label[k])
            near = (pre.image[s] == pre.image[k] and abs(pre.row[s] - pre.row[k]) <= 1
                    and abs(pre.col[s] - pre.col[k]) <= 1)
            allowed = (lab_s and lab_k) or (not lab_s and not lab_k and bool(near))
            assert math.isfinite(float(w[0, s_pos, k_pos])) == allowed


def test_uncompressed_cache_reproduces_full_forward():
    """The prefill + answer path with the whole cache equals the plain causal forward."""
    torch.manual_seed(0)
    model = ICLTransformer().eval()
    ep = data.make_episodes(3, 5, 1, 1)
    for fmt in data.FORMATS:
        pre = model.prefill(ep.demo_patches, ep.demo_labels, fmt)
        logits, _ = model.answer(ep.query_patches, pre.kv, fmt)
        x = torch.cat([model.embed_items(ep.demo_patches, ep.demo_labels, fmt),
                       model.embed_query(ep.query_patches, fmt)], 1)
        ref = model.head(model(x)[:, -1])
        assert torch.allclose(logits, ref, atol=1e-5)


def test_patchify_round_trip_and_episode_labels():
    imgs = np.arange(2 * 64, dtype=np.float32).reshape(2, 8, 8)
    p = data.patchify(imgs)
    assert p.shape == (2, 16, 4)
    assert p[0, 5].tolist() == [imgs[0, 2, 2], imgs[0, 2, 3], imgs[0, 3, 2], imgs[0, 3, 3]]
    ep = data.make_episodes(20, 5, 2, 3)
    for e in range(20):
        assert sorted(ep.demo_labels[e].tolist()) == sorted(list(range(5)) * 2)
        # the query's label is the label of the demos showing its class
        assert int(ep.query_label[e]) in ep.demo_labels[e].tolist()


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio", [0.0, -0.1, 1.5, float("nan")])
def test_bad_ratio_raises(ratio):
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        compress.budget(100, ratio)


def test_empty_demonstrations_raise():
    with pytest.raises(ValueError, match="empty"):
        compress.budget(0, 0.5)
    with pytest.raises(ValueError, match="empty"):
        token_layout(0, "image-first")
    with pytest.raises(ValueError):
        data.make_episodes(4, 5, 0, 0)


def test_js_shape_mismatch_raises():
    with pytest.raises(ValueError, match="same shape"):
        compress.js_divergence(torch.ones(3) / 3, torch.ones(4) / 4)


# --- the checked artifact ------------------------------------------------------------------------

def test_committed_learner_verifies_and_reproduces_its_manifest_quality():
    """The committed weights match their checksums and give the held-out accuracy the manifest
    records (same episodes, same code path as the recipe's evaluation)."""
    import json

    from minirepro.core import artifacts
    from minirepro.papers.tasm.artifact import full_context_accuracy
    from minirepro.papers.tasm.loading import NAME, load_model

    folder = artifacts.artifacts_root() / NAME
    assert artifacts.file_problems(folder) == []
    quality = json.loads((folder / "MANIFEST.json").read_text())["quality"]
    acc = full_context_accuracy(load_model(folder), 500, 999, "image-first", 5, 1)
    assert abs(acc - quality["held-out accuracy image-first"]) <= 0.01
    assert acc > 0.4  # far above chance (0.2): the learner reads the demonstrations


# --- the spread variant -----------------------------------------------------------------------

@pytest.mark.parametrize("fmt", data.FORMATS)
@pytest.mark.parametrize("radius", [0, 1, 2])
@pytest.mark.parametrize("query_last", [False, True])
def test_local_item_mask_matches_a_direct_loop(fmt, radius, query_last):
    """The spread encoder's mask, entry by entry, against the rule written as a loop."""
    from minirepro.papers.tasm.spread import local_item_mask

    n = 3
    mask = local_item_mask(n, fmt, radius, query_last)
    lab_slot = 0 if fmt == "label-first" else data.N_PATCH
    for i in range(n * data.ITEM):
        for j in range(n * data.ITEM):
            (ii, si), (ij, sj) = divmod(i, data.ITEM), divmod(j, data.ITEM)
            if ii != ij:
                want = False
            elif query_last and ii == n - 1:
                want = j <= i
            elif si == lab_slot:
                want = i == j
            elif sj == lab_slot:
                want = True
            else:
                pi, pj = (si - 1, sj - 1) if fmt == "label-first" else (si, sj)
                want = max(abs(pi // 4 - pj // 4), abs(pi % 4 - pj % 4)) <= radius
            assert bool(mask[i, j]) == want, (i, j)


def test_spread_learner_caches_only_local_views():
    """A demonstration token's cached key at the cross-item layer does not move when a patch
    outside its window changes, and the uncompressed cache reproduces the plain forward."""
    from minirepro.papers.tasm.spread import SpreadICLTransformer

    torch.manual_seed(0)
    model = SpreadICLTransformer(radius=1, n_way=5, d=32, heads=2, layers=2).eval()
    ep = data.make_episodes(2, 5, 1, 4)
    pre = model.prefill(ep.demo_patches, ep.demo_labels, "label-first")
    logits, _ = model.answer(ep.query_patches, pre.kv, "label-first")
    x = torch.cat([model.embed_items(ep.demo_patches, ep.demo_labels, "label-first"),
                   model.embed_query(ep.query_patches, "label-first")], 1)
    assert torch.allclose(logits, model.head(model(x)[:, -1]), atol=1e-5)
    moved = ep.demo_patches.clone()
    moved[:, 0, 15] += 1.0  # the bottom-right patch (row 3, col 3) of the first demonstration
    pre2 = model.prefill(moved, ep.demo_labels, "label-first")
    k1, k2 = pre.kv[1].k, pre2.kv[1].k  # (B, H, T, dh); token 1 + p is patch p of demo 0
    assert torch.equal(k1[:, :, 1 + 0], k2[:, :, 1 + 0])  # patch (0, 0): out of the window
    assert torch.equal(k1[:, :, 0], k2[:, :, 0])  # the label token sees only itself
    assert not torch.allclose(k1[:, :, 1 + 10], k2[:, :, 1 + 10])  # patch (2, 2): in the window
    assert torch.equal(k1[:, :, data.ITEM:], k2[:, :, data.ITEM:])  # other demonstrations


def test_spread_bad_input_raises():
    from minirepro.papers.tasm.spread import SpreadICLTransformer, local_item_mask

    with pytest.raises(ValueError, match="format"):
        local_item_mask(2, "label-last", 1, False)
    with pytest.raises(ValueError, match="at least one item"):
        local_item_mask(0, "label-first", 1, False)
    with pytest.raises(ValueError, match="radius"):
        local_item_mask(2, "label-first", -1, False)
    model = SpreadICLTransformer(n_way=5, d=32, heads=2, layers=2)
    with pytest.raises(ValueError, match="whole items"):
        model.layer_masks(20)
    ep = data.make_episodes(1, 5, 1, 0)
    with pytest.raises(ValueError, match="label-first"):
        model.prefill(ep.demo_patches, ep.demo_labels, "image-first")
    with pytest.raises(ValueError, match="empty"):
        model.prefill(ep.demo_patches[:, :0], ep.demo_labels[:, :0], "label-first")


def test_spread_patch_tokens_carry_their_label():
    """Each demonstration patch token's input is the ordinary embedding plus its label's embedding."""
    from minirepro.papers.tasm.spread import SpreadICLTransformer

    torch.manual_seed(1)
    model = SpreadICLTransformer(n_way=5, d=32, heads=2, layers=2)
    ep = data.make_episodes(2, 5, 1, 5)
    x = model.embed_items(ep.demo_patches, ep.demo_labels, "label-first").detach()
    base = ICLTransformer.embed_items(model, ep.demo_patches, ep.demo_labels, "label-first").detach()
    for b in range(2):
        for d in range(5):
            lab = model.lab.weight[int(ep.demo_labels[b, d])].detach()
            item = slice(d * data.ITEM, (d + 1) * data.ITEM)
            diff = x[b, item] - base[b, item]
            assert torch.allclose(diff[0], torch.zeros_like(lab))  # the label token: unchanged
            assert torch.allclose(diff[1:], lab.expand(data.N_PATCH, -1), atol=1e-6)


def test_merge_minus_prune_is_the_paired_difference():
    import pandas as pd

    from minirepro.papers.tasm.plots import merge_minus_prune

    rows = [{"format": "f", "ratio": 0.1, "seed": s, "method": m, "accuracy": a}
            for s, accs in ((0, (0.5, 0.4, 0.3, 0.1)), (1, (0.6, 0.6, 0.2, 0.5)))
            for m, a in zip(("TASM (static core)", "TASM (prune)", "ToMe", "H2O"), accs)]
    d = merge_minus_prune(pd.DataFrame(rows)).set_index(["pair", "seed"]).difference
    assert d[("TASM merge - prune", 0)] == pytest.approx(0.1)
    assert d[("TASM merge - prune", 1)] == pytest.approx(0.0)
    assert d[("ToMe - H2O", 0)] == pytest.approx(0.2)
    assert d[("ToMe - H2O", 1)] == pytest.approx(-0.3)


def test_committed_spread_learner_verifies_and_reads_its_demonstrations():
    """The spread variant's weights match their checksums, give the manifest's held-out accuracy,
    and score at chance when the demonstrations' labels are shuffled."""
    import json

    from minirepro.core import artifacts
    from minirepro.papers.tasm.artifact import full_context_accuracy
    from minirepro.papers.tasm.loading import SPREAD_NAME, load_spread_model

    folder = artifacts.artifacts_root() / SPREAD_NAME
    assert artifacts.file_problems(folder) == []
    quality = json.loads((folder / "MANIFEST.json").read_text())["quality"]
    model = load_spread_model(folder)
    acc = full_context_accuracy(model, 500, 999, "label-first", 5, 1)
    assert abs(acc - quality["held-out accuracy label-first"]) <= 0.01
    assert acc > 0.5
    ep = data.make_episodes(500, 5, 1, 999)
    shuf = data.shuffle_labels(ep, 999)
    pre = model.prefill(shuf.demo_patches, shuf.demo_labels, "label-first")
    hit = model.answer(ep.query_patches, pre.kv, "label-first")[0].argmax(-1) == ep.query_label
    assert float(hit.float().mean()) < 0.3


# --- the Latent Bank holds no token twice; the random gate; the calibrated delta ----------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bank_holds_only_dropped_originals_and_no_token_counts_twice(seed):
    """Over several batches and budgets: every bank slot is an original that is neither a Core sink
    nor merged into one (checked against the assignment recomputed by hand), the bank keeps the
    score order among the dropped sources, and Core sizes plus bank originals never exceed T."""
    torch.manual_seed(seed)
    model = ICLTransformer().eval()
    ep = data.make_episodes(6, 5, 1, seed)
    pre = model.prefill(ep.demo_patches, ep.demo_labels, "image-first")
    T = pre.is_label.numel()
    for b, bank_size in ((9, 18), (17, 34), (30, 55)):
        tc = tasm.tasm_compress(pre, b, bank_size, 0.5)
        for li, kv in enumerate(pre.kv):
            S = tasm.token_scores(kv, pre.attn[li], pre.is_label, li, len(pre.kv), 0.5)
            order = S.argsort(1, descending=True)
            sinks, sources = order[:, :b].sort(1).values, order[:, b:]
            w = tasm.merge_weights(compress.flat_keys(kv), pre, sinks, sources)
            assign = compress.bipartite_assign(w, tasm.SIM_THRESHOLD)
            bank = tc.bank[li]
            assert bank.k.shape[2] == min(bank_size, T - b)
            for e in range(kv.k.shape[0]):
                dropped = [int(t) for t, a in zip(sources[e], assign[e]) if a < 0]
                want = dropped[:bank.k.shape[2]]
                live = torch.isfinite(bank.logsize[e])
                assert int(live.sum()) == len(want)
                for slot, tok in enumerate(want):  # the bank slot is that original's key
                    assert torch.equal(bank.k[e, :, slot], kv.k[e, :, tok])
                core_mass = float(tc.core[li].size[e].sum())
                assert core_mass + len(want) <= T + 1e-4
                merged = {int(t) for t, a in zip(sources[e], assign[e]) if a >= 0}
                assert not merged & set(want) and not set(sinks[e].tolist()) & set(want)


def test_gate_ignores_empty_bank_slots():
    kv = _kv(2, 2, 10, 4, 5)
    bank = _kv(2, 2, 6, 4, 6)
    empty = KV(bank.k, bank.v, bank.logsize.clone().fill_(float("-inf")))
    q = torch.randn(2, 2, 3, 4, dtype=torch.float64)
    mask = torch.ones(3, 10, dtype=torch.bool)
    o, p = attend(q, kv.k, kv.v, kv.logsize, mask)
    out, frac = tasm.Gate(top_m=3, delta=0.0).expand(q, kv.k, kv.v, kv.logsize, mask, empty, o, p, 10)
    assert frac == 0.0 and torch.allclose(out, o)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_gate_opens_as_often_at_other_steps(seed):
    """The random gate opens exactly as many (episode, token) steps as the divergence gate, at a
    permutation of them, and where it opens its output is the expanded attention."""
    g = torch.Generator().manual_seed(seed)
    kv = _kv(8, 2, 10, 4, 100 + seed)
    bank = _kv(8, 2, 6, 4, 200 + seed)
    q = torch.randn(8, 2, 5, 4, dtype=torch.float64, generator=g)
    mask = torch.ones(5, 10, dtype=torch.bool)
    o, p = attend(q, kv.k, kv.v, kv.logsize, mask)
    log = []
    tasm.Gate(top_m=6, delta=0.0, log=log).expand(q, kv.k, kv.v, kv.logsize, mask, bank, o, p, 10)
    delta = float(torch.quantile(log[0], 0.5))
    js_out, js_frac = tasm.Gate(top_m=6, delta=delta).expand(q, kv.k, kv.v, kv.logsize, mask, bank, o, p, 10)
    rnd = tasm.Gate(top_m=6, delta=delta, shuffle=torch.Generator().manual_seed(seed))
    r_out, r_frac = rnd.expand(q, kv.k, kv.v, kv.logsize, mask, bank, o, p, 10)
    assert js_frac == r_frac and 0 < js_frac < 1
    full, _ = attend(q, torch.cat([kv.k, bank.k], 2), torch.cat([kv.v, bank.v], 2))
    opened_r = ~torch.isclose(r_out, o).all(-1).all(1)  # (B, Q): where the random gate changed the output
    opened_js = log[0].view(8, 5) > delta
    assert int(opened_r.sum()) == int(opened_js.sum())
    assert not torch.equal(opened_r, opened_js)  # other steps (for these draws)
    assert torch.allclose(r_out[opened_r.nonzero(as_tuple=True)[0], :, opened_r.nonzero(as_tuple=True)[1]],
                          full[opened_r.nonzero(as_tuple=True)[0], :, opened_r.nonzero(as_tuple=True)[1]])


def test_calibrated_delta_opens_the_gate_at_the_target_rate_on_the_tuning_episodes():
    """calibrate_delta's threshold opens the gate on gate_rate of the tuning steps; on fresh
    episodes the open rate is near it; a bad rate or a gated method without delta is refused."""
    from minirepro.papers.tasm.experiment import Config, calibrate_delta, compress_all

    torch.manual_seed(0)
    model = ICLTransformer().eval()
    for rate in (0.3, 0.7):
        cfg = Config(n_episodes=40, gate_rate=rate, tuning_seed=7)
        cal = calibrate_delta(model, cfg, 0.1)
        assert abs(cal["rate"] - rate) < 0.02
        assert cal["quantiles"][0] <= cal["delta"] <= cal["quantiles"][2]
        cfg.delta = cal["delta"]
        ep = data.make_episodes(40, 5, 1, 1234, "test")
        pre = model.prefill(ep.demo_patches, ep.demo_labels, "image-first")
        c = compress_all(model, pre, [], 0.1, cfg, 0, ("TASM",))["TASM"]
        _, info = model.answer(ep.query_patches, c["cache"], "image-first", c["bank"], c["gate"])
        assert abs(float(np.mean(info["open"])) - rate) < 0.2
    with pytest.raises(ValueError, match="gate_rate"):
        Config(gate_rate=1.0)
    with pytest.raises(ValueError, match="calibrate"):
        compress_all(model, pre, [], 0.1, Config(), 0, ("TASM",))
