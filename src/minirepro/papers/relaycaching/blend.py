"""Selective recompute: B's prefill with A's re-rotated cache for ``S`` and a recompute schedule.

B's context is ``P_B + S + Q`` (``N`` tokens). ``P_B`` and ``Q`` are new to B and always
computed. For ``S`` the schedule says, per layer ``l``, which tokens *pass* through the layer
(their hidden state is updated and their key/value is recomputed) and which only get a
fresh key/value from their current hidden state (``kv_only``, the detection layer's
projection). Every other ``S`` entry keeps A's re-rotated key/value. A token's hidden
state at layer ``l`` exists only if it passed every layer below, so passes must be nested.

The reuse rate (:func:`reuse_rate`) counts recomputed ``(layer, token)`` KV entries of
``S``, the segment that has a cached KV: ``1 - recomputed / (n_layers * |S|)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from minirepro.papers.relaycaching.relay import RelayItem
from minirepro.papers.relaycaching.rope import (
    check_cache_compatible,
    inv_freq_of,
    rerotate,
    rotate_half,
)

Detect = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Schedule:
    """Eq. (relaycaching-eq-reuse)'s T_l and D_l: the tokens of ``S`` (``0 .. |S|-1``) recomputed per layer.

    Attributes:
        passes: per layer, the ``S`` tokens that pass through the layer (nested: layer
            ``l``'s set is inside layer ``l - 1``'s).
        kv_only: per layer, ``S`` tokens whose key/value is recomputed from the hidden
            state without passing the layer (each must have passed every layer below).
        detect_layer: a layer at which ``detect`` picks the tokens that pass from there
            on (CacheBlend); ``None`` for a static schedule.
    """

    passes: list[torch.Tensor]
    kv_only: list[torch.Tensor]
    detect_layer: int | None = None


def _idx(x: Sequence[int] | torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.long).reshape(-1).unique(sorted=True)


def make_schedule(n_layers: int, s_len: int, passes: Sequence, kv_only: Sequence | None = None,
                  detect_layer: int | None = None) -> Schedule:
    """Eq. (relaycaching-eq-reuse)'s nested sets T_l as a checked :class:`Schedule`.

    Raises ``ValueError`` on bad indices or non-nested passes.
    """
    if len(passes) != n_layers:
        raise ValueError(f"passes has {len(passes)} layers, the model {n_layers}")
    kv_only = kv_only if kv_only is not None else [[] for _ in range(n_layers)]
    if len(kv_only) != n_layers:
        raise ValueError(f"kv_only has {len(kv_only)} layers, the model {n_layers}")
    p = [_idx(x) for x in passes]
    k = [_idx(x) for x in kv_only]
    for lay, (a, b) in enumerate(zip(p, k)):
        for name, t in (("passes", a), ("kv_only", b)):
            if t.numel() and (t.min() < 0 or t.max() >= s_len):
                raise ValueError(f"{name}[{lay}] holds indices outside 0..{s_len - 1}")
        if lay and detect_layer != lay:
            if not torch.isin(a, p[lay - 1]).all():
                raise ValueError(f"passes[{lay}] is not inside passes[{lay - 1}]: a token without "
                                 "a hidden state at this layer cannot be recomputed")
            if not torch.isin(b, p[lay - 1]).all():
                raise ValueError(f"kv_only[{lay}] needs tokens that passed layer {lay - 1}")
    if detect_layer is not None and not 1 <= detect_layer < n_layers:
        raise ValueError(f"detect_layer must be in 1..{n_layers - 1}, got {detect_layer}")
    return Schedule(p, k, detect_layer)


def full_schedule(n_layers: int, s_len: int) -> Schedule:
    """Eq. (relaycaching-eq-reuse) with T_l = S: zero reuse, every token of ``S`` passes every layer."""
    return make_schedule(n_layers, s_len, [range(s_len)] * n_layers)


def naive_schedule(n_layers: int, s_len: int) -> Schedule:
    """Eq. (relaycaching-eq-reuse) with T_l empty: full reuse (naive reuse with re-rotated keys)."""
    return make_schedule(n_layers, s_len, [[]] * n_layers)


def reuse_rate(schedule: Schedule, s_len: int) -> float:
    """Eq. (relaycaching-eq-reuse): ``1 - recomputed (layer, token) KV entries of S / (n_layers * |S|)``."""
    if s_len < 1:
        raise ValueError("S must hold at least one token")
    n = len(schedule.passes)
    rec = sum(int(torch.cat([a, b]).unique().numel()) for a, b in zip(schedule.passes, schedule.kv_only))
    return 1.0 - rec / (n * s_len)


def reused_kv(cache: DynamicCache, model: PreTrainedModel, item: RelayItem
              ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Eq. (relaycaching-eq-rerotate) applied: A's cached KV of ``S``, keys moved to B's positions; per layer ``(1, kv, |S|, hd)``."""
    check_cache_compatible(cache, model)
    s0, s = len(item.pa), len(item.s)
    if cache.get_seq_length() != s0 + s:
        raise ValueError(f"the cache holds {cache.get_seq_length()} tokens, A's context has {s0 + s}")
    inv = inv_freq_of(model)
    src = torch.arange(s0, s0 + s)
    dst = torch.arange(len(item.pb), len(item.pb) + s)
    return [(rerotate(lay.keys[:, :, s0:s0 + s], src, dst, inv), lay.values[:, :, s0:s0 + s])
            for lay in cache.layers]


@dataclass
class BlendOutput:
    """[reconstruction] What :func:`blended_prefill` returns.

    Logits ``(|Q|, V)`` at B's question positions, the assembled ``DynamicCache``, the schedule used.
    """

    logits: torch.Tensor
    cache: DynamicCache
    schedule: Schedule


@torch.no_grad()
def blended_prefill(model: PreTrainedModel, item: RelayItem,
                    reused: list[tuple[torch.Tensor, torch.Tensor]], schedule: Schedule,
                    detect: Detect | None = None) -> BlendOutput:
    """Eqs. (relaycaching-eq-rerotate, relaycaching-eq-select) [reconstruction]: B's prefill, partly recomputed.

    The fusion procedure CacheBlend and RelayCaching share: A's re-rotated entries of ``S``
    are reused, and at the detection layer the entries that deviate most are recomputed.

    Args:
        reused: per layer, A's keys (re-rotated to B's positions) and values of ``S``.
        schedule: :class:`Schedule`; at ``schedule.detect_layer`` the ``kv_only`` tokens get
            fresh keys/values and ``detect(fresh_k, fresh_v, reused_k, reused_v)`` (each
            ``(1, kv, n, hd)`` over those tokens) returns the ``S`` indices that pass from there on.

    Returns:
        :class:`BlendOutput`; its cache is B's whole context ``(1, kv, N, hd)`` per layer.
    """
    base, cfg = model.model, model.config
    layers = list(base.layers)
    _check_blend_inputs(cfg, item, reused, schedule, len(layers))
    ids = item.b_ids
    n, pb, s = ids.shape[1], len(item.pb), len(item.s)
    h = base.embed_tokens(ids).clone()
    pos = torch.arange(n)
    cos, sin = base.rotary_emb(h, pos[None])
    fixed = torch.cat([torch.arange(pb), torch.arange(pb + s, n)])
    causal = pos[None, :] <= pos[:, None]
    cache = DynamicCache(config=cfg)
    passes = list(schedule.passes)
    for li, layer in enumerate(layers):
        kv_s = torch.cat([passes[li], schedule.kv_only[li]]).unique(sorted=True)
        comp = torch.cat([fixed, pb + passes[li]]).unique(sorted=True)
        kv_tok = torch.cat([comp, pb + kv_s]).unique(sorted=True)
        x, k, v, c, sn = _fresh_kv(layer, cfg, h, kv_tok, cos, sin)
        kk, vv = _layer_kv(cfg, li, reused[li], k, v, kv_tok, n, pb, s, h.dtype)
        if schedule.detect_layer == li:
            chosen = _detect_passes(detect, kk, vv, reused[li], pb, kv_s, passes[li - 1])
            for lj in range(li, len(layers)):
                passes[lj] = chosen
            comp = torch.cat([fixed, pb + chosen]).unique(sorted=True)
        _pass_layer(layer, cfg, h, x, c, sn, kv_tok, comp, kk, vv, causal)
        cache.update(kk, vv, li)
    logits = model.lm_head(base.norm(h[:, pb + s:]))[0]
    done = Schedule(passes, list(schedule.kv_only), schedule.detect_layer)
    return BlendOutput(logits.float(), cache, done)


def _check_blend_inputs(cfg, item: RelayItem, reused: list, schedule: Schedule, n_layers: int) -> None:
    """Refuse a reused KV or schedule for another layer count, and a context longer than the model's."""
    if len(reused) != n_layers or len(schedule.passes) != n_layers:
        raise ValueError(f"reused KV / schedule for {len(reused)} / {len(schedule.passes)} layers, "
                         f"the model has {n_layers}: a cache from a different model config?")
    n = item.b_ids.shape[1]
    if n > cfg.max_position_embeddings:
        raise ValueError(f"B's context of {n} tokens is longer than the model's context "
                         f"({cfg.max_position_embeddings})")


def _fresh_kv(layer, cfg, h: torch.Tensor, kv_tok: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """The layer's normed input ``x`` for the ``kv_tok`` tokens, their fresh rotated keys and values, cos/sin."""
    att = layer.self_attn
    hd = att.head_dim
    x = layer.input_layernorm(h[:, kv_tok])
    k = att.k_proj(x).view(1, -1, cfg.num_key_value_heads, hd).transpose(1, 2)
    v = att.v_proj(x).view(1, -1, cfg.num_key_value_heads, hd).transpose(1, 2)
    c, sn = cos[:, kv_tok][:, None], sin[:, kv_tok][:, None]
    k = k * c + rotate_half(k) * sn
    return x, k, v, c, sn


def _layer_kv(cfg, li: int, reused_li: tuple[torch.Tensor, torch.Tensor], k: torch.Tensor,
              v: torch.Tensor, kv_tok: torch.Tensor, n: int, pb: int, s: int, dtype: torch.dtype
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer ``li``'s KV over B's context: A's reused KV for ``S``, the fresh KV at ``kv_tok``."""
    hd = k.shape[-1]
    rk, rv = reused_li
    if rk.shape[-1] != hd or rk.shape[1] != cfg.num_key_value_heads or rk.shape[2] != s:
        raise ValueError(f"reused keys of shape {tuple(rk.shape)} do not fit layer {li} "
                         f"(1, {cfg.num_key_value_heads}, {s}, {hd}): a different model config?")
    kk = torch.zeros(1, cfg.num_key_value_heads, n, hd, dtype=dtype)
    vv = torch.zeros_like(kk)
    kk[:, :, pb:pb + s], vv[:, :, pb:pb + s] = rk, rv
    kk[:, :, kv_tok], vv[:, :, kv_tok] = k, v
    return kk, vv


def _detect_passes(detect: Detect | None, kk: torch.Tensor, vv: torch.Tensor,
                   reused_li: tuple[torch.Tensor, torch.Tensor], pb: int, kv_s: torch.Tensor,
                   passed_below: torch.Tensor) -> torch.Tensor:
    """At the detection layer: the ``S`` tokens ``detect`` picks (among those that passed below)."""
    if detect is None:
        raise ValueError("the schedule has a detection layer but no detect function")
    rk, rv = reused_li
    sel = pb + kv_s
    chosen = _idx(detect(kk[:, :, sel], vv[:, :, sel], rk[:, :, kv_s], rv[:, :, kv_s]))
    return chosen[torch.isin(chosen, passed_below)]


def _pass_layer(layer, cfg, h: torch.Tensor, x: torch.Tensor, c: torch.Tensor, sn: torch.Tensor,
                kv_tok: torch.Tensor, comp: torch.Tensor, kk: torch.Tensor, vv: torch.Tensor,
                causal: torch.Tensor) -> None:
    """The ``comp`` tokens pass the layer (attention over ``kk, vv``, then the MLP); ``h`` is updated."""
    att = layer.self_attn
    hd = att.head_dim
    rows = torch.searchsorted(kv_tok, comp)
    q = att.q_proj(x[:, rows]).view(1, -1, cfg.num_attention_heads, hd).transpose(1, 2)
    q = q * c[:, :, rows] + rotate_half(q) * sn[:, :, rows]
    rep = cfg.num_attention_heads // cfg.num_key_value_heads
    kr, vr = kk.repeat_interleave(rep, dim=1), vv.repeat_interleave(rep, dim=1)
    scores = (q @ kr.transpose(-1, -2)) * att.scaling
    scores = scores.masked_fill(~causal[comp][None, None], float("-inf"))
    o = (scores.softmax(-1) @ vr).transpose(1, 2).reshape(1, comp.numel(), -1)
    hc = h[:, comp] + att.o_proj(o)
    hc = hc + layer.mlp(layer.post_attention_layernorm(hc))
    h[:, comp] = hc


def prefill_flops(model: PreTrainedModel, item: RelayItem, schedule: Schedule,
                  probe: bool = False) -> float:
    """[reconstruction] Cost: multiply-add FLOPs (x2) of B's prefill under ``schedule`` (+ the probe).

    Per token passing a layer: Q/K/V/O projections, SwiGLU, and attention over the
    ``pos + 1`` visible keys; per ``kv_only`` token: the K/V projections. The LM head
    runs on the ``Q`` tokens in every arm. ``probe=True`` adds :func:`probe_flops`.
    """
    cfg = model.config
    d, f, nh, nkv = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads
    hd = d // nh
    pb, s, n = len(item.pb), len(item.s), item.n_b
    proj = 2 * (d * nh * hd + 2 * d * nkv * hd + nh * hd * d) + 2 * 3 * d * f
    kvp = 2 * 2 * d * nkv * hd
    fixed = list(range(pb)) + list(range(pb + s, n))
    total = 0.0
    for a, b in zip(schedule.passes, schedule.kv_only):
        toks = fixed + [pb + int(i) for i in a]
        total += sum(proj + 2 * 2 * nh * hd * (t + 1) for t in toks)
        total += kvp * int(b[~torch.isin(b, a)].numel())
    total += 2 * d * cfg.vocab_size * len(item.q)
    return total + (probe_flops(model, item) if probe else 0.0)


def probe_flops(model: PreTrainedModel, item: RelayItem) -> float:
    """[reconstruction] Cost of the layer-0 probe (FLOPs): queries of ``S`` and their scores against the visible keys."""
    cfg = model.config
    d, nh = cfg.hidden_size, cfg.num_attention_heads
    hd = d // nh
    pb, s = len(item.pb), len(item.s)
    return float(s * 2 * d * nh * hd + sum(2 * nh * hd * (pb + j + 1) for j in range(s)))
