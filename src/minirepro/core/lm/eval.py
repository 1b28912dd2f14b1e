"""Evaluating a substrate: greedy exact match per family, perplexity, a bigram baseline.

Everything takes any causal LM with a ``transformers`` interface and its
tokenizer, so it runs on the book's models and on a checkpoint loaded with
``model_name`` alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirepro.core.lm.corpus import Example, score_answers


def _max_len(model: PreTrainedModel) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


@torch.no_grad()
def generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                max_new_tokens: int = 8, use_cache: bool = True, batch_size: int = 32) -> list[str]:
    """Greedy continuations of ``prompts`` (``model.generate``, left padding, stops at ``<eos>``).

    Prompts are sorted by length into batches (less padding) and the outputs
    returned in the input order.

    Raises:
        ValueError: a prompt plus ``max_new_tokens`` does not fit the model's context.
    """
    if not prompts:
        return []
    lengths = [len(x) for x in tokenizer(list(prompts), add_special_tokens=True)["input_ids"]]
    limit = _max_len(model)
    if limit is not None and max(lengths) + max_new_tokens > limit:
        raise ValueError(f"a prompt of {max(lengths)} tokens plus {max_new_tokens} new tokens "
                         f"exceeds the model's context of {limit} tokens")
    order = np.argsort(lengths, kind="stable")
    out: list[str] = [""] * len(prompts)
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            enc = tokenizer([prompts[j] for j in idx], return_tensors="pt", padding=True).to(model.device)
            gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 use_cache=use_cache, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id)
            texts = tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:],
                                           skip_special_tokens=True)
            for j, t in zip(idx, texts):
                out[int(j)] = t
    finally:
        tokenizer.padding_side = side
    return out


def family_accuracy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    examples: Sequence[Example], max_new_tokens: int = 8,
                    batch_size: int = 32) -> dict[str, float]:
    """Greedy exact-match accuracy per family and overall (see :func:`score_answers`)."""
    outs = generate(model, tokenizer, [e.prompt for e in examples], max_new_tokens,
                       batch_size=batch_size)
    return score_answers(examples, outs)


@torch.no_grad()
def token_nll(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                 batch_size: int = 32) -> tuple[float, int]:
    """Summed next-token NLL (nats) of ``<bos> text <eos>`` over ``texts``, and the token count."""
    if not texts:
        raise ValueError("token_nll needs at least one text")
    seqs = [list(x) + [tokenizer.eos_token_id]
            for x in tokenizer(list(texts), add_special_tokens=True)["input_ids"]]
    limit = _max_len(model)
    if limit is not None and max(len(s) for s in seqs) > limit:
        raise ValueError(f"a text of {max(len(s) for s in seqs)} tokens exceeds the model's "
                         f"context of {limit} tokens")
    order = np.argsort([len(s) for s in seqs], kind="stable")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    total, count = 0.0, 0
    for i in range(0, len(seqs), batch_size):
        chunk = [seqs[j] for j in order[i:i + batch_size]]
        t = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), t), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, s in enumerate(chunk):
            ids[r, :len(s)] = torch.tensor(s)
            mask[r, :len(s)] = 1
        ids, mask = ids.to(model.device), mask.to(model.device)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        keep = mask[:, 1:].bool()
        total += float(nll[keep].sum())
        count += int(keep.sum())
    return total, count


def perplexity(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                  texts: Sequence[str], batch_size: int = 32) -> float:
    """``exp`` of the mean next-token NLL over ``texts``."""
    total, count = token_nll(model, tokenizer, texts, batch_size)
    return math.exp(total / count)


class BigramLM:
    """A bigram baseline on token ids: add-``alpha`` smoothed counts ``P(next | previous)``.

    Fit on ``<bos> text <eos>`` sequences; :meth:`nll` scores texts the way
    :func:`token_nll` does; :meth:`generate` continues prompts greedily.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                 alpha: float = 0.01) -> None:
        if not texts:
            raise ValueError("BigramLM needs training texts")
        self.tokenizer, self.alpha = tokenizer, alpha
        v = len(tokenizer)
        counts = np.zeros((v, v), dtype=np.float64)
        for s in self._encode(texts):
            np.add.at(counts, (s[:-1], s[1:]), 1.0)
        self.logp = np.log((counts + alpha) / (counts + alpha).sum(1, keepdims=True))

    def _encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        ids = self.tokenizer(list(texts), add_special_tokens=True)["input_ids"]
        return [np.asarray(list(x) + [self.tokenizer.eos_token_id]) for x in ids]

    def nll(self, texts: Sequence[str]) -> tuple[float, int]:
        """Summed NLL (nats) and token count, as :func:`token_nll`."""
        tot, cnt = 0.0, 0
        for s in self._encode(texts):
            tot -= float(self.logp[s[:-1], s[1:]].sum())
            cnt += len(s) - 1
        return tot, cnt

    def generate(self, prompts: Sequence[str], max_new_tokens: int = 8) -> list[str]:
        """Greedy continuations (argmax of the next token given only the last one)."""
        eos = self.tokenizer.eos_token_id
        out = []
        for ids in self.tokenizer(list(prompts), add_special_tokens=True)["input_ids"]:
            last, new = ids[-1], []
            for _ in range(max_new_tokens):
                last = int(self.logp[last].argmax())
                if last == eos:
                    break
                new.append(last)
            out.append(self.tokenizer.decode(new, skip_special_tokens=True))
        return out

    def family_accuracy(self, examples: Sequence[Example], max_new_tokens: int = 8) -> dict[str, float]:
        return score_answers(examples, self.generate([e.prompt for e in examples], max_new_tokens))
