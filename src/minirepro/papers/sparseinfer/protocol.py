"""The protocol: prefill the prompt densely, score the held-out continuation with the chosen neurons.

As in the paper (and CoreInfer's code), the whole prompt is prefilled by the dense model;
each method picks its neurons from the prefill's FFN activations (or offline); only the
continuation's tokens use them. The continuation is the reference text, fed through the
model after the prompt's KV cache (teacher forcing: one forward over its tokens is the
computation of decoding them one at a time). At each *decoded* position (every
continuation token but the first, which the dense prefill predicts) we record the NLL of
the reference token and whether the method's top token equals the dense model's.

Units are batched: prompts and continuations are right-padded, the continuation's positions
are given explicitly and its attention mask skips the prompt's pad slots; a fixed neuron set
per unit is applied as a ``(B, 1, d_ff)`` mask on the FFN's hidden activation, which equals
slicing the FFN once per unit (:func:`sliced_reference` is the one-unit check).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirepro.core.lm.models import prefill
from minirepro.core.lm.train import pad
from minirepro.papers.sparseinfer.baselines import (
    SimilarityIndex,
    budget,
    oracle_selector,
    random_sets,
)
from minirepro.papers.sparseinfer.neurons import (
    capture_hidden,
    core_neurons,
    ffn_blocks,
    masked_ffn,
    sliced_ffn,
)
from minirepro.papers.sparseinfer.texts import Unit

METHODS: tuple[str, ...] = ("dense", "SparseInfer", "SparseInfer (similarity)", "random",
                            "static hot", "per-token oracle", "FFN skipped")
SET_METHODS: tuple[str, ...] = ("SparseInfer", "SparseInfer (similarity)", "random", "static hot")


@dataclass
class Batch:
    """Tokenised units, right-padded.

    Attributes:
        prompt_ids, prompt_mask: ``(B, Tp)`` prompt ids and their mask (1 = token).
        cont_ids, cont_mask: ``(B, Tc)`` continuation ids and mask.
        prompt_len, cont_len: ``(B,)`` true lengths.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    cont_ids: torch.Tensor
    cont_mask: torch.Tensor
    prompt_len: torch.Tensor
    cont_len: torch.Tensor

    def __len__(self) -> int:
        return int(self.prompt_ids.shape[0])


def encode_units(tokenizer: PreTrainedTokenizerBase, units: Sequence[Unit]) -> Batch:
    """[reconstruction] Tokenise ``units``: the prompt with the tokenizer's specials, the continuation without."""
    if not units:
        raise ValueError("encode_units needs at least one unit")
    p = [tokenizer(u.prompt)["input_ids"] for u in units]
    c = [tokenizer(u.continuation, add_special_tokens=False)["input_ids"] for u in units]
    if any(len(x) < 2 for x in c):
        raise ValueError("every continuation needs at least two tokens (one decoded position)")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    pi, pm = pad(p, pad_id)  # the substrate's right-padding (core.lm.train.pad)
    ci, cm = pad(c, pad_id)
    return Batch(pi, pm, ci, cm, pm.sum(1), cm.sum(1))


def _rows(b: Batch, idx: Sequence[int]) -> Batch:
    idx = torch.as_tensor(idx, dtype=torch.long)
    return Batch(*(getattr(b, f)[idx] for f in ("prompt_ids", "prompt_mask", "cont_ids", "cont_mask",
                                                "prompt_len", "cont_len")))


@torch.no_grad()
def prompt_pass(model: PreTrainedModel, b: Batch):
    """Dense prefill of the prompts: the ``DynamicCache`` and per layer the hidden activations ``(B, Tp, d_ff)``."""
    store: dict[int, list[torch.Tensor]] = {}
    with capture_hidden(model, store):
        _, cache = prefill(model, b.prompt_ids, b.prompt_mask)
    return cache, [torch.cat(store[i]) for i in sorted(store)]


@torch.no_grad()
def continuation_pass(model: PreTrainedModel, b: Batch, cache, select=None, layers: Sequence[int] = (),
                      capture: bool = False, prompt_of: Batch | None = None):
    """The continuations after the prompts' cache (copied, never changed); ``(logits (B, Tc, V), hidden)``.

    ``select`` (``(layer, h) -> keep mask``) masks the FFNs of ``layers``; ``capture``
    returns the hidden activations ``(B, Tc, d_ff)`` per layer (else ``None``);
    ``prompt_of`` is the batch whose prompts the cache holds (default ``b``).
    """
    pb = b if prompt_of is None else prompt_of
    c = copy.deepcopy(cache)
    pos = pb.prompt_len[:, None] + torch.arange(b.cont_ids.shape[1])[None]
    mask = torch.cat([pb.prompt_mask, b.cont_mask], dim=1)
    store: dict[int, list[torch.Tensor]] = {}
    with ExitStack() as stack:
        if select is not None:
            stack.enter_context(masked_ffn(model, select, list(layers)))
        if capture:
            stack.enter_context(capture_hidden(model, store))
        out = model(input_ids=b.cont_ids, attention_mask=mask, position_ids=pos, cache=c, use_cache=True)
    return out.logits.float(), ([torch.cat(store[i]) for i in sorted(store)] if capture else None)


def decoded_scores(logits: torch.Tensor, dense_logits: torch.Tensor, b: Batch) -> tuple[np.ndarray, np.ndarray]:
    """Per unit: mean NLL (nats/token) of the reference at the decoded positions, and the share
    of those positions where the top token equals the dense model's."""
    lg, ref = logits[:, :-1], b.cont_ids[:, 1:]
    valid = b.cont_mask[:, 1:].bool()
    nll = torch.nn.functional.cross_entropy(lg.transpose(1, 2), ref, reduction="none")
    agree = (lg.argmax(-1) == dense_logits[:, :-1].argmax(-1)).float()
    n = valid.sum(1).double()
    return ((nll * valid).sum(1).double() / n).numpy(), ((agree * valid).sum(1).double() / n).numpy()


def set_masks(sets: Sequence[dict[int, torch.Tensor]], layers: Sequence[int], d_ff: int) -> dict[int, torch.Tensor]:
    """Eq. (sparseinfer-eq-decode) as masks: per layer ``(B, 1, d_ff)`` bool, row ``b`` the set of unit ``b``."""
    out = {}
    for i in layers:
        m = torch.zeros(len(sets), 1, d_ff, dtype=torch.bool)
        for r, s in enumerate(sets):
            m[r, 0, s[i]] = True
        out[i] = m
    return out


def other_topic(topics: Sequence[str]) -> list[int]:
    """For each unit, the next unit (cyclically) whose topic differs."""
    n = len(topics)
    if len(set(topics)) < 2:
        raise ValueError("other_topic needs at least two topics")
    return [next((j + s) % n for s in range(1, n) if topics[(j + s) % n] != topics[j]) for j in range(n)]


@torch.no_grad()
def evaluate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, units: Sequence[Unit],
             layers: Sequence[int], token_sparsity: float, sparsity: float, rng: np.random.Generator,
             static: dict[int, torch.Tensor] | None = None, index: SimilarityIndex | None = None,
             methods: Sequence[str] = METHODS, chunk: int = 32) -> dict:
    """Every method on every unit, in chunks of ``chunk`` units (one prompt pass, one pass per method).

    Returns ``{"nll": {method: (n,)}, "agree": {method: (n,)}, "prompt_core": [...],
    "cont_core": [...], "nll_other_prompt": (n,)}``: per unit the decoded NLL and agreement with
    dense, the core sets (per layer) of its prompt and of its continuation (dense activations),
    and the dense NLL of its continuation after a prompt on another topic (same chunk).
    """
    if "dense" not in methods:
        raise ValueError("methods must include 'dense' (agreement is measured against it)")
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; expected some of {METHODS}")
    d_ff = ffn_blocks(model)[0].d_ff
    nll: dict[str, list] = {m: [] for m in methods}
    agree: dict[str, list] = {m: [] for m in methods}
    p_core, c_core, other_nll = [], [], []
    for s in range(0, len(units), chunk):
        us = list(units[s:s + chunk])
        b = encode_units(tokenizer, us)
        cache, ph = prompt_pass(model, b)
        pc = [{i: core_neurons(ph[i][r, :int(b.prompt_len[r])], token_sparsity, sparsity) for i in layers}
              for r in range(len(b))]
        dense, ch = continuation_pass(model, b, cache, capture=True)
        p_core += pc
        c_core += [{i: core_neurons(ch[i][r, :int(b.cont_len[r])], token_sparsity, sparsity) for i in layers}
                   for r in range(len(b))]
        if len({u.topic for u in us}) > 1:  # the precondition: the same continuation after another topic
            perm = other_topic([u.topic for u in us])
            c2 = copy.deepcopy(cache)
            c2.reorder_cache(torch.tensor(perm))
            lo, _ = continuation_pass(model, b, c2, prompt_of=_rows(b, perm))
            other_nll += list(decoded_scores(lo, dense, b)[0])
        else:
            other_nll += [float("nan")] * len(b)
        for m in methods:
            if m == "dense":
                lg = dense
            else:
                sel = _selector(m, pc, ph, b, layers, token_sparsity, sparsity, d_ff, rng, static, index)
                lg, _ = continuation_pass(model, b, cache, select=sel, layers=layers)
            x, y = decoded_scores(lg, dense, b)
            nll[m] += list(x)
            agree[m] += list(y)
    return {"nll": {m: np.asarray(v) for m, v in nll.items()},
            "agree": {m: np.asarray(v) for m, v in agree.items()},
            "prompt_core": p_core, "cont_core": c_core, "nll_other_prompt": np.asarray(other_nll)}


def _selector(m, pc, ph, b, layers, token_sparsity, sparsity, d_ff, rng, static, index):
    if m == "per-token oracle":
        return oracle_selector(sparsity)
    if m == "FFN skipped":
        return lambda _i, h: torch.zeros(1, 1, h.shape[-1], dtype=torch.bool)
    if m == "SparseInfer":
        sets = pc
    elif m == "random":
        sets = [random_sets(rng, d_ff, layers, sparsity) for _ in range(len(b))]
    elif m == "static hot":
        if static is None:
            raise ValueError("static hot needs calibrated sets")
        sets = [static] * len(b)
    elif m == "SparseInfer (similarity)":
        if index is None:
            raise ValueError("the similarity variant needs a fitted SimilarityIndex")
        sets = [index.sets_for([h[r, :int(b.prompt_len[r])] for h in ph]) for r in range(len(b))]
    else:  # pragma: no cover - checked by evaluate
        raise ValueError(m)
    masks = set_masks(sets, layers, d_ff)
    return lambda i, _h: masks[i]


@torch.no_grad()
def sliced_reference(model: PreTrainedModel, prompt: torch.Tensor, cont: torch.Tensor,
                     sets: dict[int, torch.Tensor]) -> torch.Tensor:
    """One unit the paper's way: dense prefill of ``prompt (T,)``, then ``cont (C,)`` with the FFN
    sliced once to ``sets`` (:func:`sliced_ffn`); the logits ``(C, V)``."""
    _, cache = prefill(model, prompt[None])
    with sliced_ffn(model, sets):
        out = model(input_ids=cont[None], cache=cache, use_cache=True)
    return out.logits[0].float()


def masked_vs_sliced(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, units: Sequence[Unit],
                     layers: Sequence[int], token_sparsity: float, sparsity: float) -> float:
    """Check of the batched protocol: the largest |logit difference| between the batched, masked
    SparseInfer pass and :func:`sliced_reference`, over ``units`` (their decoded positions)."""
    b = encode_units(tokenizer, units)
    cache, ph = prompt_pass(model, b)
    pc = [{i: core_neurons(ph[i][r, :int(b.prompt_len[r])], token_sparsity, sparsity) for i in layers}
          for r in range(len(b))]
    masks = set_masks(pc, layers, ffn_blocks(model)[0].d_ff)
    lg, _ = continuation_pass(model, b, cache, select=lambda i, _h: masks[i], layers=layers)
    worst = 0.0
    for r in range(len(b)):
        tp, tc = int(b.prompt_len[r]), int(b.cont_len[r])
        ref = sliced_reference(model, b.prompt_ids[r, :tp], b.cont_ids[r, :tc], pc[r])
        worst = max(worst, float((lg[r, :tc] - ref).abs().max()))
    return worst


# ---------------------------------------------------------------------------
# the two observations: stability and similarity


def multi_hot(sets: Sequence[dict[int, torch.Tensor]], layer: int, d_ff: int) -> np.ndarray:
    """``(n, d_ff)`` 0/1 matrix of the units' sets at ``layer``."""
    x = np.zeros((len(sets), d_ff))
    for r, s in enumerate(sets):
        x[r, s[layer].numpy()] = 1.0
    return x


def jaccard_matrix(a: Sequence[dict[int, torch.Tensor]], b: Sequence[dict[int, torch.Tensor]],
                   layers: Sequence[int], d_ff: int) -> np.ndarray:
    """``(n_a, n_b)`` Jaccard of ``a[r]`` and ``b[q]``'s sets, averaged over ``layers``."""
    out = np.zeros((len(a), len(b)))
    for i in layers:
        xa, xb = multi_hot(a, i, d_ff), multi_hot(b, i, d_ff)
        inter = xa @ xb.T
        union = xa.sum(1)[:, None] + xb.sum(1)[None] - inter
        out += np.where(union > 0, inter / np.maximum(union, 1), 1.0)
    return out / len(layers)


def stability(prompt_core: Sequence[dict], cont_core: Sequence[dict], units: Sequence[Unit],
              layers: Sequence[int], d_ff: int, sparsity: float) -> dict[str, np.ndarray | float]:
    """The paper's stability observation, per unit: Jaccard of the prompt's core set with

    its own continuation's (``self``), with the continuation of the next unit on another topic
    (``other topic``) and of its same-topic partner, which shares no sentence with it
    (``same topic``); ``random`` is the expected Jaccard of two random ``k``-sets,
    ``g / (2 - g)`` with ``g = k / d_ff``.
    """
    n = len(units)
    if n < 2 or len(prompt_core) != n or len(cont_core) != n:
        raise ValueError("stability needs at least two units and one core set of each kind per unit")
    J = jaccard_matrix(prompt_core, cont_core, layers, d_ff)
    oth = other_topic([u.topic for u in units])
    g = budget(d_ff, sparsity) / d_ff
    return {"self": np.diag(J).copy(), "other topic": J[np.arange(n), oth],
            "same topic": J[np.arange(n), [u.partner for u in units]], "random": g / (2 - g)}


def similarity(prompt_core: Sequence[dict], labels: Sequence[str], layers: Sequence[int],
               d_ff: int) -> tuple[dict[str, np.ndarray], np.ndarray, list[str], np.ndarray]:
    """The paper's similarity observation: per unit, the mean Jaccard of its prompt's core set with

    the other prompts on its topic (``within``) and on other topics (``across``). Also returns
    the topic-by-topic mean matrix ``M`` (distinct prompts only), its ``names`` and the full
    ``(n, n)`` Jaccard matrix.
    """
    n = len(labels)
    if n < 3 or len(prompt_core) != n:
        raise ValueError("similarity needs at least three prompts and one label per prompt")
    J = jaccard_matrix(prompt_core, prompt_core, layers, d_ff)
    lab = np.asarray(labels)
    same = (lab[:, None] == lab[None, :]) & ~np.eye(n, dtype=bool)
    diff = lab[:, None] != lab[None, :]
    if not same.any(axis=1).all() or not diff.any(axis=1).all():
        raise ValueError("every prompt needs another prompt on its topic and one on another topic")
    within = (J * same).sum(1) / same.sum(1)
    across = (J * diff).sum(1) / diff.sum(1)
    names = sorted(set(labels), key=list(labels).index)
    off = ~np.eye(n, dtype=bool)
    M = np.array([[J[np.ix_(lab == a, lab == c)][off[np.ix_(lab == a, lab == c)]].mean() for c in names]
                  for a in names])
    return {"within": within, "across": across}, M, names, J


def token_jaccard_matrix(token_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """``(n, n)`` Jaccard of the prompts' token-id *sets* (1 on the diagonal)."""
    sets = [set(int(t) for t in ids) for ids in token_ids]
    n = len(sets)
    T = np.eye(n)
    for x in range(n):
        for y in range(x + 1, n):
            T[x, y] = T[y, x] = len(sets[x] & sets[y]) / max(1, len(sets[x] | sets[y]))
    return T


def token_overlap_control(core_j: np.ndarray, token_j: np.ndarray, labels: Sequence[str]) -> dict:
    """[reconstruction] The similarity observation with token overlap held fixed.

    Over all pairs of distinct prompts, least squares of the core-set Jaccard on an
    intercept, the pair's token-set Jaccard and a same-label indicator:
    ``J_core = b0 + b_tok * J_tok + b_same * [same label]``. Per unit, the same-topic gain at
    equal token overlap is the mean residual of ``J_core - b0 - b_tok J_tok`` over its
    same-topic pairs minus that over its other-topic pairs (its mean is close to ``b_same``).

    Returns ``{"per unit": (n,), "same-topic effect": b_same, "token slope": b_tok,
    "token J within": ..., "token J across": ...}``.
    """
    n = len(labels)
    if core_j.shape != (n, n) or token_j.shape != (n, n) or n < 3:
        raise ValueError("token_overlap_control needs two (n, n) matrices, n >= 3, and one label per prompt")
    lab = np.asarray(labels)
    same_m = lab[:, None] == lab[None, :]
    iu = np.triu_indices(n, 1)
    same = same_m[iu].astype(float)
    if not 0 < same.sum() < len(same):
        raise ValueError("token_overlap_control needs same-label and different-label pairs")
    y, t = core_j[iu], token_j[iu]
    coef = np.linalg.lstsq(np.column_stack([np.ones_like(y), t, same]), y, rcond=None)[0]
    resid = core_j - coef[0] - coef[1] * token_j
    off = ~np.eye(n, dtype=bool)
    w, a = same_m & off, ~same_m
    per_unit = (resid * w).sum(1) / np.maximum(w.sum(1), 1) - (resid * a).sum(1) / np.maximum(a.sum(1), 1)
    return {"per unit": per_unit, "same-topic effect": float(coef[2]), "token slope": float(coef[1]),
            "token J within": float(t[same == 1].mean()), "token J across": float(t[same == 0].mean())}
