"""Evaluation: perplexity, a unigram baseline, greedy task accuracy, greedy decoding.

All functions take any causal LM with a ``transformers`` interface and its
tokenizer, so they work on the book's tiny models and on hub checkpoints alike.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirepro.core.lm.corpus import Example, score_answers


def kv_cache(out) -> object:
    """The KV cache of a model output (``out.cache`` in new ``transformers``, else ``past_key_values``)."""
    c = getattr(out, "cache", None)
    return c if c is not None else out.past_key_values


def with_cache(model: PreTrainedModel, cache: object) -> dict[str, object]:
    """Keyword arguments passing ``cache`` to ``model``'s forward, under either name."""
    params = inspect.signature(model.forward).parameters
    return {"cache": cache} if "cache" in params else {"past_key_values": cache}


def _encode(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], eos: bool) -> list[list[int]]:
    ids = tokenizer(list(texts), add_special_tokens=True)["input_ids"]
    if eos:
        ids = [list(x) + [tokenizer.eos_token_id] for x in ids]
    return [list(x) for x in ids]


@torch.no_grad()
def token_nll(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
              batch_size: int = 64) -> tuple[float, int]:
    """Summed next-token negative log-likelihood (nats) of ``texts`` and the token count.

    Each text is scored as ``<bos> text <eos>``; every token after ``<bos>`` is predicted.
    """
    if not texts:
        raise ValueError("token_nll needs at least one text")
    seqs = _encode(tokenizer, texts, eos=True)
    order = np.argsort([len(s) for s in seqs], kind="stable")  # similar lengths per batch
    total, count = 0.0, 0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for i in range(0, len(seqs), batch_size):
        chunk = [seqs[j] for j in order[i:i + batch_size]]
        t = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), t), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, s in enumerate(chunk):
            ids[r, :len(s)] = torch.tensor(s)
            mask[r, :len(s)] = 1
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        target = ids[:, 1:]
        keep = mask[:, 1:].bool()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
        total += float(nll[keep].sum())
        count += int(keep.sum())
    return total, count


def perplexity(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
               batch_size: int = 64) -> float:
    """``exp(mean next-token NLL)`` over ``texts`` (see :func:`token_nll`)."""
    total, count = token_nll(model, tokenizer, texts, batch_size)
    return math.exp(total / count)


def unigram_loss(tokenizer: PreTrainedTokenizerBase, train_texts: Sequence[str],
                 eval_texts: Sequence[str]) -> float:
    """Cross-entropy (nats/token) of an add-one unigram model fit on ``train_texts``.

    Scored on the same tokens :func:`token_nll` scores (everything after ``<bos>``,
    ``<eos>`` included), so it is the baseline an LM's loss must beat.
    """
    train = [t for s in _encode(tokenizer, train_texts, eos=True) for t in s[1:]]
    test = [t for s in _encode(tokenizer, eval_texts, eos=True) for t in s[1:]]
    if not train or not test:
        raise ValueError("unigram_loss needs non-empty train and eval texts")
    counts = Counter(train)
    v = len(tokenizer)
    denom = len(train) + v
    return float(-np.mean([math.log((counts.get(t, 0) + 1) / denom) for t in test]))


@torch.no_grad()
def greedy_decode(model: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int,
                  use_cache: bool = True, eos_token_id: int | None = None,
                  on_prefill: Callable[[PreTrainedModel], None] | None = None) -> torch.Tensor:
    """Greedy decoding written out: one prefill, then one token per step.

    Args:
        input_ids: ``(B, T)`` prompt ids, no padding (equal-length prompts).
        max_new_tokens: tokens to add.
        use_cache: reuse the KV cache (``past_key_values``) or re-run the whole prefix each step.
        eos_token_id: stop once every row has produced it (rows that ended keep emitting it).
        on_prefill: called once, after the prefill forward and before the first decode
            step (SparseInfer slices the FFN there).

    Returns:
        ``(B, T + n)`` ids, ``n <= max_new_tokens``.
    """
    if input_ids.ndim != 2 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must be (B, T) with T >= 1, got {tuple(input_ids.shape)}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be non-negative, got {max_new_tokens}")
    ids = input_ids
    out = model(input_ids=ids, use_cache=use_cache)
    if on_prefill is not None:
        on_prefill(model)
    done = torch.zeros(ids.shape[0], dtype=torch.bool)
    for step in range(max_new_tokens):
        nxt = out.logits[:, -1].argmax(-1)
        if eos_token_id is not None:
            nxt = torch.where(done, torch.full_like(nxt, eos_token_id), nxt)
            done |= nxt == eos_token_id
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        if use_cache:
            out = model(input_ids=nxt[:, None], use_cache=True, **with_cache(model, kv_cache(out)))
        else:
            out = model(input_ids=ids, use_cache=False)
    return ids


@torch.no_grad()
def generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
             max_new_tokens: int = 4, use_cache: bool = True, batch_size: int = 64) -> list[str]:
    """Greedy continuations of ``prompts`` with ``model.generate`` (left padding), as text."""
    if not prompts:
        return []
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    texts: list[str] = []
    try:
        for i in range(0, len(prompts), batch_size):
            enc = tokenizer(list(prompts[i:i + batch_size]), return_tensors="pt", padding=True)
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 use_cache=use_cache, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id)
            new = out[:, enc["input_ids"].shape[1]:]
            texts += tokenizer.batch_decode(new, skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
    return texts


def task_accuracy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                  examples: Sequence[Example], max_new_tokens: int = 2,
                  batch_size: int = 64) -> dict[str, float]:
    """Greedy-decoding accuracy per family and overall (``{"arith": ..., "all": ...}``)."""
    outputs = generate(model, tokenizer, [e.prompt for e in examples], max_new_tokens,
                       batch_size=batch_size)
    return score_answers(examples, outputs)


@torch.no_grad()
def answer_accuracy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    examples: Sequence[Example], batch_size: int = 64) -> dict[str, float]:
    """Accuracy of the argmax next token after each prompt (one forward pass, no generation).

    Equals :func:`task_accuracy` when every answer is a single token, as in the
    book's corpus; it is cheaper and is what chapters use inside loops.
    """
    outputs = []
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        for i in range(0, len(examples), batch_size):
            enc = tokenizer([e.prompt for e in examples[i:i + batch_size]], return_tensors="pt",
                            padding=True)
            logits = model(**enc).logits[:, -1]
            outputs += tokenizer.batch_decode(logits.argmax(-1)[:, None], skip_special_tokens=True)
    finally:
        tokenizer.padding_side = side
    return score_answers(examples, outputs)
