"""The protocol: prefill the full prompt densely, decode with the chosen neurons.

As in the paper (and CoreInfer's code), the whole prompt is prefilled by the
dense model; each method picks its neurons from the prefill's pre-activations;
only the decoding steps use them. Two tasks, both from the substrate corpus:

``qa``
    the corpus's own prompts (families chosen by the chapter); greedy generation
    of a few tokens, scored by :func:`~minirepro.core.lm.corpus.check_answer`
    (exact match of the answer's words). The answer's first token is predicted
    by the dense prefill, so a one-token answer is decided before any neuron is
    dropped; what follows it (the end of the word, ``<eos>``) is decoded sparsely.
``trace``
    the ``relay`` family cut after agent A's task: the prompt is A's role and the
    task, the continuation A's worked trace (``step 1 : 5 + 1 = 6 . ... done .``),
    a multi-token answer of 15 to 60 tokens.

For every item the reference continuation (answer and ``<eos>``, or the trace)
is also fed through the model with the KV cache (teacher forcing; one forward
over all its tokens is the same computation as decoding them one at a time).
At each decoded position (all but the first, which the prefill predicts) we
record the NLL of the reference token and whether the method's argmax equals
the dense model's argmax: *agreement with the dense model's greedy token*,
informative even where the dense model's answers are mostly wrong.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirepro.core.lm.corpus import Example, check_answer
from minirepro.core.lm.models import prefill
from minirepro.papers.sparseinfer.baselines import (
    SimilarityIndex,
    budget,
    dejavu_selector,
    oracle_selector,
    random_sets,
)
from minirepro.papers.sparseinfer.neurons import (
    capture_preactivations,
    core_neurons,
    ffn_blocks,
    jaccard,
    masked_ffn,
    sliced_ffn,
)

METHODS: tuple[str, ...] = ("dense", "SparseInfer", "SparseInfer (similarity)", "random",
                            "static hot", "per-token oracle", "DejaVu", "FFN skipped")


@dataclass
class Item:
    """One tokenised test prompt.

    Attributes:
        example: the corpus example (``answer`` is the reference continuation's text).
        task: ``"qa"`` or ``"trace"``.
        prompt: ``(T,)`` prompt ids (with ``<bos>``).
        cont: ``(C,)`` reference continuation ids: the answer's tokens, then ``<eos>`` for ``qa``.
    """

    example: Example
    task: str
    prompt: torch.Tensor
    cont: torch.Tensor

    @property
    def family(self) -> str:
        return self.example.family if self.task == "qa" else "trace"


def trace_example(e: Example) -> Example:
    """``[reconstruction]`` A ``relay`` example cut after agent A's task; the answer is A's worked trace."""
    if e.family != "relay" or " step 1 :" not in e.prompt:
        raise ValueError("trace_example needs a relay example")
    head, rest = e.prompt.split(" step 1 :", 1)
    return Example("relay", head, "step 1 :" + rest.split(" done .")[0] + " done .", "trace")


def make_items(tokenizer: PreTrainedTokenizerBase, examples: Sequence[Example], task: str = "qa") -> list[Item]:
    """[reconstruction] Tokenise ``examples``: prompt ids and the reference continuation (plus ``<eos>`` for ``qa``)."""
    if task not in ("qa", "trace"):
        raise ValueError(f"task must be 'qa' or 'trace', got {task!r}")
    items = []
    for e in examples:
        p = tokenizer(e.prompt)["input_ids"]
        full = tokenizer(e.text)["input_ids"] + ([tokenizer.eos_token_id] if task == "qa" else [])
        if full[:len(p)] != p or len(full) <= len(p):
            raise ValueError(f"prompt tokens are not a proper prefix of the text: {e.prompt!r}")
        items.append(Item(e, task, torch.tensor(p), torch.tensor(full[len(p):])))
    return items


SetRule = Callable[[list[torch.Tensor]], dict[int, torch.Tensor]]
"""From the prefill's per-layer pre-activations ``(T, d_ff)``, the fixed neuron set per sparsified layer."""


def method_rules(method: str, layers: Sequence[int], token_sparsity: float, sparsity: float,
                 rng: np.random.Generator, static: dict[int, torch.Tensor] | None = None,
                 index: SimilarityIndex | None = None, predictors: dict | None = None):
    """``("dense", None)``, ``("sets", rule)`` for fixed-set methods or ``("mask", selector)`` for per-token ones."""
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
    if method == "FFN skipped":
        return "mask", lambda _i, _x, a: torch.zeros_like(a, dtype=torch.bool)
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


@torch.no_grad()
def prefill_with_preacts(model: PreTrainedModel, prompt: torch.Tensor):
    """Dense prefill of ``prompt (T,)``: last logits ``(V,)``, the ``DynamicCache``, pre-activations per layer ``(T, d_ff)``."""
    store: dict[int, list[torch.Tensor]] = {}
    with capture_preactivations(model, store):
        logits, cache = prefill(model, prompt[None])
    return logits[0, -1], cache, [torch.cat(store[i]) for i in sorted(store)]


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


@dataclass
class Decoded:
    """One item decoded by one method.

    Attributes:
        generated: greedy token ids (the first from the dense prefill).
        logits: ``(C, V)`` teacher-forced logits on the reference continuation
            (row ``j`` predicts ``cont[j]``; row 0 is the prefill's).
        sets: the fixed neuron sets used (``None`` for dense and per-token methods).
    """

    generated: list[int]
    logits: torch.Tensor
    sets: dict[int, torch.Tensor] | None


@torch.no_grad()
def decode_item(model: PreTrainedModel, item: Item, kind: str, rule, layers: Sequence[int],
                max_new_tokens: int, eos_token_id: int | None, generate: bool = True,
                pre: tuple | None = None) -> Decoded:
    """[reconstruction] protocol: dense prefill, pick neurons, decode sparsely (greedy, teacher-forced).

    Prefill ``item.prompt`` densely, pick neurons, then decode sparsely.

    The sets are gathered once, after the prefill (:func:`sliced_ffn`); per-token
    methods mask the decoding steps (:func:`masked_ffn`). ``pre`` is a prefill
    already computed by :func:`prefill_with_preacts` (it is the same for every
    method, so it is computed once per item); its cache is copied, never changed.
    """
    first, cache, acts = pre if pre is not None else prefill_with_preacts(model, item.prompt)
    gen_cache, tf_cache = copy.deepcopy(cache), copy.deepcopy(cache)
    sets = rule(acts) if kind == "sets" else None
    with ExitStack() as stack:
        if kind == "sets":
            stack.enter_context(sliced_ffn(model, sets))
        elif kind == "mask":
            stack.enter_context(masked_ffn(model, rule, list(layers)))
        elif kind != "dense":
            raise ValueError(f"kind must be 'dense', 'sets' or 'mask', got {kind!r}")
        gen = greedy_steps(model, first, gen_cache, max_new_tokens, eos_token_id) if generate else []
        rest = (model(input_ids=item.cont[None, :-1], cache=tf_cache, use_cache=True).logits[0]
                if len(item.cont) > 1 else first[None][:0])
    return Decoded(gen, torch.cat([first[None], rest]).float(), sets)


@dataclass
class ItemScore:
    """Scores of one item under one method (decoded positions are all but the first)."""

    correct: bool | None
    nll: float
    n_decoded: int
    agree: int


def score_item(item: Item, d: Decoded, dense: Decoded, tokenizer: PreTrainedTokenizerBase) -> ItemScore:
    """Exact match of the generation, NLL of the reference and agreement with dense at decoded positions."""
    correct = (check_answer(item.example, tokenizer.decode(d.generated, skip_special_tokens=True))
               if d.generated else None)
    lg, ref = d.logits[1:], item.cont[1:]
    nll = float(torch.nn.functional.cross_entropy(lg, ref, reduction="sum")) if len(ref) else 0.0
    agree = int((lg.argmax(-1) == dense.logits[1:].argmax(-1)).sum())
    return ItemScore(correct, nll, len(ref), agree)


@torch.no_grad()
def full_set_mismatches(model: PreTrainedModel, items: Sequence[Item], layers: Sequence[int],
                        eos_token_id: int | None) -> int:
    """Tokens (generated, and top tokens under teacher forcing) where slicing to *every* neuron differs from dense.

    A check of the pipeline: sliced weights that keep all ``d_ff`` neurons are the
    dense model, so the count must be 0.
    """
    blocks = {b.index: b for b in ffn_blocks(model)}
    full = {i: torch.arange(blocks[i].d_ff) for i in layers}
    bad = 0
    for it in items:
        pre = prefill_with_preacts(model, it.prompt)
        gen = it.task == "qa"
        dn = decode_item(model, it, "dense", None, layers, len(it.cont), eos_token_id, gen, pre)
        ds = decode_item(model, it, "sets", lambda _a: full, layers, len(it.cont), eos_token_id, gen, pre)
        bad += sum(a != b for a, b in zip(dn.generated, ds.generated)) + abs(len(dn.generated) - len(ds.generated))
        bad += int((dn.logits.argmax(-1) != ds.logits.argmax(-1)).sum())
    return bad


# ---------------------------------------------------------------------------
# the two observations: stability and similarity


def stability(acts_list: Sequence[list[torch.Tensor]], n_prompt: Sequence[int], layers: Sequence[int],
              token_sparsity: float, sparsity: float, groups: Sequence[str] | None = None) -> dict[str, float]:
    """The paper's stability observation: Jaccard of a prompt's and its continuation's core sets, averaged over layers.

    Args:
        acts_list: per item, the dense pre-activations ``(T + C, d_ff)`` per layer
            of the prompt followed by its continuation.
        n_prompt: per item, the prompt length ``T``.

        groups: per item, its family; when given, the "other" continuation is the
            next item's *of the same family* (cyclically within the family), so
            the two continuations differ in content, not in format.

    Returns ``{"self": ..., "other": ..., "random": ...}``: ``self`` pairs a
    prompt with its own continuation, ``other`` with the next item's, ``random``
    is the expected Jaccard of two random ``k``-sets, ``g / (2 - g)`` with ``g = k / d_ff``.
    """
    n = len(acts_list)
    if n < 2 or len(n_prompt) != n:
        raise ValueError("stability needs at least two items and one prompt length per item")
    if groups is None:
        partner = [(j + 1) % n for j in range(n)]
    else:
        if len(groups) != n:
            raise ValueError("stability needs one group per item")
        members: dict[str, list[int]] = {}
        for j, g_ in enumerate(groups):
            members.setdefault(g_, []).append(j)
        if any(len(v) < 2 for v in members.values()):
            raise ValueError("every group needs at least two items")
        partner = [0] * n
        for v in members.values():
            for r, j in enumerate(v):
                partner[j] = v[(r + 1) % len(v)]
    pre = [{i: core_neurons(a[i][:t], token_sparsity, sparsity) for i in layers}
           for a, t in zip(acts_list, n_prompt)]
    post = [{i: core_neurons(a[i][t:], token_sparsity, sparsity) for i in layers}
            for a, t in zip(acts_list, n_prompt)]
    self_j = [np.mean([jaccard(pre[j][i], post[j][i]) for i in layers]) for j in range(n)]
    other_j = [np.mean([jaccard(pre[j][i], post[partner[j]][i]) for i in layers]) for j in range(n)]
    d_ff = acts_list[0][0].shape[1]
    g = budget(d_ff, sparsity) / d_ff
    return {"self": float(np.mean(self_j)), "other": float(np.mean(other_j)), "random": g / (2 - g)}


def similarity(acts_list: Sequence[list[torch.Tensor]], labels: Sequence[str], layers: Sequence[int],
               token_sparsity: float, sparsity: float) -> tuple[dict[str, float], np.ndarray, list[str]]:
    """The paper's similarity observation: mean Jaccard of whole-prompt core sets, same label vs different labels.

    Returns:
        ``({"within": ..., "across": ...}, M, names)`` where ``M[a, b]`` is the
        mean Jaccard between prompts labelled ``names[a]`` and ``names[b]``
        (distinct prompts only on the diagonal).
    """
    if len(acts_list) != len(labels) or len(labels) < 2:
        raise ValueError("similarity needs one label per prompt and at least two prompts")
    J = core_jaccard_matrix(acts_list, layers, token_sparsity, sparsity)
    n = len(J)
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
    within = float(J[same].mean()) if same.any() else float("nan")
    return {"within": within, "across": float(J[diff].mean())}, M, names


def core_jaccard_matrix(acts_list: Sequence[list[torch.Tensor]], layers: Sequence[int],
                        token_sparsity: float, sparsity: float) -> np.ndarray:
    """``(n, n)`` Jaccard of whole-prompt core sets, averaged over ``layers`` (1 on the diagonal)."""
    cores = [{i: core_neurons(a[i], token_sparsity, sparsity) for i in layers} for a in acts_list]
    n = len(cores)
    J = np.eye(n)
    for x in range(n):
        for y in range(x + 1, n):
            J[x, y] = J[y, x] = np.mean([jaccard(cores[x][i], cores[y][i]) for i in layers])
    return J


def token_jaccard_matrix(token_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """``(n, n)`` Jaccard of the prompts' token-id *sets* (1 on the diagonal)."""
    sets = [set(int(t) for t in ids) for ids in token_ids]
    n = len(sets)
    T = np.eye(n)
    for x in range(n):
        for y in range(x + 1, n):
            T[x, y] = T[y, x] = len(sets[x] & sets[y]) / max(1, len(sets[x] | sets[y]))
    return T


def token_overlap_control(core_j: np.ndarray, token_j: np.ndarray, labels: Sequence[str]) -> dict[str, float]:
    """[reconstruction] The similarity observation with token overlap held fixed.

    Over all pairs of distinct prompts, least squares of the core-set Jaccard on
    an intercept, the pair's token-set Jaccard and a same-label indicator:
    ``J_core = b0 + b_tok * J_tok + b_same * [same label]``. ``b_same`` is the
    same-topic gain in core-set Jaccard at equal token overlap (NaN when there is
    no same-label pair or no different-label pair).

    Returns ``{"same-topic effect": b_same, "token slope": b_tok, "token J within": ...,
    "token J across": ...}`` (the last two: mean token Jaccard of same- and different-label pairs).
    """
    n = len(labels)
    if core_j.shape != (n, n) or token_j.shape != (n, n) or n < 3:
        raise ValueError("token_overlap_control needs two (n, n) matrices, n >= 3, and one label per prompt")
    lab = np.asarray(labels)
    iu = np.triu_indices(n, 1)
    same = (lab[:, None] == lab[None, :])[iu].astype(float)
    y, t = core_j[iu], token_j[iu]
    out = {"same-topic effect": float("nan"), "token slope": float("nan"),
           "token J within": float(t[same == 1].mean()) if same.any() else float("nan"),
           "token J across": float(t[same == 0].mean()) if (same == 0).any() else float("nan")}
    if 0 < same.sum() < len(same):
        X = np.column_stack([np.ones_like(y), t, same])
        coef = np.linalg.lstsq(X, y, rcond=None)[0]
        out["same-topic effect"], out["token slope"] = float(coef[2]), float(coef[1])
    return out
