"""Decoding with the FFN sliced once after prefill, its timing, and the FLOP bound."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from transformers import PreTrainedModel

from minirepro.core.lm.models import prefill
from minirepro.core.timing import Timings, compare_times
from minirepro.papers.sparseinfer.neurons import (
    capture_hidden,
    core_neurons,
    ffn_blocks,
    sliced_ffn,
)


@torch.no_grad()
def prefill_with_hidden(model: PreTrainedModel, prompt: torch.Tensor):
    """Dense prefill of ``prompt (T,)``: last logits ``(V,)``, the ``DynamicCache``, hidden activations per layer ``(T, d_ff)``."""
    store: dict[int, list[torch.Tensor]] = {}
    with capture_hidden(model, store):
        logits, cache = prefill(model, prompt[None])
    return logits[0, -1], cache, [torch.cat(store[i])[0] for i in sorted(store)]


@torch.no_grad()
def greedy_steps(model: PreTrainedModel, first_logits: torch.Tensor, cache, max_new_tokens: int,
                 eos_token_id: int | None) -> list[int]:
    """Greedy decoding with the KV cache from the prefill's last logits; stops after ``<eos>``."""
    out: list[int] = []
    tok = int(first_logits.argmax())
    while True:
        out.append(tok)
        if tok == eos_token_id or len(out) >= max_new_tokens:
            return out
        step = model(input_ids=torch.tensor([[tok]]), cache=cache, use_cache=True)
        tok = int(step.logits[0, -1].argmax())


@torch.no_grad()
def dense_generate(model: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int,
                   eos_token_id: int | None = None) -> torch.Tensor:
    """Greedy generation with the KV cache (``prefill``, then one token per step); ``(1, T + n)`` ids."""
    first, cache, _ = prefill_with_hidden(model, input_ids[0])
    new = greedy_steps(model, first, cache, max_new_tokens, eos_token_id)
    return torch.cat([input_ids, torch.tensor([new])], dim=1)


@torch.no_grad()
def sparseinfer_generate(model: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int,
                         layers: Sequence[int], token_sparsity: float = 0.2, sparsity: float = 0.4,
                         eos_token_id: int | None = None) -> torch.Tensor:
    """Eqs. (sparseinfer-eq-token, sparseinfer-eq-core, sparseinfer-eq-decode): greedy generation.

    Greedy generation the SparseInfer way:

    1. Prefill ``input_ids (1, T)`` with the dense model, recording the FFN activations.
    2. Core neurons per sparsified layer (:func:`core_neurons`, Eqs. (sparseinfer-eq-token, sparseinfer-eq-core)).
    3. Gather ``W1[S], b1[S], W2[:, S]`` once; decode every new token with them.

    The first new token comes from the dense prefill, as in the paper. Returns
    ``(1, T + n)`` ids; the model's own weights are restored afterwards.
    """
    first, cache, acts = prefill_with_hidden(model, input_ids[0])
    sets = {i: core_neurons(acts[i], token_sparsity, sparsity) for i in layers}
    with sliced_ffn(model, sets):
        new = greedy_steps(model, first, cache, max_new_tokens, eos_token_id)
    return torch.cat([input_ids, torch.tensor([new])], dim=1)


def decode_macs(model: PreTrainedModel, kept: float, layers: Sequence[int], context: int) -> tuple[float, float]:
    """Multiply-accumulates of one decoding step, dense and with ``layers``' FFNs kept at ``kept``.

    Counts every linear layer (attention projections, FFN, output head) plus the
    attention over ``context`` cached positions; norms and softmax are ignored.
    """
    if not 0 < kept <= 1:
        raise ValueError(f"kept must be in (0, 1], got {kept}")
    blocks = ffn_blocks(model)
    head = model.get_output_embeddings().weight.numel()
    ffn = [sum(lin.weight.numel() for lin in b.up) + b.down.weight.numel() for b in blocks]
    ffn_ids = {id(lin) for b in blocks for lin in [*b.up, b.down]}
    other = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear)
                and id(m) not in ffn_ids and m is not model.get_output_embeddings())
    d = model.config.hidden_size
    attn = 2 * d * context * len(blocks)
    dense = other + head + attn + sum(ffn)
    sparse = dense - sum(ffn[i] * (1 - int(kept * blocks[i].d_ff) / blocks[i].d_ff) for i in layers)
    return float(dense), float(sparse)


def flop_bound(model: PreTrainedModel, kept: float, layers: Sequence[int], context: int) -> float:
    """Upper bound on the decode speed-up if time were proportional to MACs: dense / sparse."""
    dense, sparse = decode_macs(model, kept, layers, context)
    return dense / sparse


def byte_bound(model: PreTrainedModel, kept: float, layers: Sequence[int], context: int) -> float:
    """Upper bound on the decode speed-up if time were proportional to bytes read: dense / sparse.

    At batch 1 a decoding step reads every weight of every linear once (the FFN's only for
    its kept neurons) and the KV cache of ``context`` positions (keys and values of
    ``num_key_value_heads * head_dim`` floats per layer); embeddings are one row, ignored.
    """
    if not 0 < kept <= 1:
        raise ValueError(f"kept must be in (0, 1], got {kept}")
    blocks = ffn_blocks(model)
    ffn = [sum(lin.weight.numel() for lin in b.up) + b.down.weight.numel() for b in blocks]
    ffn_ids = {id(lin) for b in blocks for lin in [*b.up, b.down]}
    other = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear) and id(m) not in ffn_ids)
    cfg = model.config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv = 2 * kv_heads * head_dim * context * len(blocks)
    dense = other + kv + sum(ffn)
    sparse = dense - sum(ffn[i] * (1 - int(kept * blocks[i].d_ff) / blocks[i].d_ff) for i in layers)
    return float(dense / sparse)


def time_decoding(model: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int,
                  layers: Sequence[int], token_sparsity: float, sparsity: float,
                  repeats: int = 7) -> Timings:
    """Interleaved medians of dense greedy decoding vs SparseInfer decoding, in one run."""
    return compare_times({
        "dense": lambda: dense_generate(model, input_ids, max_new_tokens),
        "SparseInfer": lambda: sparseinfer_generate(model, input_ids, max_new_tokens, layers,
                                                    token_sparsity, sparsity),
    }, repeats=repeats, warmup=1, baseline="dense")


def time_ffn_block(d_model: int, d_ff: int, kept: float, calls: int = 200, repeats: int = 7,
                   seed: int = 0) -> Timings:
    """One FFN block (``fc2(relu(fc1 x))``, batch 1) dense vs sliced to ``kept`` of its neurons.

    Random weights; each timing sample runs ``calls`` blocks so the timer's
    resolution does not matter. Isolates the part of decoding SparseInfer changes.
    """
    g = torch.Generator().manual_seed(seed)
    fc1, fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
    with torch.no_grad():
        for p in (*fc1.parameters(), *fc2.parameters()):
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    k = max(1, int(kept * d_ff))
    s1, s2 = nn.Linear(d_model, k), nn.Linear(k, d_model)
    with torch.no_grad():
        s1.weight.copy_(fc1.weight[:k])
        s1.bias.copy_(fc1.bias[:k])
        s2.weight.copy_(fc2.weight[:, :k])
        s2.bias.copy_(fc2.bias)
    x = torch.randn(1, d_model, generator=g)

    @torch.no_grad()
    def run(a: nn.Linear, b: nn.Linear) -> None:
        for _ in range(calls):
            b(torch.relu(a(x)))

    return compare_times({"dense": lambda: run(fc1, fc2), "SparseInfer": lambda: run(s1, s2)},
                         repeats=repeats, baseline="dense")
