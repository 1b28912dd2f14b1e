"""The relay: agent A's context and trace, agent B's context, and A's KV cache.

Built from the substrate corpus's ``relay`` family (:func:`minirepro.core.lm.corpus.make_relay`):

* A's context ``P_A + S``: ``P_A`` = A's role prefix and the task (``agent solver : ...
  task : 3 + 4 * 2 .``), ``S`` = A's worked trace (`` step 1 : 3 + 4 = 7 . step 2 : ...``).
* B's context ``P_B + S + Q``: ``P_B`` = B's own role prefix and the task, the same ``S``,
  and ``Q`` = `` done . <B's role> question : ...``; the next token is B's answer.

``S`` sits at positions ``|P_A| ..`` in A's cache and ``|P_B| ..`` in B's context.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from minirepro.core.lm.corpus import RELAY_A_ROLES, RELAY_B_ROLES, CorpusConfig, make_relay


@dataclass(frozen=True)
class RelayItem:
    """[reconstruction] One relay, tokenised: A's context ``P_A + S``, B's ``P_B + S + Q``.

    Attributes:
        pa, s, pb, q: token ids of A's prefix, the trace, B's prefix and B's question part.
        answer: the correct answer (one digit); ``kind`` is ``step``, ``final`` or ``plus``
            (corpus relays) or ``price`` (chat pipelines, :mod:`.pipeline`).
        candidates: the answer choices' token ids (chat pipelines; empty for corpus relays,
            whose answer is read off the greedy next token).
        answer_index: the correct choice's index in ``candidates``.
    """

    pa: tuple[int, ...]
    s: tuple[int, ...]
    pb: tuple[int, ...]
    q: tuple[int, ...]
    answer: str
    kind: str
    candidates: tuple[int, ...] = ()
    answer_index: int = -1

    @property
    def a_ids(self) -> torch.Tensor:
        """``(1, |P_A| + |S|)``: A's context."""
        return torch.tensor([self.pa + self.s])

    @property
    def b_ids(self) -> torch.Tensor:
        """``(1, |P_B| + |S| + |Q|)``: B's context."""
        return torch.tensor([self.pb + self.s + self.q])

    @property
    def n_b(self) -> int:
        return len(self.pb) + len(self.s) + len(self.q)


def split_relay(prompt: str) -> tuple[str, str, str, str]:
    """[reconstruction] The relay's parts ``(role_a, task, work, rest)`` of a corpus prompt; ``rest`` = ``role_b question : ...``."""
    head, sep, rest = prompt.partition(" done . ")
    if not sep or " task : " not in head:
        raise ValueError(f"not a relay prompt: {prompt[:80]!r}")
    role_a, _, tail = head.partition(" task : ")
    task, _, work = tail.partition(" . step ")
    if role_a not in RELAY_A_ROLES or not any(rest.startswith(r) for r in RELAY_B_ROLES):
        raise ValueError(f"unknown agent roles in {prompt[:80]!r}")
    return role_a, task, "step " + work, rest


def make_items(tokenizer: PreTrainedTokenizerBase, corpus_cfg: CorpusConfig, n: int, seed: int,
               max_len: int) -> list[RelayItem]:
    """[reconstruction] ``n`` relays drawn with ``seed`` and split into A's and B's contexts.

    Raises ``ValueError`` if a context would not fit in ``max_len`` positions.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = np.random.default_rng(seed)

    def enc(text: str) -> tuple[int, ...]:
        return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])

    items = []
    for _ in range(n):
        ex = make_relay(rng, corpus_cfg)
        role_a, task, work, rest = split_relay(ex.prompt)
        role_b = next(r for r in RELAY_B_ROLES if rest.startswith(r))
        item = RelayItem(pa=enc(f"{role_a} task : {task} ."), s=enc(f" {work}"),
                         pb=enc(f"{role_b} task : {task} ."), q=enc(f" done . {rest}"),
                         answer=ex.answer, kind=ex.topic)
        longest = max(len(item.pa) + len(item.s), item.n_b)
        if longest > max_len:
            raise ValueError(f"a relay of {longest} tokens is longer than the context ({max_len})")
        items.append(item)
    return items


@torch.no_grad()
def a_cache(model: PreTrainedModel, item: RelayItem, decode: bool = False) -> DynamicCache:
    """Eq. (relaycaching-eq-rerotate)'s K^A: agent A's KV cache of ``P_A + S`` (keys rotated at A's positions).

    ``decode=True`` prefills ``P_A`` and then feeds ``S`` one token at a time (the decode
    phase, teacher-forced on the corpus trace); ``False`` prefills ``P_A + S`` at once.
    """
    _check_len(model, len(item.pa) + len(item.s))
    cache = DynamicCache(config=model.config)
    if not decode:
        model(input_ids=item.a_ids, cache=cache, use_cache=True)
        return cache
    model(input_ids=torch.tensor([item.pa]), cache=cache, use_cache=True)
    for tok in item.s:
        model(input_ids=torch.tensor([[tok]]), cache=cache, use_cache=True)
    return cache


@torch.no_grad()
def full_prefill(model: PreTrainedModel, ids: torch.Tensor) -> tuple[torch.Tensor, DynamicCache]:
    """Eq. (relaycaching-eq-dev)'s K^B, full prefill (reuse 0): one forward over ``ids`` ``(1, T)``.

    Returns the logits ``(T, V)`` and the ``DynamicCache`` (plain ``transformers``).
    """
    _check_len(model, ids.shape[1])
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, cache=cache, use_cache=True)
    return out.logits[0].float(), cache


def _check_len(model: PreTrainedModel, n: int) -> None:
    limit = model.config.max_position_embeddings
    if n > limit:
        raise ValueError(f"a context of {n} tokens is longer than the model's context ({limit})")
