"""SparseInfer's two steps: core neurons at prefill, a sliced FFN for decoding.

Notation (one FFN layer, one prompt of ``T`` tokens): the pre-activations are
``a_t = W1 x_t + b1`` (``d_ff`` neurons per token). Step 1 keeps, for every token,
the ``k_tok = floor(alpha * n_pos)`` neurons with the largest pre-activation,
``n_pos`` being the mean number of positive pre-activations per token. Step 2
counts how often each neuron is kept over the prompt and keeps the
``k = floor(gamma * d_ff)`` most frequent: the prompt's *core neurons* ``S``.
Decoding then runs with ``W1[S], b1[S], W2[:, S]`` gathered once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass
class FFNBlock:
    """Eq. (sparseinfer-eq-ffn): handles on one decoder layer's feed-forward block.

    ``up`` are the linears whose rows are neurons (OPT: ``[fc1]``; Llama:
    ``[gate_proj, up_proj]``), ``down`` the linear whose columns are neurons, and
    ``score_from`` the linear whose *output* is the pre-activation ranked by
    SparseInfer (OPT ``fc1``; Llama ``gate_proj``, whose SiLU has no exact zeros,
    so neurons are ranked by value).
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
    def score_from(self) -> nn.Linear:
        return self.up[0]

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
# capturing pre-activations


@contextlib.contextmanager
def capture_preactivations(model: nn.Module, store: dict[int, list[torch.Tensor]],
                           inputs: dict[int, list[torch.Tensor]] | None = None) -> Iterator[None]:
    """Eq. (sparseinfer-eq-token), its input: record a = W1 x + b1, ``(N, d_ff)`` per layer.

    While active, append every FFN's pre-activations ``(N, d_ff)`` to ``store[layer]``.

    ``N`` is the number of tokens in the forward call (batch times length). With
    ``inputs`` given, the FFN inputs ``(N, d_model)`` are stored there too
    (the DejaVu predictor is trained on them).
    """
    handles = []
    for blk in ffn_blocks(model):
        def hook(_m, args, out, i=blk.index):
            store.setdefault(i, []).append(out.detach().reshape(-1, out.shape[-1]))
            if inputs is not None:
                inputs.setdefault(i, []).append(args[0].detach().reshape(-1, args[0].shape[-1]))
        handles.append(blk.score_from.register_forward_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# ---------------------------------------------------------------------------
# step 1 and step 2 of the paper


def token_core_neurons(a: torch.Tensor, token_sparsity: float = 0.2) -> torch.Tensor:
    """Eq. (sparseinfer-eq-token), step 1: per token, the top ``k_tok`` neurons; (T, d_ff) -> (T, k_tok).

    ``k_tok = max(1, floor(alpha * n_pos))`` with ``n_pos`` the mean count of
    positive entries per token (for activations without exact zeros, e.g. SiLU
    gates, pass ``alpha`` as a fraction of the positive ones all the same).

    Args:
        a: ``(T, d_ff)`` pre-activations of one prompt at one layer.
        token_sparsity: ``alpha`` in (0, 1].

    Returns:
        ``(T, k_tok)`` neuron indices, each row sorted by decreasing pre-activation.
    """
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"a must be (T, d_ff) with T >= 1, got {tuple(a.shape)}")
    if not 0 < token_sparsity <= 1:
        raise ValueError(f"token_sparsity must be in (0, 1], got {token_sparsity}")
    n_pos = float((a > 0).sum(dim=1).float().mean())
    k_tok = max(1, min(a.shape[1], int(token_sparsity * n_pos)))
    return torch.topk(a, k_tok, dim=1, sorted=True).indices


def sentence_core_neurons(token_sets: torch.Tensor, a: torch.Tensor, sparsity: float = 0.4) -> torch.Tensor:
    """Eq. (sparseinfer-eq-core), step 2: the ``k`` most frequent neurons of the prompt; (k,).

    ``f_j = #{t : j in S_t}``; the core set is the top-``k`` of ``f``. Ties (and
    neurons that no token kept, when fewer than ``k`` were ever kept) are broken by
    the summed positive pre-activation ``sum_t max(a_tj, 0)`` (then the lower index), so the set always
    has exactly ``k`` neurons and equal budgets compare fairly.

    Args:
        token_sets: ``(T, k_tok)`` indices from :func:`token_core_neurons`.
        a: ``(T, d_ff)`` the pre-activations they came from.
        sparsity: ``gamma``, the kept fraction in (0, 1].

    Returns:
        ``(k,)`` sorted neuron indices.
    """
    if not 0 < sparsity <= 1:
        raise ValueError(f"sparsity (kept fraction) must be in (0, 1], got {sparsity}")
    d_ff = a.shape[1]
    k = max(1, int(sparsity * d_ff))
    freq = torch.bincount(token_sets.reshape(-1), minlength=d_ff).numpy()
    mass = a.clamp(min=0).sum(0).double().numpy()
    order = np.lexsort((np.arange(d_ff), -mass, -freq))  # by frequency, then mass, then index
    return torch.as_tensor(np.sort(order[:k]), dtype=torch.long)


def core_neurons(a: torch.Tensor, token_sparsity: float = 0.2, sparsity: float = 0.4) -> torch.Tensor:
    """Eqs. (sparseinfer-eq-token, sparseinfer-eq-core): a prompt's core neurons; (T, d_ff) -> (k,)."""
    return sentence_core_neurons(token_core_neurons(a, token_sparsity), a, sparsity)


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


Selector = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]
"""``select(layer, x (N, d_model), a (N, d_ff)) -> keep (N, d_ff) bool``."""


@contextlib.contextmanager
def masked_ffn(model: nn.Module, select: Selector, layers: list[int]) -> Iterator[None]:
    """[reconstruction] Eq. (sparseinfer-eq-ffn) with a per-token mask: ``select`` drops neurons.

    While active, layer ``i`` in ``layers`` zeroes the FFN neurons ``select`` drops, per token.

    Used for the per-token baselines (oracle, DejaVu), which choose a new set at
    every token and so cannot slice weights once.
    """
    blocks = {b.index: b for b in ffn_blocks(model)}
    handles, state = [], {}
    for i in layers:
        blk = blocks[i]

        def grab(_m, args, out, i=i):
            state[i] = (args[0].detach(), out.detach())

        def apply(_m, args, i=i):
            x, a = state.pop(i)
            shape = args[0].shape
            h = args[0].reshape(-1, shape[-1])
            keep = select(i, x.reshape(-1, x.shape[-1]), a.reshape(-1, a.shape[-1]))
            return (h * keep.to(h.dtype)).reshape(shape),
        handles.append(blk.score_from.register_forward_hook(grab))
        handles.append(blk.down.register_forward_pre_hook(apply))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def topk_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """[reconstruction] per-token top-k (oracle, DejaVu): mask of each row's k largest; (N, d_ff)."""
    keep = torch.zeros_like(scores, dtype=torch.bool)
    return keep.scatter_(1, torch.topk(scores, k, dim=1).indices, True)


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
