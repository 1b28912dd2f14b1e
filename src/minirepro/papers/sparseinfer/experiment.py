"""The miniature's protocol: prefill a prompt's first part densely, decode the rest sparsely.

Each test example ``<bos> prompt answer <eos>`` is cut after its first
``prefix_frac`` of prompt tokens. The prefix is the *prefill*: the model runs
dense and each method picks its neurons from it. The rest of the prompt, the
answer and ``<eos>`` are then fed token by token through the sparsified model,
as forced decoding steps (one forward with the KV cache, which is the same
computation). Quality is the perplexity of those continuation tokens and the
accuracy of the answer predicted at the end of the prompt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirepro.core.lm.corpus import Example, check_answer
from minirepro.core.lm.evaluate import kv_cache, with_cache
from minirepro.papers.sparseinfer.baselines import (
    SimilarityIndex,
    budget,
    dejavu_selector,
    oracle_selector,
    random_sets,
)
from minirepro.papers.sparseinfer.core import (
    capture_preactivations,
    core_neurons,
    jaccard,
    masked_ffn,
    sliced_ffn,
)

METHODS: tuple[str, ...] = ("dense", "SparseInfer", "SparseInfer (similarity)", "random",
                            "static hot", "per-token oracle", "DejaVu")


@dataclass
class Item:
    """One tokenised test example: ``ids (T,)``, the prefix length ``P`` and the answer position."""

    example: Example
    ids: torch.Tensor
    P: int
    answer_pos: int  # index of the first answer token in ids


def make_items(tokenizer: PreTrainedTokenizerBase, examples: Sequence[Example],
               prefix_frac: float = 0.5) -> list[Item]:
    """Tokenise examples and cut each after ``max(2, floor(prefix_frac * prompt_len))`` tokens."""
    if not 0 < prefix_frac < 1:
        raise ValueError(f"prefix_frac must be in (0, 1), got {prefix_frac}")
    items = []
    for e in examples:
        p = tokenizer(e.prompt)["input_ids"]
        full = tokenizer(e.text)["input_ids"] + [tokenizer.eos_token_id]
        if full[:len(p)] != p:
            raise ValueError(f"prompt tokens are not a prefix of the full text: {e.prompt!r}")
        P = min(len(p) - 1, max(2, int(prefix_frac * len(p))))
        items.append(Item(e, torch.tensor(full), P, len(p)))
    return items


@torch.no_grad()
def dense_preacts(model: PreTrainedModel, ids: torch.Tensor) -> list[torch.Tensor]:
    """Per-layer pre-activations ``(T, d_ff)`` of one dense forward over ``ids (T,)``."""
    store: dict[int, list[torch.Tensor]] = {}
    with capture_preactivations(model, store):
        model(input_ids=ids[None], use_cache=False)
    return [torch.cat(store[i]) for i in sorted(store)]


SetRule = Callable[[list[torch.Tensor]], dict[int, torch.Tensor]]
"""From the prefill's per-layer pre-activations, the fixed neuron set per sparsified layer."""


def method_rules(method: str, layers: Sequence[int], token_sparsity: float, sparsity: float,
                 rng: np.random.Generator, static: dict[int, torch.Tensor] | None = None,
                 index: SimilarityIndex | None = None, predictors: dict | None = None):
    """``("sets", rule)`` for fixed-set methods or ``("mask", selector)`` for per-token ones."""
    if method == "dense":
        return "dense", None
    if method == "SparseInfer":
        return "sets", lambda acts: {i: core_neurons(acts[i], token_sparsity, sparsity) for i in layers}
    if method == "SparseInfer (similarity)":
        if index is None:
            raise ValueError("the similarity variant needs a fitted SimilarityIndex")
        return "sets", index.sets_for
    if method == "random":
        return "sets", lambda acts: random_sets(rng, acts[0].shape[1], layers, sparsity)
    if method == "static hot":
        if static is None:
            raise ValueError("static hot needs calibrated sets")
        return "sets", lambda acts: static
    if method == "per-token oracle":
        return "mask", oracle_selector(sparsity)
    if method == "DejaVu":
        if predictors is None:
            raise ValueError("DejaVu needs trained predictors")
        return "mask", dejavu_selector(predictors, sparsity)
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


@torch.no_grad()
def continuation_scores(model: PreTrainedModel, item: Item, kind: str, rule, layers: Sequence[int],
                        tokenizer: PreTrainedTokenizerBase) -> tuple[float, int, bool]:
    """Prefill ``ids[:P]`` dense, pick neurons, decode ``ids[P:]`` sparsely.

    Returns:
        ``(summed NLL in nats, tokens scored, answer correct)``. The first
        continuation token is predicted by the (dense) prefill, as in real decoding.
    """
    ids, P = item.ids, item.P
    store: dict[int, list[torch.Tensor]] = {}
    with capture_preactivations(model, store):
        pre = model(input_ids=ids[None, :P], use_cache=True)
    acts = [torch.cat(store[i]) for i in sorted(store)]
    with ExitStack() as stack:
        if kind == "sets":
            stack.enter_context(sliced_ffn(model, rule(acts)))  # gathered once, after prefill
        elif kind == "mask":
            stack.enter_context(masked_ffn(model, rule, list(layers)))
        out = model(input_ids=ids[None, P:-1], use_cache=True, **with_cache(model, kv_cache(pre)))
    logits = torch.cat([pre.logits[0, -1:], out.logits[0]]).float()  # predicts ids[P:]
    nll = torch.nn.functional.cross_entropy(logits, ids[P:], reduction="sum")
    guess = int(logits[item.answer_pos - P].argmax())
    correct = check_answer(item.example, tokenizer.decode([guess], skip_special_tokens=True))
    return float(nll), len(ids) - P, correct


@dataclass
class Quality:
    """Continuation perplexity and answer accuracy of one method on a set of items."""

    ppl: float
    accuracy: float
    per_family: dict[str, float] = field(default_factory=dict)


def evaluate_method(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, items: Sequence[Item],
                    kind: str, rule, layers: Sequence[int]) -> Quality:
    """:func:`continuation_scores` over ``items``: perplexity ``exp(sum NLL / sum tokens)`` and accuracy."""
    total, count, hits = 0.0, 0, {}
    for it in items:
        nll, n, ok = continuation_scores(model, it, kind, rule, layers, tokenizer)
        total, count = total + nll, count + n
        hits.setdefault(it.example.family, []).append(ok)
    fam = {f: float(np.mean(v)) for f, v in hits.items()}
    return Quality(math.exp(total / count), float(np.mean([x for v in hits.values() for x in v])), fam)


# ---------------------------------------------------------------------------
# the two observations: stability and similarity


def stability(acts_list: Sequence[list[torch.Tensor]], items: Sequence[Item], layers: Sequence[int],
              token_sparsity: float, sparsity: float) -> dict[str, float]:
    """Jaccard of a prompt's prefix core set and its continuation's core set, per layer averaged.

    Returns ``{"self": ..., "other": ..., "random": ...}``: ``self`` pairs a
    prefix with its own continuation, ``other`` with the next item's (a different
    family or topic), ``random`` is the expected Jaccard of two random ``k``-sets,
    ``g / (2 - g)`` with ``g = k / d_ff``.
    """
    n = len(items)
    if n < 2:
        raise ValueError("stability needs at least two items")
    pre = [{i: core_neurons(a[i][:it.P], token_sparsity, sparsity) for i in layers}
           for a, it in zip(acts_list, items)]
    post = [{i: core_neurons(a[i][it.P:], token_sparsity, sparsity) for i in layers}
            for a, it in zip(acts_list, items)]
    self_j = [np.mean([jaccard(pre[j][i], post[j][i]) for i in layers]) for j in range(n)]
    other_j = [np.mean([jaccard(pre[j][i], post[(j + 1) % n][i]) for i in layers]) for j in range(n)]
    d_ff = acts_list[0][0].shape[1]
    g = budget(d_ff, sparsity) / d_ff
    return {"self": float(np.mean(self_j)), "other": float(np.mean(other_j)), "random": g / (2 - g)}


def similarity(acts_list: Sequence[list[torch.Tensor]], labels: Sequence[str], layers: Sequence[int],
               token_sparsity: float, sparsity: float) -> tuple[dict[str, float], np.ndarray, list[str]]:
    """Mean Jaccard of whole-prompt core sets for pairs with the same label vs different labels.

    Returns:
        ``({"within": ..., "across": ...}, M, names)`` where ``M[a, b]`` is the
        mean Jaccard between prompts labelled ``names[a]`` and ``names[b]``
        (distinct prompts only on the diagonal).
    """
    if len(acts_list) != len(labels) or len(labels) < 2:
        raise ValueError("similarity needs one label per prompt and at least two prompts")
    cores = [{i: core_neurons(a[i], token_sparsity, sparsity) for i in layers} for a in acts_list]
    n = len(cores)
    J = np.eye(n)
    for x in range(n):
        for y in range(x + 1, n):
            J[x, y] = J[y, x] = np.mean([jaccard(cores[x][i], cores[y][i]) for i in layers])
    lab = np.asarray(labels)
    same = (lab[:, None] == lab[None, :]) & ~np.eye(n, dtype=bool)
    diff = lab[:, None] != lab[None, :]
    names = sorted(set(labels), key=list(labels).index)
    off = ~np.eye(n, dtype=bool)
    M = np.full((len(names), len(names)), np.nan)
    for r, a in enumerate(names):
        for q, b in enumerate(names):
            pick = np.ix_(lab == a, lab == b)
            vals = J[pick][off[pick]]
            if vals.size:
                M[r, q] = vals.mean()
    return {"within": float(J[same].mean()), "across": float(J[diff].mean())}, M, names
