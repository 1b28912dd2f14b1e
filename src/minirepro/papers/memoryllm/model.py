"""A compact Llama-style decoder with the paper's three FFN placements.

``variant``:

``"base"``
    the usual block, ``X' = X + Attn(N(X))``, ``X'' = X' + FFN(N'(X'))``: the FFN
    reads the residual stream. With the same weights it gives the same logits as
    ``transformers``' ``LlamaForCausalLM`` (a unit test).
``"memory"`` (MemoryLLM, Eq. (memoryllm-eq-layer))
    ``X_{L+1} = X_L + Attn_L(X_L) + FFN_L(N_L(X_0))``: every layer's SwiGLU FFN reads
    the token embeddings ``X_0`` through its own RMSNorm, so its output depends on
    the token id only and can be precomputed for the whole vocabulary (a token-wise
    lookup, ToL; :mod:`minirepro.papers.memoryllm.tol`).
``"flex"`` (Flex-MemoryLLM, §3.3)
    ``β·d²`` of the FFN's parameters move into FFN-C, a dense SwiGLU on the residual
    stream (width ``β·d/3``); FFN-M keeps width ``d_ff − β·d/3`` on ``X_0``.
    [reconstruction: the paper calls FFN-C a "linear dense module" without saying
    whether it is one linear map or a small MLP; we use a SwiGLU of ``β·d²`` weights.]

RoPE (rotate-half convention, as ``transformers``) is the only position signal, so
``X_0`` is the token embedding alone and the lookup identity is exact.
``alpha`` scales every context-free FFN contribution (FFN-M, or the base FFN) for the
paper's α sweep; ``drop_layer`` removes one layer's FFN.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

VARIANTS: tuple[str, ...] = ("base", "memory", "flex")


@dataclass(frozen=True)
class Arch:
    """§3.1/§3.3: Shape of one decoder.

    Attributes:
        variant: ``"base"``, ``"memory"`` or ``"flex"``.
        vocab: vocabulary size ``|V|``.
        d: hidden width ``h``.
        n_layers: decoder blocks ``N``.
        n_heads, n_kv_heads: query and key-value heads (grouped-query attention).
        d_ff: the base FFN width (the paper's expansion 8/3: ``d_ff = 8d/3``).
        beta: Flex's ``β`` (0 for the other variants); FFN-C has ``β·d²`` weights.
        max_len: longest sequence (RoPE table).
    """

    variant: str = "base"
    vocab: int = 512
    d: int = 48
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 128
    beta: int = 0
    max_len: int = 128

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        for name in ("vocab", "d", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_len"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.d % self.n_heads or self.n_heads % self.n_kv_heads or (self.d // self.n_heads) % 2:
            raise ValueError("d must split into an even head size, and n_heads into n_kv_heads groups")
        if (self.variant == "flex") != (self.beta > 0):
            raise ValueError(f"beta > 0 exactly for the flex variant, got variant={self.variant!r}, "
                             f"beta={self.beta}")
        if self.beta and (self.beta * self.d % 3 or self.c_width >= self.d_ff):
            raise ValueError(f"beta*d must be divisible by 3 and below d_ff, got beta={self.beta}, d={self.d}")

    @property
    def c_width(self) -> int:
        """FFN-C width ``β·d/3`` (its 3 matrices hold ``β·d²`` weights)."""
        return self.beta * self.d // 3

    @property
    def m_width(self) -> int:
        """Width of the FFN that reads ``X_0`` (FFN-M), or of the base FFN."""
        return self.d_ff - self.c_width

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    """§3.1: RMSNorm as in Llama: ``w · x / sqrt(mean(x²) + eps)`` computed in float32."""

    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class SwiGLU(nn.Module):
    """§3.1: ``down(silu(gate(x)) · up(x))``, no biases; ``3·d·width`` weights."""

    def __init__(self, d: int, width: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d, width, bias=False)
        self.up_proj = nn.Linear(d, width, bias=False)
        self.down_proj = nn.Linear(width, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rope_tables(head_dim: int, max_len: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """§3.1: RoPE ``cos, sin`` tables ``(max_len, head_dim)`` in the rotate-half layout."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ang = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)
    emb = torch.cat([ang, ang], -1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, -1)
    return torch.cat([-b, a], -1)


class Attention(nn.Module):
    """§3.1: Causal grouped-query self-attention with RoPE and an optional key-value cache."""

    def __init__(self, a: Arch) -> None:
        super().__init__()
        self.h, self.kv, self.hd = a.n_heads, a.n_kv_heads, a.d // a.n_heads
        self.q_proj = nn.Linear(a.d, self.h * self.hd, bias=False)
        self.k_proj = nn.Linear(a.d, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(a.d, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.h * self.hd, a.d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None, cache: dict | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        rep = self.h // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1 and k.shape[2] == t)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    """Eqs. (memoryllm-eq-layer, memoryllm-eq-flex): One decoder block of any variant (see the module docstring)."""

    def __init__(self, a: Arch) -> None:
        super().__init__()
        self.variant = a.variant
        self.input_layernorm = RMSNorm(a.d)
        self.self_attn = Attention(a)
        if a.variant in ("base", "flex"):
            self.post_attention_layernorm = RMSNorm(a.d)
        if a.variant == "base":
            self.mlp = SwiGLU(a.d, a.d_ff)
        else:
            self.x0_norm = RMSNorm(a.d)          # its own norm on X_0 (needed for convergence)
            self.mlp = SwiGLU(a.d, a.m_width)   # FFN-M
        if a.variant == "flex":
            self.mlp_c = SwiGLU(a.d, a.c_width)  # FFN-C on the residual stream

    def memory(self, x0: torch.Tensor) -> torch.Tensor:
        """Eq. (memoryllm-eq-layer): the context-free contribution ``FFN_L(N_L(X_0))``, ``(..., d)``."""
        return self.mlp(self.x0_norm(x0))

    def forward(self, x: torch.Tensor, x0: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None, alpha: float = 1.0, mem: torch.Tensor | None = None,
                cache: dict | None = None) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        if self.variant == "base":
            return h + alpha * self.mlp(self.post_attention_layernorm(h))
        m = mem if mem is not None else self.memory(x0)
        if self.variant == "flex":
            h = h + self.mlp_c(self.post_attention_layernorm(h))
        return h + alpha * m


class MemoryLM(nn.Module):
    """Eq. (memoryllm-eq-layer): A causal LM of :class:`Arch` with tied input and output embeddings.

    ``forward(ids, attention_mask=None, alpha=1.0, tol=None, drop_layer=None)`` gives
    logits ``(B, T, V)``. ``tol`` (a callable ``(layer, ids) -> (B, T, d)``, e.g. a
    :class:`~minirepro.papers.memoryllm.tol.ToL`) replaces the live FFN-M by lookups.
    """

    def __init__(self, a: Arch) -> None:
        super().__init__()
        self.arch = a
        self.embed_tokens = nn.Embedding(a.vocab, a.d)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.n_layers))
        self.norm = RMSNorm(a.d)
        cos, sin = rope_tables(a.d // a.n_heads, a.max_len)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def check_ids(self, ids: torch.Tensor) -> None:
        """Raise a clear ``ValueError`` for ids outside ``[0, vocab)`` or an over-long sequence."""
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.arch.vocab):
            raise ValueError(f"token id out of range: ids must be in [0, {self.arch.vocab}), got "
                             f"min {int(ids.min())}, max {int(ids.max())}")

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None, alpha: float = 1.0,
                tol=None, drop_layer: int | None = None, caches: list | None = None,
                start: int = 0) -> torch.Tensor:
        self.check_ids(ids)
        b, t = ids.shape
        if start + t > self.arch.max_len:
            raise ValueError(f"sequence of {start + t} tokens is longer than max_len={self.arch.max_len}")
        x0 = self.embed_tokens(ids)
        cos, sin = self.cos[start:start + t], self.sin[start:start + t]
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            mask = causal[None, None] & attention_mask[:, None, None, :].bool()
            mask = mask | torch.eye(t, dtype=torch.bool)[None, None]   # no all-masked rows
        x = x0
        for i, layer in enumerate(self.layers):
            mem = tol(i, ids) if (tol is not None and self.arch.variant != "base") else None
            a = 0.0 if i == drop_layer else alpha
            x = layer(x, x0, cos, sin, mask, a, mem, caches[i] if caches is not None else None)
        return F.linear(self.norm(x), self.embed_tokens.weight)


def n_params(model: nn.Module) -> int:
    """§4.1: Distinct parameters (the tied embedding counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def ffn_m_params(model: MemoryLM) -> int:
    """§4.1: Parameters of the FFNs that read ``X_0`` (the part a ToL replaces); 0 for base."""
    if model.arch.variant == "base":
        return 0
    return sum(p.numel() for layer in model.layers for p in layer.mlp.parameters()) + \
        sum(layer.x0_norm.weight.numel() for layer in model.layers)


def active_params(model: MemoryLM) -> int:
    """Parameters used per token at inference when FFN-M is a lookup (§4: "active")."""
    return n_params(model) - ffn_m_params(model)


@torch.no_grad()
def greedy_decode(model: MemoryLM, prompt: torch.Tensor, new_tokens: int, tol=None) -> torch.Tensor:
    """§4.7: Greedy decoding with a key-value cache: ``(1, T)`` prompt -> ``(new_tokens,)`` ids."""
    caches: list[dict] = [{} for _ in model.layers]
    logits = model(prompt, tol=tol, caches=caches)
    out, pos = [], prompt.shape[1]
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(new_tokens):
        out.append(nxt)
        logits = model(nxt, tol=tol, caches=caches, start=pos)
        pos += 1
        nxt = logits[:, -1].argmax(-1, keepdim=True)
    return torch.cat(out, 1)[0]


def log_ppl(nll: float, count: int) -> float:
    """§4.1: Perplexity from a summed NLL (nats) over ``count`` tokens."""
    return math.exp(nll / max(count, 1))
