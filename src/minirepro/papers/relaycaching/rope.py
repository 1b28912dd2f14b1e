"""RoPE re-rotation of cached keys, and the compatibility checks of a reused cache.

A key cached at position ``p`` is ``R(p) k``, with ``R`` the rotary rotation
(``transformers``' Llama convention: ``k cos + rotate_half(k) sin``, angles
``pos * inv_freq`` duplicated over the two halves). Rotations compose,
``R(q) = R(q - p) R(p)``, so moving a cached key to position ``q`` needs only
the rotation by ``q - p``; the unrotated key is never needed.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Eq. (relaycaching-eq-rerotate)'s R: ``(-x2, x1)`` for the halves ``x = (x1, x2)`` of the last dimension (Llama's convention)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def inv_freq_of(model: PreTrainedModel) -> torch.Tensor:
    """Eq. (relaycaching-eq-rerotate)'s R: the rotary inverse frequencies ``(head_dim / 2,)`` of a Llama-style model."""
    rot = getattr(getattr(model, "model", model), "rotary_emb", None)
    if rot is None:
        raise TypeError(f"{type(model).__name__} has no rotary embedding (RoPE); re-rotation needs one")
    return rot.inv_freq.detach().float()


def rerotate(keys: torch.Tensor, from_pos: torch.Tensor | int, to_pos: torch.Tensor | int,
             inv_freq: torch.Tensor) -> torch.Tensor:
    """Eq. (relaycaching-eq-rerotate), RoPE re-positioning as CacheBlend: keys at ``from_pos`` moved to ``to_pos``.

    Args:
        keys: ``(..., T, head_dim)`` keys with RoPE applied at positions ``from_pos``.
        from_pos, to_pos: ``(T,)`` integer positions (or scalars, broadcast).
        inv_freq: ``(head_dim / 2,)`` rotary inverse frequencies.

    Returns:
        ``(..., T, head_dim)`` keys equal (up to float rounding) to the keys the model
        computes at ``to_pos``; same dtype as ``keys``.
    """
    if keys.shape[-1] != 2 * inv_freq.shape[-1]:
        raise ValueError(f"keys have head_dim {keys.shape[-1]} but inv_freq has {inv_freq.shape[-1]} "
                         "frequencies (needs head_dim / 2): a cache from a different model config?")
    t = keys.shape[-2]
    delta = (torch.as_tensor(to_pos, dtype=torch.float64)
             - torch.as_tensor(from_pos, dtype=torch.float64)).reshape(-1)
    if delta.numel() == 1:
        delta = delta.expand(t)
    if delta.numel() != t:
        raise ValueError(f"{delta.numel()} positions for {t} keys")
    ang = delta[:, None] * inv_freq.double()[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos().to(keys.dtype), emb.sin().to(keys.dtype)
    return keys * cos + rotate_half(keys) * sin


def check_cache_compatible(cache: DynamicCache, model: PreTrainedModel) -> None:
    """[reconstruction] Reuse precondition: ``ValueError`` unless ``cache``'s layers, KV heads and head size match ``model``'s config."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    n_kv = getattr(cfg, "num_key_value_heads", cfg.num_attention_heads)
    if len(cache.layers) != cfg.num_hidden_layers:
        raise ValueError(f"the cache has {len(cache.layers)} layers, the model {cfg.num_hidden_layers}: "
                         "a cache from a different model config cannot be reused")
    for i, layer in enumerate(cache.layers):
        k = layer.keys
        if k is None or k.ndim != 4 or k.shape[1] != n_kv or k.shape[-1] != head_dim:
            shape = None if k is None else tuple(k.shape)
            raise ValueError(f"layer {i} of the cache holds keys of shape {shape}; the model expects "
                             f"(B, {n_kv}, T, {head_dim}): a cache from a different model config")
