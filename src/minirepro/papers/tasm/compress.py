"""Compressors of the demonstrations' KV cache (query-agnostic unless said otherwise).

Every compressor maps one layer's cache of T demonstration tokens to a budget of
``b = ceil(ratio * T)`` slots, per layer, shared by the heads. Merged slots carry their size
``s`` (how many originals they stand for) as ``log s``, which :func:`minirepro.papers.tasm.model.attend`
adds to the attention logits (proportional attention).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from minirepro.papers.tasm.model import KV


def check_ratio(ratio: float) -> float:
    """[reconstruction] The compression ratio's check: a kept fraction in (0, 1]; anything else raises ``ValueError``."""
    r = float(ratio)
    if not (0.0 < r <= 1.0) or math.isnan(r):
        raise ValueError(f"the compression ratio (kept fraction) must be in (0, 1], got {ratio!r}")
    return r


def budget(n_tokens: int, ratio: float) -> int:
    """[reconstruction] The KV budget b: slots kept from ``n_tokens`` at kept fraction ``ratio``: ceil(ratio * T), at least 1."""
    if n_tokens < 1:
        raise ValueError("the demonstration set is empty: there is no cache to compress")
    return max(1, math.ceil(check_ratio(ratio) * n_tokens - 1e-9))


def flat_keys(kv: KV) -> torch.Tensor:
    """Eq. (tasm-eq-merge), its inputs: keys concatenated over heads: (B, H, T, dh) -> (B, T, H*dh)."""
    B, H, T, dh = kv.k.shape
    return kv.k.transpose(1, 2).reshape(B, T, H * dh)


def flat_values(kv: KV) -> torch.Tensor:
    """Eq. (tasm-eq-merge), its inputs: values concatenated over heads: (B, H, T, dh) -> (B, T, H*dh)."""
    B, H, T, dh = kv.v.shape
    return kv.v.transpose(1, 2).reshape(B, T, H * dh)


def gather(kv: KV, idx: torch.Tensor) -> KV:
    """[reconstruction] Pruning, the common last step: the slots ``idx`` (B, M) of a cache."""
    i4 = idx[:, None, :, None].expand(-1, kv.k.shape[1], -1, kv.k.shape[3])
    return KV(kv.k.gather(2, i4), kv.v.gather(2, i4), kv.logsize.gather(1, idx))


def js_divergence(p: torch.Tensor, q: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Eq. (tasm-eq-gate), its trigger: Jensen-Shannon divergence (natural log) between distributions along ``dim``:
    JS = 1/2 KL(p || m) + 1/2 KL(q || m), m = (p + q) / 2; zero entries contribute 0."""
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {tuple(p.shape)} and {tuple(q.shape)}")
    m = 0.5 * (p + q)

    def kl(a: torch.Tensor) -> torch.Tensor:
        return torch.where(a > 0, a * (torch.log(a.clamp_min(1e-300)) - torch.log(m.clamp_min(1e-300))),
                           torch.zeros_like(a)).sum(dim)

    return 0.5 * kl(p) + 0.5 * kl(q)


# --- pruning baselines -------------------------------------------------------------------

def random_select(batch: int, n_tokens: int, b: int, gen: torch.Generator) -> torch.Tensor:
    """[reconstruction] Baseline, random pruning: ``b`` token indices per episode, uniformly without replacement (B, b)."""
    return torch.rand(batch, n_tokens, generator=gen).argsort(1)[:, :b].sort(1).values


def h2o_select(attn: torch.Tensor, b: int, recent: int | None = None) -> torch.Tensor:
    """[reconstruction] Baseline H2O (heavy hitters + recent window): keep the last ``recent`` tokens (default b // 2) and
    the ``b - recent`` others with the largest accumulated attention received, column sums of the
    prefill's causal attention ``attn`` (B, T, T) (summed over heads). Returns indices (B, b)."""
    B, T, _ = attn.shape
    recent = b // 2 if recent is None else recent
    score = attn.sum(1).clone()
    score[:, T - recent:] = float("inf")
    return score.topk(b, dim=1).indices.sort(1).values


def pool1d(score: torch.Tensor, kernel: int) -> torch.Tensor:
    """[reconstruction] Baseline SnapKV, its pooling: average over a window of ``kernel`` neighbouring tokens (B, T) -> (B, T)."""
    return F.avg_pool1d(score[:, None], kernel, stride=1, padding=kernel // 2,
                        count_include_pad=False)[:, 0]


def snapkv_select(attn: torch.Tensor, b: int, window: int = 8, kernel: int = 5) -> torch.Tensor:
    """[reconstruction] Baseline SnapKV without the query: the last ``w = min(window, b // 2)`` demonstration tokens are the
    observation window; the other tokens are scored by the window's attention to them (summed
    over the window's queries and the heads), pooled over ``kernel`` neighbours; keep the window
    and the top ``b - w``. ``attn`` (B, T, T). Returns indices (B, b)."""
    B, T, _ = attn.shape
    w = min(window, b // 2)
    score = pool1d(attn[:, T - w:, :].sum(1), kernel) if w > 0 else pool1d(attn.sum(1), kernel)
    if w > 0:
        score[:, T - w:] = float("inf")
    return score.topk(b, dim=1).indices.sort(1).values


def snapkv_query_select(query_attn: torch.Tensor, b: int, kernel: int = 5) -> torch.Tensor:
    """[reconstruction] Baseline SnapKV with the query as its observation window (NOT comparable: it sees the query before
    compressing): score = the query tokens' attention to each demonstration token (B, Q, T), summed
    and pooled; keep the top ``b``. Returns indices (B, b)."""
    return pool1d(query_attn.sum(1), kernel).topk(b, dim=1).indices.sort(1).values


# --- merging -----------------------------------------------------------------------------

def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eq. (tasm-eq-merge), the similarity: cosine similarities (B, S, K) between rows of a (B, S, d) and b (B, K, d)."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).transpose(1, 2)


def bipartite_assign(w: torch.Tensor, threshold: float = -math.inf) -> torch.Tensor:
    """Eq. (tasm-eq-merge): the assignment M maximising sum M_ij w_ij with every source i assigned to at most
    one sink j (sinks take any number), only on edges with w_ij >= threshold (w = -inf: forbidden).
    The maximum is each source's best sink when that edge passes the threshold. w (B, S, K)
    -> sink index per source (B, S), -1 for unassigned."""
    if w.shape[-1] == 0:
        return torch.full(w.shape[:-1], -1, dtype=torch.long)
    best, j = w.max(-1)
    ok = torch.isfinite(best) & (best >= threshold)
    return torch.where(ok, j, torch.full_like(j, -1))


def merge_into_sinks(kv: KV, sinks: torch.Tensor, sources: torch.Tensor, assign: torch.Tensor,
                     weight: torch.Tensor) -> KV:
    """Eq. (tasm-eq-merge): merge sources into their sinks: k_j <- (s_j k_j + sum_i M_ij c_i k_i) / (s_j + sum_i M_ij c_i),
    values alike, size s_j <- s_j + sum_i M_ij s_i. ``sinks`` (B, K) and ``sources`` (B, S) index
    the cache, ``assign`` (B, S) a sink position in 0..K-1 or -1, ``weight`` (B, S) each source's
    coefficient c_i before its size (TASM: e^{w_ij}; ToMe: 1). Returns the K merged sinks."""
    out = gather(kv, sinks)
    src = gather(kv, sources)
    s_sink, s_src = out.size, src.size
    on = (assign >= 0).float()
    c = weight * on * s_src  # (B, S)
    tgt = assign.clamp_min(0)
    H, dh = kv.k.shape[1], kv.k.shape[3]
    den = s_sink.scatter_add(1, tgt, c)  # (B, K)
    idx4 = tgt[:, None, :, None].expand(-1, H, -1, dh)
    k = (out.k * s_sink[:, None, :, None]).scatter_add(2, idx4, src.k * c[:, None, :, None])
    v = (out.v * s_sink[:, None, :, None]).scatter_add(2, idx4, src.v * c[:, None, :, None])
    size = s_sink.scatter_add(1, tgt, s_src * on)
    return KV(k / den[:, None, :, None], v / den[:, None, :, None], size.log())


def tome_merge(kv: KV, b: int) -> KV:
    """[reconstruction] Baseline ToMe: bipartite soft matching, repeated until ``b`` slots remain: split the slots
    alternately into A and B; each A slot's best B partner by key cosine; merge the
    ``r = min(M - b, |A|)`` most similar A slots into their partners, size-weighted averages."""
    cur = kv
    while cur.k.shape[2] > b:
        M = cur.k.shape[2]
        a_idx, b_idx = torch.arange(0, M, 2), torch.arange(1, M, 2)
        keys = flat_keys(cur)
        sim = cosine(keys[:, a_idx], keys[:, b_idx])  # (B, |A|, |B|)
        best, partner = sim.max(-1)
        r = min(M - b, len(a_idx))
        order = best.argsort(1, descending=True)
        merged, kept = order[:, :r], order[:, r:]
        B = cur.k.shape[0]
        sinks = b_idx.expand(B, -1)
        new_b = merge_into_sinks(cur, sinks, a_idx[merged], partner.gather(1, merged), torch.ones(B, r))
        rest = gather(cur, a_idx[kept])
        cur = KV(torch.cat([rest.k, new_b.k], 2), torch.cat([rest.v, new_b.v], 2),
                 torch.cat([rest.logsize, new_b.logsize], 1))
    return cur
