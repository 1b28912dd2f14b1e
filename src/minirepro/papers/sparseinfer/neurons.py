"""SparseInfer's two steps: core neurons at prefill, a sliced FFN for decoding.

Notation (one FFN layer, one prompt of ``T`` tokens): the hidden activation is
``h_t = silu(W1 x_t) * (W3 x_t)`` for a gated (Llama) FFN, ``relu(W1 x_t + b1)`` for an
OPT one (``d_ff`` neurons per token). Step 1 keeps, for every token, the
``k_tok = floor(alpha * n_act)`` neurons with the largest ``|h|``, ``n_act`` being the
mean number of non-zero activations per token. Step 2 counts how often each neuron is
kept over the prompt and keeps the ``k = floor(gamma * d_ff)`` most frequent: the
prompt's *core neurons* ``S``. Decoding then runs with the rows ``S`` of the up
projections and the columns ``S`` of the down projection, gathered once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass
class FFNBlock:
    """Eq. (sparseinfer-eq-ffn): handles on one decoder layer's feed-forward block.

    ``up`` are the linears whose rows are neurons (OPT: ``[fc1]``; Llama:
    ``[gate_proj, up_proj]``), ``down`` the linear whose columns are neurons; its input
    is the hidden activation ``h`` that SparseInfer ranks.
    """

    index: int
    owner: nn.Module
    up_names: tuple[str, ...]
    down_name: str

    @property
    def up(self) -> list[nn.Linear]:
        return [getattr(self.owner, n) for n in self.up_names]

    @property
    def down(self) -> nn.Linear:
        return getattr(self.owner, self.down_name)

    @property
    def d_ff(self) -> int:
        return self.down.in_features


def ffn_blocks(model: nn.Module) -> list[FFNBlock]:
    """Eq. (sparseinfer-eq-ffn) per layer: the FFN blocks of an OPT- or Llama-style LM, in order."""
    blocks: list[FFNBlock] = []
    for mod in model.modules():
        if hasattr(mod, "fc1") and hasattr(mod, "fc2") and isinstance(mod.fc1, nn.Linear):
            blocks.append(FFNBlock(len(blocks), mod, ("fc1",), "fc2"))
        elif all(isinstance(getattr(mod, n, None), nn.Linear) for n in ("gate_proj", "up_proj", "down_proj")):
            blocks.append(FFNBlock(len(blocks), mod, ("gate_proj", "up_proj"), "down_proj"))
    if not blocks:
        raise ValueError(f"{type(model).__name__} has no OPT (fc1/fc2) or Llama (gate/up/down) FFN blocks")
    return blocks


def sparse_layer_ids(n_layers: int, layers: str = "middle") -> list[int]:
    """Eq. (sparseinfer-eq-decode), its layers: ``"all"``, or ``"middle"`` (not first, last).

    The paper leaves the first and last layers dense; with fewer than three layers
    ``"middle"`` keeps every layer sparse (nothing would be left otherwise).
    """
    if layers == "all" or n_layers < 3:
        return list(range(n_layers))
    if layers == "middle":
        return list(range(1, n_layers - 1))
    raise ValueError(f"layers must be 'middle' or 'all', got {layers!r}")


# ---------------------------------------------------------------------------
# capturing the FFN's hidden activations


@contextlib.contextmanager
def capture_hidden(model: nn.Module, store: dict[int, list[torch.Tensor]]) -> Iterator[None]:
    """Eq. (sparseinfer-eq-token), its input: record h = act(W1 x) (* W3 x), ``(B, T, d_ff)`` per layer.

    While active, append every FFN's hidden activation, the input of its down projection
    (Llama: ``silu(gate_proj x) * up_proj x``; OPT: ``relu(fc1 x + b1)``), to ``store[layer]``
    with the forward call's shape ``(B, T, d_ff)``.
    """
    handles = []
    for blk in ffn_blocks(model):
        def hook(_m, args, i=blk.index):
            store.setdefault(i, []).append(args[0].detach())
        handles.append(blk.down.register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# ---------------------------------------------------------------------------
# step 1 and step 2 of the paper


def token_core_neurons(h: torch.Tensor, token_sparsity: float = 0.2) -> torch.Tensor:
    """Eq. (sparseinfer-eq-token), step 1: per token, the top ``k_tok`` neurons by |h|; (T, d_ff) -> (T, k_tok).

    ``k_tok = max(1, floor(alpha * n_act))`` with ``n_act`` the mean count of non-zero
    entries of ``h`` per token: the positive ones under a ReLU, every neuron under SiLU,
    which has no exact zeros (neurons are then ranked by value, as CoreInfer does for Llama).

    Args:
        h: ``(T, d_ff)`` hidden activations of one prompt at one layer.
        token_sparsity: ``alpha`` in (0, 1].

    Returns:
        ``(T, k_tok)`` neuron indices, each row sorted by decreasing ``|h|``.
    """
    if h.ndim != 2 or h.shape[0] == 0 or h.shape[1] == 0:
        raise ValueError(f"h must be (T, d_ff) with T >= 1, got {tuple(h.shape)}")
    if not 0 < token_sparsity <= 1:
        raise ValueError(f"token_sparsity must be in (0, 1], got {token_sparsity}")
    if not torch.isfinite(h).all():
        raise ValueError("h holds NaN or infinite values")
    mag = h.abs()
    # float64: a float32 mean can put floor(alpha * n_act) on the wrong side of an exact
    # integer (alpha = 0.6, n_act = 10/3 gave k_tok = 1 instead of 2)
    n_act = float((mag > 0).sum(dim=1).double().mean())
    k_tok = max(1, min(h.shape[1], int(token_sparsity * n_act)))
    return torch.topk(mag, k_tok, dim=1, sorted=True).indices


def sentence_core_neurons(token_sets: torch.Tensor, h: torch.Tensor, sparsity: float = 0.4) -> torch.Tensor:
    """Eq. (sparseinfer-eq-core), step 2: the ``k`` most frequent neurons of the prompt; (k,).

    ``f_j = #{t : j in S_t}``; the core set is the top-``k`` of ``f``. Ties (and
    neurons that no token kept, when fewer than ``k`` were ever kept) are broken by
    the summed magnitude ``sum_t |h_tj|`` (then the lower index), so the set always
    has exactly ``k`` neurons and equal budgets compare fairly.

    Args:
        token_sets: ``(T, k_tok)`` indices from :func:`token_core_neurons`.
        h: ``(T, d_ff)`` the activations they came from.
        sparsity: ``gamma``, the kept fraction in (0, 1].

    Returns:
        ``(k,)`` sorted neuron indices.
    """
    if not 0 < sparsity <= 1:
        raise ValueError(f"sparsity (kept fraction) must be in (0, 1], got {sparsity}")
    d_ff = h.shape[1]
    k = max(1, int(sparsity * d_ff))
    freq = torch.bincount(token_sets.reshape(-1), minlength=d_ff).numpy()
    mass = h.abs().sum(0).double().numpy()
    order = np.lexsort((np.arange(d_ff), -mass, -freq))  # by frequency, then mass, then index
    return torch.as_tensor(np.sort(order[:k]), dtype=torch.long)


def core_neurons(h: torch.Tensor, token_sparsity: float = 0.2, sparsity: float = 0.4) -> torch.Tensor:
    """Eqs. (sparseinfer-eq-token, sparseinfer-eq-core): a prompt's core neurons; (T, d_ff) -> (k,)."""
    return sentence_core_neurons(token_core_neurons(h, token_sparsity), h, sparsity)


# ---------------------------------------------------------------------------
# using a neuron set: slicing (for speed) and masking (for per-token methods)


def _slice_linear(lin: nn.Linear, idx: torch.Tensor, dim: int) -> nn.Linear:
    w = lin.weight.detach().index_select(dim, idx).contiguous()
    out_f, in_f = w.shape
    new = torch.nn.utils.skip_init(nn.Linear, in_f, out_f, bias=lin.bias is not None)
    new.weight = nn.Parameter(w, requires_grad=False)
    if lin.bias is not None:
        b = lin.bias.detach()
        new.bias = nn.Parameter(b.index_select(0, idx).contiguous() if dim == 0 else b.clone(),
                                requires_grad=False)
    return new


@contextlib.contextmanager
def sliced_ffn(model: nn.Module, sets: dict[int, torch.Tensor]) -> Iterator[None]:
    """Eq. (sparseinfer-eq-decode): while active, layer ``i``'s FFN is sliced to its set ``S``.

    Layer ``i`` uses only ``W1[S], b1[S], W2[:, S]``.

    The weights are gathered once, on entry, into new dense ``nn.Linear`` layers
    of width ``|S|`` (no per-token indexing); the originals come back on exit.
    """
    blocks = {b.index: b for b in ffn_blocks(model)}
    saved: list[tuple[nn.Module, str, nn.Linear]] = []
    try:
        for i, idx in sets.items():
            if i not in blocks:
                raise ValueError(f"layer {i} does not exist (model has {len(blocks)} FFN layers)")
            blk = blocks[i]
            idx = torch.as_tensor(idx, dtype=torch.long)
            if idx.ndim != 1 or idx.numel() == 0 or int(idx.max()) >= blk.d_ff or int(idx.min()) < 0:
                raise ValueError(f"sets[{i}] must be a non-empty 1-D index set into {blk.d_ff} neurons")
            for name in blk.up_names:
                saved.append((blk.owner, name, getattr(blk.owner, name)))
                setattr(blk.owner, name, _slice_linear(getattr(blk.owner, name), idx, 0))
            saved.append((blk.owner, blk.down_name, blk.down))
            setattr(blk.owner, blk.down_name, _slice_linear(blk.down, idx, 1))
        yield
    finally:
        for owner, name, lin in reversed(saved):
            setattr(owner, name, lin)


Selector = Callable[[int, torch.Tensor], torch.Tensor]
"""``select(layer, h (B, T, d_ff)) -> keep``, a bool mask broadcastable to ``h``."""


@contextlib.contextmanager
def masked_ffn(model: nn.Module, select: Selector, layers: Sequence[int]) -> Iterator[None]:
    """Eq. (sparseinfer-eq-decode) by masking: layer ``i`` in ``layers`` zeroes the neurons ``select`` drops.

    The hidden activation ``h`` entering the down projection is multiplied by the mask, which
    is the sliced FFN of :func:`sliced_ffn` when the mask is one fixed set per sequence
    (``(B, 1, d_ff)``), and lets a batch use a different set per sequence, or a per-token
    set (the oracle), in one forward.
    """
    blocks = {b.index: b for b in ffn_blocks(model)}
    handles = []
    for i in layers:
        if i not in blocks:
            raise ValueError(f"layer {i} does not exist (model has {len(blocks)} FFN layers)")

        def apply(_m, args, i=i):
            h = args[0]
            return (h * select(i, h).to(h.dtype)),
        handles.append(blocks[i].down.register_forward_pre_hook(apply))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def topk_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """[reconstruction] per-token top-k (the oracle): mask of the k largest along the last dim; (..., d_ff)."""
    keep = torch.zeros_like(scores, dtype=torch.bool)
    return keep.scatter_(-1, torch.topk(scores, k, dim=-1).indices, True)


def set_mask(idx: torch.Tensor, d_ff: int) -> torch.Tensor:
    """Eq. (sparseinfer-eq-similar), its 1_C: the multi-hot mask of the index set; (d_ff,) bool."""
    m = torch.zeros(d_ff, dtype=torch.bool)
    m[torch.as_tensor(idx, dtype=torch.long)] = True
    return m


def jaccard(s1: torch.Tensor, s2: torch.Tensor) -> float:
    """[reconstruction] stability and similarity of core sets: Jaccard ``|S1 & S2| / |S1 | S2|``.

    1.0 for two empty sets.
    """
    a, b = set(torch.as_tensor(s1).tolist()), set(torch.as_tensor(s2).tolist())
    union = len(a | b)
    return 1.0 if union == 0 else len(a & b) / union
