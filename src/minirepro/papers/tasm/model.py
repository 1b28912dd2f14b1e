"""The in-context learner: a small causal transformer over patch and label tokens.

The demonstrations are run once (prefill) and their keys and values per layer form the
KV cache that the compressors shrink; the query's tokens then attend to the (compressed)
cache and to each other. Attention adds ``log s`` of each cached token's size ``s``
(proportional attention), so a merged token of size ``s`` counts like ``s`` copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from minirepro.papers.tasm.data import FORMATS, GRID, ITEM, N_PATCH


@dataclass
class KV:
    """Eq. (tasm-eq-propattn), its cache: one layer's keys/values (B, H, M, dh) and log sizes (B, M) (``-inf`` marks an empty slot)."""

    k: torch.Tensor
    v: torch.Tensor
    logsize: torch.Tensor

    @property
    def size(self) -> torch.Tensor:
        """Token sizes (B, M): how many original tokens each slot stands for (0 for empty)."""
        return self.logsize.exp()


@dataclass
class Prefill:
    """[reconstruction] The demonstrations' cache: per layer KV, the head-summed causal attention (B, T, T),
    the keys concatenated over heads (B, T, H*dh), and token metadata (T,)."""

    kv: list[KV]
    attn: list[torch.Tensor]
    is_label: torch.Tensor
    image: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor


def token_layout(n_demos: int, fmt: str) -> tuple[torch.Tensor, ...]:
    """[reconstruction] Metadata of the demonstration tokens, each (T,) with T = 17 n_demos:
    is-label flag, demonstration index, patch row and column (-1 for labels), slot in the item."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if n_demos < 1:
        raise ValueError("the demonstration set is empty: need at least one demonstration")
    slot = torch.arange(ITEM).repeat(n_demos)
    lab_slot = N_PATCH if fmt == "image-first" else 0
    is_label = slot == lab_slot
    patch = torch.where(is_label, -1, slot if fmt == "image-first" else slot - 1)
    image = torch.arange(n_demos).repeat_interleave(ITEM)
    row = torch.where(is_label, -1, patch // GRID)
    col = torch.where(is_label, -1, patch % GRID)
    return is_label, image, row, col, slot


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, logsize: torch.Tensor | None = None,
           mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (tasm-eq-propattn): proportional attention (ToMe's form for merged tokens): softmax(q k^T / sqrt(dh) + log s) v.

    q (B, H, Q, dh), k and v (B, H, M, dh), logsize (B, M) or None, mask (Q, M) bool (True =
    may attend) or None. Returns the output (B, H, Q, dh) and the probabilities (B, H, Q, M).
    """
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if logsize is not None:
        logits = logits + logsize[:, None, None, :]
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    p = torch.softmax(logits, dim=-1)
    return p @ v, p


class Block(nn.Module):
    """[reconstruction] The learner's pre-LN transformer block."""

    def __init__(self, d: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, mlp), nn.GELU(), nn.Linear(mlp, d))

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(self.h * self.dh, dim=-1)
        return tuple(t.view(B, T, self.h, self.dh).transpose(1, 2) for t in (q, k, v))

    def finish(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        B, _, T, _ = o.shape
        x = x + self.out(o.transpose(1, 2).reshape(B, T, -1))
        return x + self.mlp(self.ln2(x))


class ICLTransformer(nn.Module):
    """[reconstruction] A causal transformer for k-shot episodes of patch tokens plus label tokens.

    Token embedding = content (a linear map of the 4 pixels, or a label embedding; label
    ``n_way`` is the query's unknown label) + the patch's grid position + the slot in its item.
    The answer is read at the query's last token as ``n_way`` logits. The first ``local``
    layers attend only within an item (a per-image encoder, as a vision encoder does before a
    multimodal LM); the later layers are causal over the whole sequence.
    """

    def __init__(self, n_way: int = 5, d: int = 64, heads: int = 4, layers: int = 3, mlp: int = 128,
                 local: int = 1) -> None:
        super().__init__()
        self.n_way, self.local = n_way, local
        self.pix = nn.Linear(4, d)
        self.lab = nn.Embedding(n_way + 1, d)
        self.pos = nn.Embedding(N_PATCH, d)
        self.slot = nn.Embedding(ITEM, d)
        self.blocks = nn.ModuleList(Block(d, heads, mlp) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, n_way)
        self.cls = nn.Linear(d, 10)  # auxiliary digit-class head, used only in training

    def embed_items(self, patches: torch.Tensor, labels: torch.Tensor, fmt: str) -> torch.Tensor:
        """Items (B, D, 16, 4) with labels (B, D) -> tokens (B, 17 D, d) in the given format."""
        B, D = labels.shape
        p = self.pix(patches) + self.pos.weight
        lab = self.lab(labels)[:, :, None]
        items = torch.cat([p, lab], 2) if fmt == "image-first" else torch.cat([lab, p], 2)
        return (items + self.slot.weight).reshape(B, D * ITEM, -1)

    def embed_query(self, patches: torch.Tensor, fmt: str) -> torch.Tensor:
        """The query's tokens (B, 16 or 17, d): its patches, preceded by the unknown-label token
        in the label-first format."""
        p = self.pix(patches) + self.pos.weight + self.slot.weight[:N_PATCH]
        if fmt == "image-first":
            return p
        unk = (self.lab.weight[self.n_way] + self.slot.weight[0]).expand(p.shape[0], 1, -1)
        return torch.cat([unk, p + self.slot.weight[1:] - self.slot.weight[:N_PATCH]], 1)

    @staticmethod
    def masks(T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal mask (T, T) and the within-item causal mask of the local layers (items of 17
        tokens; the query's tokens after the demonstrations form the last item)."""
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        item = torch.arange(T) // ITEM
        return causal, causal & (item[:, None] == item[None, :])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Plain forward over tokens (B, T, d) -> final hidden states (B, T, d) (training)."""
        causal, local = self.masks(x.shape[1])
        for li, blk in enumerate(self.blocks):
            q, k, v = blk.qkv_heads(x)
            mask = local if li < self.local else causal
            x = blk.finish(x, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        return self.ln(x)

    def logits_at(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(h)

    @torch.no_grad()
    def prefill(self, patches: torch.Tensor, labels: torch.Tensor, fmt: str) -> Prefill:
        """The demonstrations' KV cache per layer and their causal attention (summed over heads)."""
        is_label, image, row, col, _ = token_layout(labels.shape[1], fmt)
        x = self.embed_items(patches, labels, fmt)
        T = x.shape[1]
        causal, local = self.masks(T)
        kvs, attns = [], []
        zeros = torch.zeros(x.shape[0], T)
        for li, blk in enumerate(self.blocks):
            q, k, v = blk.qkv_heads(x)
            o, p = attend(q, k, v, None, local if li < self.local else causal)
            kvs.append(KV(k, v, zeros))
            attns.append(p.sum(1))
            x = blk.finish(x, o)
        return Prefill(kvs, attns, is_label, image, row, col)

    @torch.no_grad()
    def answer(self, query_patches: torch.Tensor, cache: list[KV], fmt: str,
               bank: list[KV] | None = None, gate: "Gate | None" = None  # noqa: F821, UP037
               ) -> tuple[torch.Tensor, dict]:
        """The query's logits (B, n_way) given a (compressed) demonstration cache per layer.

        With ``bank`` and ``gate``: at each layer and query token, the top ``gate.top_m`` bank
        tokens (by the head-averaged attention logit) join the cache for that token when the
        gate opens (Eq. (tasm-eq-gate); see :func:`minirepro.papers.tasm.compress.js_divergence`).
        Returns logits and a dict with the query's attention over the cache per layer
        (B, Q, M) and the gate-open fraction per layer.
        """
        x = self.embed_query(query_patches, fmt)
        Q = x.shape[1]
        causal = torch.ones(Q, Q, dtype=torch.bool).tril()
        info: dict = {"attn": [], "open": []}
        for li, blk in enumerate(self.blocks):
            q, k, v = blk.qkv_heads(x)
            c = cache[li]
            K = torch.cat([c.k, k], 2)
            V = torch.cat([c.v, v], 2)
            ls = torch.cat([c.logsize, torch.zeros(x.shape[0], Q)], 1)
            sees_cache = li >= self.local  # local layers never look at the demonstrations
            mask = torch.cat([torch.full((Q, c.k.shape[2]), sees_cache), causal], 1)
            o, p = attend(q, K, V, ls, mask)
            if sees_cache and bank is not None and gate is not None and bank[li].k.shape[2] > 0:
                o, opened = gate.expand(q, K, V, ls, mask, bank[li], o, p, c.k.shape[2])
                info["open"].append(opened)
            info["attn"].append(p.mean(1)[..., : c.k.shape[2]])
            x = blk.finish(x, o)
        return self.head(self.ln(x[:, -1])), info
