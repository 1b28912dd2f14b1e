"""Which tokens to recompute: the deviation profile, the layer window, the probe, the selectors.

* :func:`kv_deviation`: ``1 - cos`` between reused and fresh keys (or values), per layer and token.
* :func:`layer_window`: RelayCaching's offline profiler: the layers whose mean deviation on
  calibration relays reaches ``frac`` of the largest; tokens are recomputed up to its top.
* :func:`layer0_probe`: the cheap online probe. Layer 0's keys and values depend on the
  token alone, so A's cache is already right there; its attention is not. Each token's
  attention mass on B's prefix (what changed) and the mass the question puts on it
  (its influence) come from layer 0's queries and the cached keys, with no layer pass.
* :func:`relay_schedule` and :func:`cacheblend_schedule`: the two selective arms.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel

from minirepro.papers.relaycaching.blend import Schedule, make_schedule
from minirepro.papers.relaycaching.relay import RelayItem


def kv_deviation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eq. (relaycaching-eq-dev), the paper's Eq. 1: ``1 - cos(a_j, b_j)`` per token over all heads; ``(1, kv, T, hd)`` x2 -> ``(T,)``."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    x = a.float().permute(2, 0, 1, 3).reshape(a.shape[2], -1)
    y = b.float().permute(2, 0, 1, 3).reshape(b.shape[2], -1)
    return (1 - torch.nn.functional.cosine_similarity(x, y, dim=-1)).clamp_min(0)


def layer_window(profile: np.ndarray, frac: float = 0.5) -> tuple[int, int]:
    """§4 Layer-Range Profiler [reconstruction]: ``(first, last)`` layers whose mean deviation >= ``frac`` x max.

    Args:
        profile: ``(n_layers, ...)`` deviations on calibration relays (extra axes are averaged).
    """
    if not 0 < frac <= 1:
        raise ValueError(f"frac must be in (0, 1], got {frac}")
    per = np.asarray(profile, dtype=float).reshape(len(profile), -1)
    per = np.nanmean(per, axis=1)
    on = np.flatnonzero(per >= frac * np.nanmax(per))
    return int(on.min()), int(on.max())


@torch.no_grad()
def layer0_probe(model: PreTrainedModel, item: RelayItem) -> tuple[torch.Tensor, torch.Tensor]:
    """§4.3 Token Selector's inputs, from layer 0 only [reconstruction]: ``(prefix_mass, influence)``, each ``(|S|,)``.

    ``prefix_mass[j]``: attention (mean over heads) that ``S`` token ``j`` puts on ``P_B``
    at layer 0, the part of its first-layer output that changes with the prefix.
    ``influence[j]``: attention mass that the ``Q`` tokens put on ``S`` token ``j``.
    """
    base, cfg = model.model, model.config
    att = base.layers[0].self_attn
    ids = item.b_ids
    n, pb, s = ids.shape[1], len(item.pb), len(item.s)
    x = base.layers[0].input_layernorm(base.embed_tokens(ids))
    cos, sin = base.rotary_emb(x, torch.arange(n)[None])
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    hd = att.head_dim
    q = att.q_proj(x).view(1, n, -1, hd).transpose(1, 2)
    k = att.k_proj(x).view(1, n, -1, hd).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    k = k.repeat_interleave(cfg.num_attention_heads // cfg.num_key_value_heads, dim=1)
    rows = torch.arange(pb, n)
    sc = (q[:, :, rows] @ k.transpose(-1, -2)) * att.scaling
    sc = sc.masked_fill(torch.arange(n)[None, :] > rows[:, None], float("-inf"))
    a = sc.softmax(-1).mean(1)[0]
    prefix_mass = a[:s, :pb].sum(-1)
    influence = a[s:, pb:pb + s].sum(0)
    return prefix_mass, influence


def relay_tokens(prefix_mass: torch.Tensor, influence: torch.Tensor, tau_diff: float = 1.5,
                 tau_down: float = 1.45, n_boundary: int = 2, n_suffix: int = 2,
                 budget: float | None = None) -> torch.Tensor:
    """Eq. (relaycaching-eq-select), §4.3 [reconstruction]: boundary ∪ suffix ∪ {mass > tau_diff·mean} ∪ {influence > tau_down·mean}.

    With ``budget`` (a share of ``S``), the thresholds are replaced by one common
    multiple ``tau`` of the means, set per relay so that ``round(budget·|S|)`` tokens are
    kept: the boundary and suffix tokens, then the largest ``max(mass/mean, influence/mean)``.
    Returns sorted ``S`` indices.
    """
    s = prefix_mass.numel()
    if influence.numel() != s:
        raise ValueError("prefix_mass and influence must cover the same tokens")
    if min(tau_diff, tau_down) < 0 or min(n_boundary, n_suffix) < 0:
        raise ValueError("thresholds and token counts must be non-negative")
    idx = torch.arange(s)
    edge = (idx < n_boundary) | (idx >= s - n_suffix)
    if budget is None:
        keep = edge | (prefix_mass > tau_diff * prefix_mass.mean())
        keep |= influence > tau_down * influence.mean()
        return idx[keep]
    if not 0 <= budget <= 1:
        raise ValueError(f"budget must be in [0, 1], got {budget}")
    k = int(round(budget * s))
    score = torch.maximum(prefix_mass / prefix_mass.mean().clamp_min(1e-12),
                          influence / influence.mean().clamp_min(1e-12))
    score = torch.where(edge, torch.full_like(score, float("inf")), score)
    return torch.topk(score, min(k, s)).indices.sort().values if k else idx[:0]


def random_tokens(s_len: int, budget: float, n_boundary: int = 2, n_suffix: int = 2,
                  seed: int = 0) -> torch.Tensor:
    """[reconstruction] The selector's control (ours): :func:`relay_tokens`' edges and count, the rest at random."""
    if not 0 <= budget <= 1:
        raise ValueError(f"budget must be in [0, 1], got {budget}")
    idx = np.arange(s_len)
    edge = (idx < n_boundary) | (idx >= s_len - n_suffix)
    k = int(round(budget * s_len))
    if k <= edge.sum():
        return torch.as_tensor(idx[edge][:k], dtype=torch.long)
    rest = np.random.default_rng(seed).permutation(idx[~edge])[:k - int(edge.sum())]
    return torch.as_tensor(np.sort(np.concatenate([idx[edge], rest])), dtype=torch.long)


def relay_schedule(n_layers: int, s_len: int, tokens: torch.Tensor, top_layer: int) -> Schedule:
    """Eq. (relaycaching-eq-reuse)'s T_l for RelayCaching [reconstruction]: ``tokens`` pass layers ``0..top_layer`` (the window's top); the rest is reused.

    Layers below the window are passed too (a token needs its hidden state), and counted.
    """
    if not 0 <= top_layer < n_layers:
        raise ValueError(f"top_layer must be in 0..{n_layers - 1}, got {top_layer}")
    return make_schedule(n_layers, s_len, [tokens if li <= top_layer else [] for li in range(n_layers)])


def cacheblend_schedule(n_layers: int, s_len: int, detect_layer: int = 1) -> Schedule:
    """Eq. (relaycaching-eq-reuse)'s T_l, D_l for CacheBlend: all of ``S`` passes the layers below
    ``detect_layer``; there every token's KV is recomputed (the deviation check) and only the
    selected tokens pass from then on."""
    every = list(range(s_len))
    passes = [every] * n_layers
    kv_only = [every if li == detect_layer else [] for li in range(n_layers)]
    return make_schedule(n_layers, s_len, passes, kv_only, detect_layer=detect_layer)


def cacheblend_detect(ratio: float):
    """Eq. (relaycaching-eq-dev) at the detection layer: CacheBlend's selector, the ``ratio`` share of
    tokens with the largest value deviation (>= 1 token)."""
    if not 0 <= ratio <= 1:
        raise ValueError(f"ratio must be in [0, 1], got {ratio}")

    def detect(fk, fv, rk, rv):
        dev = kv_deviation(fv, rv)
        k = int(round(ratio * dev.numel()))
        return torch.topk(dev, k).indices if k else torch.zeros(0, dtype=torch.long)

    return detect
