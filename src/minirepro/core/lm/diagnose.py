"""Looking inside a substrate model: does it read its context?

Measurements that say whether the in-context lookup (induction) circuit formed,
for any ``transformers`` causal LM and its tokenizer:

:func:`induction_scores`
    repeated random token sequences ``<bos> x_1 .. x_L x_1 .. x_L``: the
    teacher-forced accuracy of the second copy (a model without an induction
    circuit cannot beat chance, ``1 / n_tokens``), and per head the
    *prefix-matching* score (mean attention from ``x_i`` in the second copy to the
    token after ``x_i``'s first occurrence) and the *previous-token* score (mean
    attention to the position just before) -- the two heads of the induction
    circuit (Olsson et al., 2022).
:func:`copy_attention`
    on lines of the ``copy`` family, per head, the attention that the position
    predicting each answer word puts on that word's position in the context.
:func:`answer_token_loss`
    the mean next-token loss at each answer position (``ln 256`` on a copy word is
    a uniform guess over the 256 nonce words).
:func:`prompt_word_share`, :func:`answer_counts`
    what the greedy outputs are made of: the share of output words that occur in
    the prompt (copy), and how often each answer is given (mcq letters).

Attention weights need the ``eager`` attention implementation; the functions
switch to it for the call and back afterwards (the weights are unchanged).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from minirepro.core.lm.corpus import Corpus, Example, check_answer
from minirepro.core.lm.eval import generate


@contextlib.contextmanager
def eager_attention(model: PreTrainedModel) -> Iterator[PreTrainedModel]:
    """Within the block ``model`` computes attention eagerly (so it can return the weights)."""
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        yield model
    finally:
        model.set_attn_implementation(before)


@torch.no_grad()
def attention_maps(model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
    """Attention weights of every layer and head: ``(n_layers, B, n_heads, T, T)``."""
    with eager_attention(model):
        out = model(input_ids=input_ids.to(model.device), output_attentions=True, use_cache=False)
    return torch.stack([a.float().cpu() for a in out.attentions])


def word_pool(tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """Token ids of the corpus's words that are one token each (``" " + word``, :data:`DRILL_WORDS`).

    Random sequences for the induction test are drawn from these: tokens the model
    has seen in training. (Ids it never saw keep near-identical embeddings, which
    no lookup can tell apart, so a sequence of those measures nothing.)
    """
    from minirepro.core.lm.corpus import DRILL_WORDS

    out = []
    for w in DRILL_WORDS:
        ids = tokenizer(" " + w, add_special_tokens=False)["input_ids"]
        if len(ids) == 1:
            out.append(ids[0])
    return np.array(sorted(set(out)))


@torch.no_grad()
def induction_scores(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                     length: int = 24, n: int = 64, seed: int = 0,
                     batch_size: int = 32, pool: Sequence[int] | None = None) -> dict:
    """Copy accuracy on repeated random tokens, and each head's prefix-matching score.

    Sequences are ``<bos>`` followed by ``length`` distinct tokens drawn uniformly
    from ``pool`` (default :func:`word_pool`: the corpus's one-token words), twice.
    No line of the corpus looks like this (no prompt words, no separator). For the second copy's positions
    ``i`` (predicting ``x_{i+1}``, all but the last) the top-1 prediction is
    scored; the first token of the second copy is not (nothing announces it).

    Returns:
        ``copy_acc`` (teacher-forced accuracy on the second copy), ``chance``,
        ``prefix_matching`` and ``previous_token`` (``(n_layers, n_heads)`` lists),
        ``best_prefix_head`` / ``best_prev_head`` (``[layer, head]``) and their scores.
    """
    if length < 2 or n < 1:
        raise ValueError(f"length must be at least 2 and n at least 1, got {length}, {n}")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and 2 * length + 1 > limit:
        raise ValueError(f"2 * length + 1 = {2 * length + 1} exceeds the context of {limit}")
    pool = word_pool(tokenizer) if pool is None else np.asarray(pool)
    if len(pool) < length:
        raise ValueError(f"the pool has {len(pool)} tokens, fewer than length={length}")
    rng = np.random.default_rng(seed)
    seqs = [rng.choice(pool, size=length, replace=False) for _ in range(n)]
    ids = torch.tensor(np.array([[tokenizer.bos_token_id, *s, *s] for s in seqs]), dtype=torch.long)
    t = ids.shape[1]
    second = torch.arange(length + 1, t)            # positions of the second copy
    hits, pm, pt = [], 0.0, 0.0
    for i in range(0, n, batch_size):
        x = ids[i:i + batch_size]
        with eager_attention(model):
            out = model(input_ids=x.to(model.device), output_attentions=True, use_cache=False)
        pred = out.logits[:, second[:-1]].argmax(-1).cpu()
        hits.append((pred == x[:, second[1:]]).float().reshape(-1))
        att = torch.stack([a.float().cpu() for a in out.attentions])   # (L, B, H, T, T)
        # token at position p (second copy) first occurred at p - length; the token after it: p - length + 1
        pm = pm + att[:, :, :, second, second - length + 1].sum((1, 3))
        pt = pt + att[:, :, :, second, second - 1].sum((1, 3))
    norm = n * len(second)
    pm, pt = (pm / norm).numpy(), (pt / norm).numpy()
    bp, bq = np.unravel_index(pm.argmax(), pm.shape), np.unravel_index(pt.argmax(), pt.shape)
    return {"copy_acc": float(torch.cat(hits).mean()), "chance": 1.0 / len(pool),
            "length": length, "n": n,
            "prefix_matching": pm.round(4).tolist(), "previous_token": pt.round(4).tolist(),
            "best_prefix_head": [int(bp[0]), int(bp[1])], "best_prefix_score": float(pm.max()),
            "best_prev_head": [int(bq[0]), int(bq[1])], "best_prev_score": float(pt.max())}


def _answer_positions(tokenizer: PreTrainedTokenizerBase, e: Example) -> tuple[list[int], list[int]]:
    """Token ids of ``<bos> line``, and the index of the first answer token."""
    line = tokenizer(e.text, add_special_tokens=True)["input_ids"]
    start = len(tokenizer(e.prompt, add_special_tokens=True)["input_ids"])
    return list(line), start


@torch.no_grad()
def copy_attention(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                   examples: Sequence[Example]) -> dict:
    """Per head, the attention on the context word to copy, at each answer position of ``copy`` lines.

    For a line ``copy : w_1 .. w_n ; again : q_1 q_2 -> a_1 a_2 a_3`` (teacher
    forced), the position that predicts ``a_j`` is the one just before it; the
    word to copy is ``a_j``'s occurrence in the context. Returns ``mass``
    (``(n_layers, n_heads)``, averaged over lines and the three answer words),
    ``best_head`` and ``best_mass``, and ``mass_by_answer_word`` of the best head.
    """
    lines = [e for e in examples if e.family == "copy"]
    if not lines:
        raise ValueError("copy_attention needs copy lines")
    maps = []
    for e in lines:
        ids, start = _answer_positions(tokenizer, e)
        answer = ids[start:start + 3]
        targets = []
        for j, tok in enumerate(answer):
            where = [p for p in range(1, start - 1) if ids[p] == tok]
            if not where:
                raise ValueError(f"answer word {j} is not a single token of the context: {e.text!r}")
            targets.append((start - 1 + j, where[0]))
        att = attention_maps(model, torch.tensor([ids]))[:, 0]       # (L, H, T, T)
        maps.append(torch.stack([att[:, :, q, k] for q, k in targets], -1))   # (L, H, 3)
    by_word = torch.stack(maps).mean(0)                               # (L, H, 3)
    mass = by_word.mean(-1).numpy()
    best = np.unravel_index(mass.argmax(), mass.shape)
    per_word = by_word[best[0], best[1]].numpy()
    count = len(maps)
    return {"mass": mass.round(4).tolist(), "best_head": [int(best[0]), int(best[1])],
            "best_mass": float(mass.max()), "mass_by_answer_word": per_word.round(4).tolist(),
            "n_lines": count}


@torch.no_grad()
def answer_token_loss(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                      examples: Sequence[Example], max_tokens: int = 3) -> list[float]:
    """Mean next-token loss (nats) at answer positions ``0 .. max_tokens-1`` over ``examples``."""
    sums, counts = np.zeros(max_tokens), np.zeros(max_tokens)
    for e in examples:
        ids, start = _answer_positions(tokenizer, e)
        x = torch.tensor([ids], device=model.device)
        logp = torch.log_softmax(model(input_ids=x, use_cache=False).logits[0].float().cpu(), -1)
        for j in range(min(max_tokens, len(ids) - start)):
            sums[j] -= float(logp[start - 1 + j, ids[start + j]])
            counts[j] += 1
    return [float(s / c) if c else float("nan") for s, c in zip(sums, counts)]


def prompt_word_share(examples: Sequence[Example], outputs: Sequence[str]) -> float:
    """Share of the words of the greedy outputs (first ``len(answer)`` words) that occur in the prompt."""
    inside = total = 0
    for e, o in zip(examples, outputs):
        words = o.split()[:e.n_answer_words]
        ctx = set(e.prompt.split())
        inside += sum(w in ctx for w in words)
        total += len(words)
    return inside / max(1, total)


def answer_counts(examples: Sequence[Example], outputs: Sequence[str]) -> dict[str, dict[str, int]]:
    """How often each answer was given (first word of the output) and how often it was right."""
    given = Counter(o.split()[0] if o.split() else "" for o in outputs)
    right = Counter(e.answer for e in examples)
    return {"given": dict(given.most_common()), "right": dict(right.most_common())}


def diagnose(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, corpus: Corpus,
             split: str = "test", n_lines: int = 100, n_attention: int = 40,
             n_examples: int = 5) -> dict:
    """Everything the substrate page shows about the lookup circuit, as a JSON-able dict.

    On the first ``n_lines`` ``copy`` and ``mcq`` lines of ``split``: greedy outputs
    (``copy_examples``: the first ``n_examples`` prompts, answers and outputs),
    ``copy_acc``, ``copy_prompt_word_share``, ``copy_answer_loss`` (per answer
    word, nats; ``copy_uniform_loss`` is ``ln 256``), ``copy_attention`` (on the
    first ``n_attention`` lines), ``mcq_acc`` and ``mcq_answers``; and
    ``induction`` (:func:`induction_scores`).
    """
    from minirepro.core.lm.corpus import COPY_WORDS

    lines = corpus.split(split)
    out: dict = {"split": split}
    for fam in ("copy", "mcq"):
        ex = [e for e in lines if e.family == fam][:n_lines]
        if not ex:
            continue
        got = generate(model, tokenizer, [e.prompt for e in ex], max_new_tokens=8)
        out[f"{fam}_acc"] = float(np.mean([check_answer(e, o) for e, o in zip(ex, got)]))
        out[f"{fam}_n"] = len(ex)
        if fam == "copy":
            out["copy_examples"] = [{"prompt": e.prompt, "answer": e.answer, "output": o.strip()}
                                    for e, o in zip(ex[:n_examples], got)]
            out["copy_prompt_word_share"] = prompt_word_share(ex, got)
            out["copy_answer_loss"] = answer_token_loss(model, tokenizer, ex, 3)
            out["copy_uniform_loss"] = float(np.log(len(COPY_WORDS)))
            out["copy_attention"] = copy_attention(model, tokenizer, ex[:n_attention])
        else:
            out["mcq_answers"] = answer_counts(ex, got)
    out["induction"] = induction_scores(model, tokenizer)
    return out


__all__ = ["diagnose", "answer_counts", "answer_token_loss", "attention_maps", "copy_attention",
           "eager_attention", "induction_scores", "prompt_word_share"]


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m minirepro.core.lm.diagnose PRESET_OR_FOLDER OUT.json``: diagnose a model, one thread.

    ``PRESET_OR_FOLDER`` is a substrate preset (``book``, ``smoke``, ...) or a
    substrate artifact folder (weights, ``tokenizer.json``, ``substrate.json``).
    """
    import argparse
    import json
    import platform
    import subprocess
    import time
    from datetime import datetime
    from pathlib import Path

    from minirepro.core.lm.bpe import load_bpe
    from minirepro.core.lm.corpus import build_corpus
    from minirepro.core.lm.models import load_lm
    from minirepro.core.lm.substrate import corpus_config_from, load_substrate

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("model", help="substrate preset or artifact folder")
    ap.add_argument("out", help="JSON file to write")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    folder = Path(args.model)
    if folder.is_dir():
        model, tok = load_lm(folder), load_bpe(folder)
        corpus = build_corpus(corpus_config_from(folder))
        ev_file = folder / "eval.json"
        ev = json.loads(ev_file.read_text()) if ev_file.exists() else {}
        name = folder.name
    else:
        sub = load_substrate(args.model)
        model, tok, corpus, ev, name = sub.model, sub.tokenizer, sub.corpus, sub.eval, sub.path.name
    t0 = time.perf_counter()
    d = diagnose(model, tok, corpus)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    d["provenance"] = {
        "command": f"python -m minirepro.core.lm.diagnose {args.model} {args.out}",
        "model": name, "commit": commit, "seconds": round(time.perf_counter() - t0, 1),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": platform.processor() or platform.machine(), "n_params": ev.get("n_params"),
        "test_acc": ev.get("test_acc")}
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(d, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
