"""The spread variant: a learner whose demonstration cache holds only local evidence.

In the chapter's ordinary setting (image-first, a per-image encoder over the whole image) the
label token that follows an image reads that image, so a handful of tokens (the five label
tokens) carry what the query needs, and keeping them is enough: pruning loses little and
merging cannot show an advantage. Rendering the digits larger or cutting finer patches would
not change this, because any token that may attend to the whole image can summarise it.

The variant therefore changes what a cached demonstration token may see. Each demonstration is
its label token first (label-first format), then its 16 patch tokens; the per-image encoder is
*local*: a patch token attends only to the patches of its own image within Chebyshev distance
``radius`` on the 4x4 patch grid and to its own label token, and the label token to itself. The
learner has two layers (the local encoder, then one cross-item causal layer), so the only cache
the query reads (layer 1) holds keys and values computed from these local views: every patch
token carries its label and a 3x3 neighbourhood of ink, and no token carries a whole image. The
class evidence of a demonstration is spread over its 16 patch tokens; keeping a few of them
keeps a few neighbourhoods, while merging neighbours keeps an aggregate of all of them. The
query's own tokens still see the whole query image (causal within the query).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minirepro.papers.tasm.data import FORMATS, GRID, ITEM, N_PATCH
from minirepro.papers.tasm.model import KV, ICLTransformer, Prefill, attend, token_layout

SPREAD_FORMAT = "label-first"  # the variant's demonstration order: label, then the image's patches
SPREAD_ARCH = {"n_way": 5, "d": 64, "heads": 4, "layers": 3, "mlp": 128, "local": 1}


def local_item_mask(n_items: int, fmt: str, radius: int, query_last: bool) -> torch.Tensor:
    """[reconstruction] The spread variant's encoder mask (T, T) over ``n_items`` items of 17
    tokens (True = may attend). Within a demonstration item, a patch token attends to the patches
    at Chebyshev distance <= ``radius`` on the 4x4 grid (itself included, in either direction)
    and to its item's label token; a label token attends only to itself. Tokens of different
    items never attend to each other. With ``query_last`` the last item is the query (in the
    label-first format: the unknown-label token, then 16 patches), which attends causally within
    itself, as the chapter's per-image encoder does."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if n_items < 1:
        raise ValueError("need at least one item")
    if radius < 0:
        raise ValueError(f"radius must be >= 0, got {radius}")
    T = n_items * ITEM
    slot = torch.arange(T) % ITEM
    item = torch.arange(T) // ITEM
    lab_slot = 0 if fmt == "label-first" else N_PATCH
    is_label = slot == lab_slot
    patch = slot - 1 if fmt == "label-first" else slot
    row, col = patch // GRID, patch % GRID
    same = item[:, None] == item[None, :]
    near = ((row[:, None] - row[None, :]).abs() <= radius) & ((col[:, None] - col[None, :]).abs() <= radius)
    patch_rows = ~is_label[:, None] & ((~is_label[None, :] & near) | is_label[None, :])
    label_rows = is_label[:, None] & torch.eye(T, dtype=torch.bool)
    mask = same & (patch_rows | label_rows)
    if query_last:
        q = item == n_items - 1
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        mask[q] = (causal & same)[q]
    return mask


class SpreadICLTransformer(ICLTransformer):
    """[reconstruction] The chapter's learner with local demonstrations
    (:func:`local_item_mask`): in layer 0 a demonstration patch sees its ``radius`` window and
    its label, in every later layer only its label (and itself), and no demonstration token ever
    sees another item, so every cached key and value holds one window of one image. The query
    sees its own image within itself in the first ``local`` layers and everything before it in
    the later layers, as in :class:`~minirepro.papers.tasm.model.ICLTransformer`. Use it with
    the label-first format."""

    def __init__(self, radius: int = 1, fmt: str = SPREAD_FORMAT, **arch) -> None:
        super().__init__(**arch)
        self.radius, self.fmt = radius, fmt

    def embed_items(self, patches: torch.Tensor, labels: torch.Tensor, fmt: str) -> torch.Tensor:
        """Items (B, D, 16, 4) with labels (B, D) -> tokens (B, 17 D, d), as the ordinary learner
        embeds them, plus the demonstration's label embedding on each of its patch tokens (every
        patch token is tagged with its answer, so no token has to gather it)."""
        x = super().embed_items(patches, labels, fmt)
        B, D = labels.shape
        lab_slot = 0 if fmt == "label-first" else N_PATCH
        on_patch = (torch.arange(ITEM) != lab_slot).float()[None, None, :, None]
        tag = self.lab(labels)[:, :, None] * on_patch
        return x + tag.reshape(B, D * ITEM, -1)

    def layer_masks(self, T: int, query_last: bool = False) -> list[torch.Tensor]:
        """The attention mask (T, T) of every layer; T must be a whole number of items (the
        label-first query is one 17-token item). Demonstration rows: the ``radius`` window and
        the label in layer 0, only the label (and themselves) in every later layer, never another
        item. Query rows (``query_last``): causal within the query in the first ``local`` layers,
        causal over the whole sequence after them."""
        if T % ITEM:
            raise ValueError(f"the spread learner needs whole items of {ITEM} tokens, got T = {T}")
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        q = torch.arange(T) // ITEM == T // ITEM - 1
        out = []
        for li in range(len(self.blocks)):
            m = local_item_mask(T // ITEM, self.fmt, self.radius if li == 0 else 0, query_last)
            if query_last and li >= self.local:
                m[q] = causal[q]
            out.append(m)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Plain forward over demonstrations plus the query (B, T, d) -> hidden states (training)."""
        for blk, mask in zip(self.blocks, self.layer_masks(x.shape[1], query_last=True)):
            q, k, v = blk.qkv_heads(x)
            x = blk.finish(x, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        return self.ln(x)

    @torch.no_grad()
    def prefill(self, patches: torch.Tensor, labels: torch.Tensor, fmt: str) -> Prefill:
        """The demonstrations' KV cache per layer and their attention (summed over heads), under
        the local encoder's masks."""
        if fmt != self.fmt:
            raise ValueError(f"this learner reads the {self.fmt} format, got {fmt!r}")
        is_label, image, row, col, _ = token_layout(labels.shape[1], fmt)
        x = self.embed_items(patches, labels, fmt)
        zeros = torch.zeros(x.shape[0], x.shape[1])
        kvs, attns = [], []
        for blk, mask in zip(self.blocks, self.layer_masks(x.shape[1])):
            q, k, v = blk.qkv_heads(x)
            o, p = attend(q, k, v, None, mask)
            kvs.append(KV(k, v, zeros))
            attns.append(p.sum(1))
            x = blk.finish(x, o)
        return Prefill(kvs, attns, is_label, image, row, col)
