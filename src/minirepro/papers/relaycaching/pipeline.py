"""Two-agent chat pipelines for a chat model (the book scale, SmolLM2-135M-Instruct).

Agent A, a shop clerk, is given four prices and *generates* a note ``S`` (greedy decoding,
the model's own text). Agent B, a shopper with its own system prompt, reads the note in its
user turn and is asked one of the four prices; its answer is one digit token, so B's
accuracy is a teacher-forced choice among the four prices' digits (chance 1/4).

* A's context ``P_A + S``: A's chat prompt (system, user with the prices, ``assistant``
  header) and the generated note.
* B's context ``P_B + S + Q``: B's chat prompt up to the note, the same token ids of ``S``,
  then the question, B's ``assistant`` header and ``The price of the pear is`` (the next token
  is B's digit).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirepro.papers.relaycaching.relay import RelayItem

FRUITS: tuple[str, ...] = ("apple", "pear", "fig", "plum", "lemon", "melon", "grape", "peach",
                           "mango", "cherry", "orange", "banana")
A_SYSTEM = "You are a shop clerk."
B_SYSTEM = "You are a careful shopper."
_MARK = "\u0001NOTE\u0001"


@dataclass(frozen=True)
class PipelineSpec:
    """[reconstruction] One pipeline before A speaks: four ``(fruit, price)`` pairs and the fruit B is asked about."""

    prices: tuple[tuple[str, int], ...]
    asked: int

    @property
    def answer(self) -> str:
        return str(self.prices[self.asked][1])


def make_specs(n: int, seed: int, n_prices: int = 4) -> list[PipelineSpec]:
    """[reconstruction] ``n`` pipelines drawn with ``seed``: distinct fruits, distinct prices 1..9."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if not 2 <= n_prices <= 9:
        raise ValueError(f"n_prices must be in 2..9, got {n_prices}")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        fruits = rng.choice(len(FRUITS), n_prices, replace=False)
        prices = rng.choice(np.arange(1, 10), n_prices, replace=False)
        out.append(PipelineSpec(tuple((FRUITS[f], int(p)) for f, p in zip(fruits, prices)),
                                int(rng.integers(n_prices))))
    return out


def _enc(tok: PreTrainedTokenizerBase, text: str) -> tuple[int, ...]:
    return tuple(tok(text, add_special_tokens=False)["input_ids"])


def a_prompt(tok: PreTrainedTokenizerBase, spec: PipelineSpec) -> tuple[int, ...]:
    """[reconstruction] A's chat prompt ``P_A`` (ending with the ``assistant`` header)."""
    listing = ", ".join(f"{f} {p} dollars" for f, p in spec.prices)
    msgs = [{"role": "system", "content": A_SYSTEM},
            {"role": "user", "content": f"Today's prices: {listing}. Write a short note listing "
                                        "these prices for a shopper."}]
    return _enc(tok, tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))


def b_parts(tok: PreTrainedTokenizerBase, spec: PipelineSpec) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """[reconstruction] B's prompt around the note: ``(P_B, Q, candidates)``; ``candidates`` are the
    four prices' digit ids.

    Raises ``ValueError`` if a price is not one token after ``Q`` in this tokenizer.
    """
    fruit = spec.prices[spec.asked][0]
    msgs = [{"role": "system", "content": B_SYSTEM},
            {"role": "user", "content": f"The clerk sent this note:\n{_MARK}\n\nWhat is the price "
                                        f"of the {fruit} in dollars?"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    head, tail = text.split(_MARK)
    tail += f"The price of the {fruit} is"
    q = _enc(tok, tail)
    cands = []
    for _, p in spec.prices:
        ids = _enc(tok, f"{tail} {p}")
        if ids[:len(q)] != q:
            raise ValueError(f"the tokenizer merges the price into the question: {tail!r} + {p}")
        rest = ids[len(q):]
        # a price may follow as ' ' + digit (SmolLM2) or as one ' 7' token
        if len(rest) == 2:
            q_space = rest[0]
            cands.append(rest[1])
        elif len(rest) == 1:
            q_space = None
            cands.append(rest[0])
        else:
            raise ValueError(f"price {p} is {len(rest)} tokens after the question; needs 1")
    if q_space is not None:
        q = q + (q_space,)
    return _enc(tok, head), q, tuple(cands)


@torch.no_grad()
def generate_notes(model: PreTrainedModel, tok: PreTrainedTokenizerBase, prompts: list[tuple[int, ...]],
                   max_new_tokens: int, batch: int = 16) -> list[tuple[int, ...]]:
    """[reconstruction] A's greedy notes for each prompt (batched, left-padded); each note ends
    before the first end-of-turn token.

    Raises ``ValueError`` if a note is empty (A answered nothing).
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    eos = {tok.eos_token_id, tok.pad_token_id} - {None}
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    notes = []
    for i in range(0, len(prompts), batch):
        chunk = prompts[i:i + batch]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=pad)
        for row in out[:, width:].tolist():
            cut = next((j for j, t in enumerate(row) if t in eos), len(row))
            if cut == 0:
                raise ValueError("agent A generated an empty note")
            notes.append(tuple(row[:cut]))
    return notes


def make_pipelines(model: PreTrainedModel, tok: PreTrainedTokenizerBase, n: int, seed: int,
                   max_new_tokens: int = 32) -> list[RelayItem]:
    """[reconstruction] ``n`` two-agent pipelines drawn with ``seed``; ``S`` is A's own greedy note.

    Raises ``ValueError`` if a context would not fit in the model's positions.
    """
    specs = make_specs(n, seed)
    pas = [a_prompt(tok, sp) for sp in specs]
    notes = generate_notes(model, tok, pas, max_new_tokens)
    items = []
    limit = model.config.max_position_embeddings
    for sp, pa, s in zip(specs, pas, notes):
        pb, q, cands = b_parts(tok, sp)
        it = RelayItem(pa=pa, s=s, pb=pb, q=q, answer=sp.answer, kind="price",
                       candidates=cands, answer_index=sp.asked)
        if max(len(pa) + len(s), it.n_b) > limit:
            raise ValueError(f"a pipeline of {it.n_b} tokens is longer than the context ({limit})")
        items.append(it)
    return items
