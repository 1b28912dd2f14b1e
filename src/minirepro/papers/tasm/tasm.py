"""TASM: task-vector scoring, windowed semantic merging, Core Memory + Latent Bank, and the
query-adaptive gate. Equations follow a third-party summary of the paper; what the summary
leaves open is marked [reconstruction]."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minirepro.papers.tasm.compress import (
    bipartite_assign,
    cosine,
    flat_keys,
    flat_values,
    gather,
    js_divergence,
    merge_into_sinks,
)
from minirepro.papers.tasm.model import KV, Prefill, attend

ALPHA, BETA, KAPPA = 0.1, 0.8, 10.0  # the summary's lambda(l) schedule
SIM_THRESHOLD = 0.5  # the summary's merge similarity threshold
DELTA = 0.002  # the summary's gate threshold


def task_vector(keys: torch.Tensor, is_label: torch.Tensor) -> torch.Tensor:
    """Eq. (tasm-eq-tau): tau = normalise(mu_A - mu_Q), the centroid of the answer (label) keys minus that of
    the question (image patch) keys. keys (B, T, d), is_label (T,) -> (B, d). [reconstruction:
    in key space, heads concatenated]"""
    if not bool(is_label.any()) or bool(is_label.all()):
        raise ValueError("the task vector needs both label and image tokens")
    return F.normalize(keys[:, is_label].mean(1) - keys[:, ~is_label].mean(1), dim=-1)


def layer_weight(layer: int, n_layers: int) -> float:
    """Eq. (tasm-eq-score), the layer weight [reconstruction]: lambda(l) = alpha + beta sigmoid(kappa (l / L - 0.5)) with alpha 0.1, beta 0.8,
    kappa 10; l runs over 0..L-1 as l / (L - 1) so the shallowest layer gets about 0.1 and the
    deepest about 0.9 [reconstruction]."""
    x = layer / max(n_layers - 1, 1)
    return ALPHA + BETA / (1.0 + math.exp(-KAPPA * (x - 0.5)))


def token_scores(kv: KV, attn: torch.Tensor, is_label: torch.Tensor, layer: int, n_layers: int,
                 gamma: float = 0.5, use_task: bool = True) -> torch.Tensor:
    """Eq. (tasm-eq-score): S = lambda(l) s_task + (1 - lambda(l)) s_attn, with
    s_task = ReLU(k^T tau / |k|) + gamma |v| / max_j |v_j| and s_attn the accumulated attention
    received (H2O-style, scaled to max 1) [reconstruction: s_attn and gamma are not given].
    ``use_task=False`` (ablation) keeps s_attn only. Returns (B, T)."""
    keys, vals = flat_keys(kv), flat_values(kv)
    acc = attn.sum(1)
    s_attn = acc / acc.amax(1, keepdim=True)
    if not use_task:
        return s_attn
    tau = task_vector(keys, is_label)
    s_task = F.relu((keys @ tau[:, :, None])[..., 0] / keys.norm(dim=-1).clamp_min(1e-12))
    vn = vals.norm(dim=-1)
    s_task = s_task + gamma * vn / vn.amax(1, keepdim=True)
    lam = layer_weight(layer, n_layers)
    return lam * s_task + (1 - lam) * s_attn


def merge_weights(keys: torch.Tensor, pre: Prefill, sinks: torch.Tensor, sources: torch.Tensor,
                  window: int | None = 1) -> torch.Tensor:
    """Eq. (tasm-eq-merge), the weights: w_ij = cos(k_i, k_j) for source i and sink j, -inf unless both are labels or both
    are patches of the same image within Chebyshev distance ``window`` on the patch grid (the
    3x3 window; ``None`` lifts the spatial limit, same image only). Returns (B, S, K)."""
    w = cosine(keys.gather(1, sources[..., None].expand(-1, -1, keys.shape[-1])),
               keys.gather(1, sinks[..., None].expand(-1, -1, keys.shape[-1])))
    lab, img, row, col = (t[..., None] for t in (pre.is_label[sources], pre.image[sources],
                                                  pre.row[sources], pre.col[sources]))
    lab_k, img_k, row_k, col_k = (t[:, None, :] for t in (pre.is_label[sinks], pre.image[sinks],
                                                          pre.row[sinks], pre.col[sinks]))
    same_type = lab == lab_k
    vis_ok = img == img_k
    if window is not None:
        vis_ok = vis_ok & ((row - row_k).abs() <= window) & ((col - col_k).abs() <= window)
    ok = same_type & (lab | vis_ok)
    return w.masked_fill(~ok, float("-inf"))


@dataclass
class TASMCache:
    """Eq. (tasm-eq-gate), the memory it reads [reconstruction]: per layer the Core (merged sinks) and the Latent Bank (uncompressed
    low-score originals), with the indices kept for figures."""

    core: list[KV]
    bank: list[KV]
    core_idx: list[torch.Tensor]
    merged_frac: list[float]
    twice_frac: list[float] | None = None  # per layer: share of the top non-Core originals already merged


def tasm_compress(pre: Prefill, b: int, bank_size: int, gamma: float = 0.5, merge: bool = True,
                  use_task: bool = True, window: int | None = 1) -> TASMCache:
    """Eqs. (tasm-eq-score, tasm-eq-merge): per layer, score the tokens (Eq. (tasm-eq-score)), keep the top ``b`` as Core sinks, merge each other
    token into its best sink (w_ij >= 0.5, coefficient e^{w_ij}) and put the top ``bank_size`` of
    the tokens the Core lost (neither a sink nor merged into one), uncompressed, in the Latent
    Bank [reconstruction: the bank holds the highest-scoring *dropped* originals, so that a token
    the gate fetches is never also inside a sink: an open gate counts no original twice. Fewer
    than ``bank_size`` tokens may be dropped; the bank is then padded with empty slots (size 0,
    which attention ignores)]. ``merge=False`` prunes instead (ablation): every source is dropped.
    ``twice_frac`` says, per layer, what share of the ``bank_size`` highest-scoring non-Core
    originals (a bank that ignored merging) would have been counted twice."""
    L = len(pre.kv)
    core, bank, idxs, frac, twice = [], [], [], [], []
    for li, kv in enumerate(pre.kv):
        T = kv.k.shape[2]
        if not 1 <= b <= T:
            raise ValueError(f"core budget must be in 1..{T}, got {b}")
        S = token_scores(kv, pre.attn[li], pre.is_label, li, L, gamma, use_task)
        order = S.argsort(1, descending=True)
        sinks, sources = order[:, :b].sort(1).values, order[:, b:]
        assign = torch.full(sources.shape, -1, dtype=torch.long)
        if merge and sources.shape[1] > 0:
            w = merge_weights(flat_keys(kv), pre, sinks, sources, window)
            assign = bipartite_assign(w, SIM_THRESHOLD)
            coef = w.gather(2, assign.clamp_min(0)[..., None])[..., 0].exp()
            core.append(merge_into_sinks(kv, sinks, sources, assign, torch.where(assign >= 0, coef, 0.0)))
            frac.append(float((assign >= 0).float().mean()))
        else:
            core.append(gather(kv, sinks))
            frac.append(0.0)
        bank.append(dropped_bank(kv, sources, assign, bank_size))
        twice.append(float((assign[:, :bank_size] >= 0).float().mean()) if bank_size > 0 else 0.0)
        idxs.append(sinks)
    return TASMCache(core, bank, idxs, frac, twice)


def dropped_bank(kv: KV, sources: torch.Tensor, assign: torch.Tensor, bank_size: int) -> KV:
    """Eq. (tasm-eq-gate), the Latent Bank it reads [reconstruction]: the first ``bank_size`` of the
    ``sources`` (B, S), in their order (by score), that were not merged (``assign == -1``),
    uncompressed. Episodes with fewer dropped sources get empty slots (log size ``-inf``), which
    attention and the gate's top-m ignore. Returns a cache of ``min(bank_size, S)`` slots."""
    m = min(bank_size, sources.shape[1])
    if m == 0:
        return gather(kv, sources[:, :0])
    dropped = assign < 0  # (B, S)
    # stable order: dropped sources first, each group in score order
    order = torch.argsort((~dropped).to(torch.int8), dim=1, stable=True)[:, :m]
    out = gather(kv, sources.gather(1, order))
    empty = ~dropped.gather(1, order)
    return KV(out.k, out.v, out.logsize.masked_fill(empty, float("-inf")))


@dataclass
class Gate:
    """Eq. (tasm-eq-gate): query-adaptive expansion. At each layer and query token, the ``top_m`` Latent Bank
    tokens with the largest attention logits (averaged over heads) are candidates; the gate opens
    when JS(P_core || P_expanded) > ``delta``, P the head-averaged attention [reconstruction: the
    summary compares consecutive decode steps; with one answer token we compare the core-only and
    the expanded attention of the same step].

    ``shuffle`` (a generator) makes the *random gate* of the same budget: it opens as many (episode,
    token) steps as the divergence gate would, at steps drawn at random, so that it adds the same
    amount of memory without looking at the query. ``log`` (a list) collects every divergence the
    gate computes (to calibrate ``delta``, see :func:`calibrate_delta`)."""

    top_m: int
    delta: float = DELTA
    shuffle: torch.Generator | None = None
    log: list | None = None

    def expand(self, q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, ls: torch.Tensor,
               mask: torch.Tensor, bank: KV, o: torch.Tensor, p: torch.Tensor, n_core: int
               ) -> tuple[torch.Tensor, float]:
        """Recompute the attention of every query token with its top-m bank tokens added and
        keep it where the gate opens. q (B, H, Q, dh); K, V, ls, mask as in
        :func:`minirepro.papers.tasm.model.attend`; o, p its core-only output and probabilities.
        Returns the gated output (B, H, Q, dh) and the fraction of (episode, token) pairs opened."""
        dh = q.shape[-1]
        m = min(self.top_m, bank.k.shape[2])
        bl = q @ bank.k.transpose(-1, -2) / math.sqrt(dh) + bank.logsize[:, None, None, :]  # (B, H, Q, Nb)
        top = bl.mean(1).topk(m, dim=-1).indices  # (B, Q, m)
        H = q.shape[1]
        sel = top[:, None].expand(-1, H, -1, -1)
        bl_sel = bl.gather(3, sel)  # (B, H, Q, m)
        main = q @ K.transpose(-1, -2) / math.sqrt(dh) + ls[:, None, None, :]
        main = main.masked_fill(~mask, float("-inf"))
        pe = torch.softmax(torch.cat([main, bl_sel], -1), -1)
        Mk = K.shape[2]
        vb = bank.v[:, :, None].expand(-1, -1, q.shape[2], -1, -1)  # (B, H, Q, Nb, dh)
        vb = vb.gather(3, sel[..., None].expand(-1, -1, -1, -1, dh))
        o_exp = pe[..., :Mk] @ V + (pe[..., Mk:, None] * vb).sum(-2)
        p_core = torch.cat([p, torch.zeros_like(bl_sel)], -1).mean(1)
        js = js_divergence(p_core, pe.mean(1))  # (B, Q)
        if self.log is not None:
            self.log.append(js.flatten())
        opened = js > self.delta
        if self.shuffle is not None:  # the same number of openings, at random steps
            perm = torch.randperm(opened.numel(), generator=self.shuffle)
            opened = opened.flatten()[perm].view_as(opened)
        return torch.where(opened[:, None, :, None], o_exp, o), float(opened.float().mean())


def proportional_attention(q: torch.Tensor, kv: KV) -> torch.Tensor:
    """Eq. (tasm-eq-propattn): ToMe's proportional attention over a (merged) cache: softmax(q k^T / sqrt(dh) + log s) v.
    q (B, H, Q, dh) -> (B, H, Q, dh)."""
    return attend(q, kv.k, kv.v, kv.logsize)[0]
