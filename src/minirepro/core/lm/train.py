"""Training the substrate: tokenizer, model and loss curve, reproducibly, resumably.

:func:`train_substrate` trains the BPE tokenizer on the corpus's train split,
builds the model, and trains it with AdamW (linear warm-up, cosine decay to
``min_lr_frac``) on a loss that weights answer tokens (and each line's
``<eos>``) by ``answer_weight``. Two ways to batch:

fixed lines (``stream=False``)
    epochs over ``corpus.train``, batches of similar-length lines, right padding.
streamed, packed lines (``stream=True``)
    every step draws *fresh* lines (:func:`~minirepro.core.lm.corpus.sample_lines`,
    from a generator seeded by ``(seed, step)``, so a resumed run sees the same
    data) from a mixture that moves linearly from ``early_weights`` to the
    corpus's ``train_weights`` over ``curriculum_steps`` (a curriculum: the
    lookup drills first), and packs them into rows of ``max_len`` tokens. Lines
    in a row do not see each other (positions restart at every ``<bos>`` and a
    block-diagonal causal mask, :func:`packed_mask`), and no loss crosses from one
    line into the next. Every batch holds every family.

Every ``eval_every`` steps it records the validation loss, the teacher-forced
answer accuracy per family on a fixed validation subset, and whether the
induction circuit has formed (:func:`~minirepro.core.lm.diagnose.induction_scores`),
so the curve ships with the model. A fixed number of steps (never a time budget)
keeps the weights a function of the configs alone on a given kernel set.
``checkpoint=`` makes a run resumable (model, optimiser, curve and step every
``checkpoint_every`` steps); a progress line with an estimate of the time left
is printed every ``log_every_s`` seconds.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar, TextIO

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from minirepro.core.lm.bpe import train_bpe
from minirepro.core.lm.corpus import Corpus, Example, sample_lines
from minirepro.core.lm.models import ModelConfig, build_lm
from minirepro.core.progress import bars_disabled
from minirepro.core.scale import ScaledConfig
from minirepro.core.seed import set_seed


@dataclass
class TrainConfig(ScaledConfig):
    """How the substrate is trained.

    Attributes:
        steps: optimiser steps.
        batch_size: lines per step (when ``batch_tokens`` is 0).
        batch_tokens: if positive, each step takes as many similar-length lines
            as fit in this many (padded) tokens instead of ``batch_size`` lines, so
            that every step sees about the same number of tokens whatever the
            family mix.
        lr: peak AdamW learning rate.
        min_lr_frac: the cosine decays to ``lr * min_lr_frac``.
        warmup: linear warm-up steps.
        weight_decay: AdamW weight decay (not on norms and biases).
        answer_weight: loss weight of answer tokens and the final ``<eos>``
            relative to 1 for the other tokens.
        vocab_size: BPE vocabulary (specials and reserved tokens included).
        seed: weight init and batch order.
        threads: torch threads while training.
        eval_every: steps between validation evaluations (loss curve).
        eval_examples: size of the fixed validation subset for the curve.
        stream: train on fresh, packed lines drawn every step (see the module
            docstring) instead of epochs over ``corpus.train``.
        early_weights: with ``stream``, the family mixture at step 0, aligned with
            ``corpus.config.train_families`` (empty: no curriculum).
        curriculum_steps: steps over which the mixture moves linearly from
            ``early_weights`` to the corpus's ``train_weights``.
    """

    steps: int = 6000
    batch_size: int = 32
    batch_tokens: int = 0
    lr: float = 2e-3
    min_lr_frac: float = 0.05
    warmup: int = 200
    weight_decay: float = 0.05
    answer_weight: float = 5.0
    vocab_size: int = 2048
    seed: int = 0
    threads: int = 1
    eval_every: int = 250
    eval_examples: int = 500
    stream: bool = False
    early_weights: tuple[float, ...] = ()
    curriculum_steps: int = 0

    PRESETS: ClassVar = {
        "smoke": {"steps": 300, "batch_size": 16, "lr": 3e-3, "warmup": 30, "vocab_size": 1024,
                  "eval_every": 50, "eval_examples": 200},
        "book": {},
        "full": {"steps": 30000, "batch_size": 64},
    }

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "vocab_size", "threads", "eval_every", "eval_examples"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if not self.lr > 0 or not 0 <= self.min_lr_frac <= 1:
            raise ValueError("lr must be positive and min_lr_frac in [0, 1]")
        if self.batch_tokens < 0:
            raise ValueError(f"batch_tokens must be 0 (off) or positive, got {self.batch_tokens}")
        if self.answer_weight <= 0 or self.warmup < 0 or self.seed < 0:
            raise ValueError("answer_weight must be positive; warmup and seed non-negative")
        self.early_weights = tuple(float(w) for w in self.early_weights)
        if self.curriculum_steps < 0 or any(not (w >= 0 and math.isfinite(w))
                                            for w in self.early_weights):
            raise ValueError("curriculum_steps and early_weights must be non-negative")
        if self.stream and self.batch_tokens < 1:
            raise ValueError("stream=True needs batch_tokens (tokens per step) to be positive")


@dataclass
class Encoded:
    """Token ids of examples: ``<bos> prompt answer <eos>`` and where the answer starts."""

    ids: list[list[int]]
    answer_start: list[int]

    def __len__(self) -> int:
        return len(self.ids)


def encode_examples(tokenizer: PreTrainedTokenizerFast, examples: list[Example],
                    max_len: int | None = None) -> Encoded:
    """Encode lines (``<bos>`` + tokens + ``<eos>``); ``answer_start`` indexes the first answer token.

    The prompt's tokens are a prefix of the line's tokens (the answer starts
    with a space, and pieces never cross a space), which this checks.

    Raises:
        ValueError: a line longer than ``max_len`` tokens, or a prompt that is not a prefix.
    """
    lines = tokenizer([e.text for e in examples], add_special_tokens=True)["input_ids"]
    prompts = tokenizer([e.prompt for e in examples], add_special_tokens=True)["input_ids"]
    ids, starts = [], []
    for e, line, p in zip(examples, lines, prompts):
        if line[:len(p)] != p:
            raise ValueError(f"prompt tokens are not a prefix of the line's: {e.text[:80]!r}")
        seq = list(line) + [tokenizer.eos_token_id]
        if max_len is not None and len(seq) > max_len:
            raise ValueError(f"a {e.family} line has {len(seq)} tokens, longer than max_len="
                             f"{max_len}: shorten the corpus config or raise max_len")
        ids.append(seq)
        starts.append(len(p))
    return Encoded(ids, starts)


class WordEncoder:
    """:func:`encode_examples` at the speed of a dictionary look-up, for streamed lines.

    The tokenizer's pieces never cross a space, so a line's tokens are ``<bos>``, the
    first word's tokens and then each later word's tokens with its leading space,
    each word tokenized on its own (``tests/unit/test_lm_train.py`` checks this for
    every family). Each distinct word is tokenized once and remembered.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerFast) -> None:
        self.tok = tokenizer
        self.cache: dict[str, list[int]] = {}

    def _piece(self, piece: str) -> list[int]:
        ids = self.cache.get(piece)
        if ids is None:
            ids = self.cache[piece] = self.tok(piece, add_special_tokens=False)["input_ids"]
        return ids

    def __call__(self, examples: list[Example], max_len: int | None = None) -> Encoded:
        """The same :class:`Encoded` as ``encode_examples(tokenizer, examples, max_len)``."""
        bos, eos = self.tok.bos_token_id, self.tok.eos_token_id
        ids, starts = [], []
        for e in examples:
            words = e.text.split(" ")
            seq = [bos] + self._piece(words[0])
            for w in words[1:]:
                seq += self._piece(" " + w)
            n_answer = sum(len(self._piece(" " + w)) for w in e.answer.split(" "))
            seq.append(eos)
            if max_len is not None and len(seq) > max_len:
                raise ValueError(f"a {e.family} line has {len(seq)} tokens, longer than max_len="
                                 f"{max_len}: shorten the corpus config or raise max_len")
            ids.append(seq)
            starts.append(len(seq) - 1 - n_answer)
        return Encoded(ids, starts)


def pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad into ``(input_ids, attention_mask)``, both ``(B, T_max)`` long."""
    t = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), t), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask


def length_batches(lengths: list[int], batch_size: int, rng: np.random.Generator,
                   pool: int = 64, batch_tokens: int = 0) -> list[np.ndarray]:
    """One epoch of batches: shuffle, sort within pools by length, cut, shuffle the batches.

    With ``batch_tokens == 0`` a batch is ``batch_size`` lines and a pool is
    ``pool`` batches; otherwise a batch is the longest run of sorted lines whose
    padded size (lines x longest line) stays within ``batch_tokens``, and a pool is
    ``pool * batch_tokens`` tokens. A short last batch of a pool is dropped.
    """
    order = rng.permutation(len(lengths))
    lens = np.asarray(lengths)
    if batch_tokens and lens.max() > batch_tokens:
        raise ValueError(f"a line of {lens.max()} tokens does not fit batch_tokens={batch_tokens}")
    batches = []
    for chunk in _pools(order, lens, batch_size * pool if not batch_tokens else 0, pool * batch_tokens):
        chunk = chunk[np.argsort(lens[chunk], kind="stable")]
        if not batch_tokens:
            batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)
                        if len(chunk[i:i + batch_size]) == batch_size]
            continue
        start = 0
        for i in range(1, len(chunk) + 1):
            if i == len(chunk) or (i + 1 - start) * lens[chunk[i]] > batch_tokens:
                if i == len(chunk) and start < i and (i - start) * lens[chunk[i - 1]] < batch_tokens // 2:
                    break  # a short tail
                batches.append(chunk[start:i])
                start = i
    return [batches[int(i)] for i in rng.permutation(len(batches))]


def _pools(order: np.ndarray, lens: np.ndarray, lines: int, tokens: int) -> list[np.ndarray]:
    """Cut ``order`` into consecutive pools of ``lines`` lines, or (``lines == 0``) of about ``tokens`` tokens."""
    if lines:
        return [order[s:s + lines] for s in range(0, len(order), lines)]
    ends = np.searchsorted(np.cumsum(lens[order]), np.arange(tokens, lens.sum() + tokens, tokens))
    return [p for p in np.split(order, np.unique(np.minimum(ends, len(order)))[:-1]) if len(p)]


def weighted_loss(model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor,
                  starts: torch.Tensor, answer_weight: float
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Weighted next-token loss, plain per-token CE, and the answer-token correctness.

    Returns ``(loss, ce (B, T-1), valid (B, T-1), answer_ok (B,))``; ``answer_ok``
    is True when the argmax is right at every answer position (teacher forcing;
    it equals greedy exact match of the answer tokens).
    """
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    target = ids[:, 1:]
    valid = mask[:, 1:].bool()
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
    pos = torch.arange(1, ids.shape[1], device=ids.device)[None, :]
    is_ans = (pos >= starts[:, None]) & valid
    weight = valid.float() * torch.where(is_ans, answer_weight, 1.0)
    loss = (ce * weight).sum() / weight.sum()
    # answer tokens only (not the final <eos>): positions start .. len-2 predict them
    last = mask.sum(1)[:, None]
    ans_tok = is_ans & (pos < last - 1)
    right = (logits.argmax(-1) == target) | ~ans_tok
    return loss, ce, valid, right.all(1)


@torch.no_grad()
def evaluate_encoded(model: PreTrainedModel, enc: Encoded, families: list[str], pad_id: int,
                     batch_size: int = 64) -> dict[str, float]:
    """Mean token loss (nats) and teacher-forced answer accuracy, overall and per family."""
    was = model.training
    model.eval()
    order = np.argsort([len(s) for s in enc.ids], kind="stable")
    tot, cnt = 0.0, 0
    ok: dict[str, list[bool]] = {}
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        ids, mask = pad([enc.ids[j] for j in idx], pad_id)
        starts = torch.tensor([enc.answer_start[j] for j in idx])
        dev = model.device
        _, ce, valid, right = weighted_loss(model, ids.to(dev), mask.to(dev), starts.to(dev), 1.0)
        tot += float(ce[valid].sum())
        cnt += int(valid.sum())
        for j, r in zip(idx, right.tolist()):
            ok.setdefault(families[j], []).append(bool(r))
    model.train(was)
    out = {"loss": tot / cnt, "answer_acc": float(np.mean([x for v in ok.values() for x in v]))}
    out.update({f"acc_{f}": float(np.mean(v)) for f, v in sorted(ok.items())})
    return out




@dataclass
class Packed:
    """Lines packed into rows: inputs, positions, next-token targets and loss weights, each ``(R, T)``.

    ``targets[r, t]`` is the token that follows ``input_ids[r, t]`` in the same
    line, or ``-100`` (no loss) at a line's last token and on padding;
    ``weights[r, t]`` is ``answer_weight`` where the target is an answer token or
    the line's ``<eos>``, ``1`` for other targets and ``0`` where there is none.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor
    weights: torch.Tensor
    families: list[list[str]]
    n_lines: int

    @property
    def n_tokens(self) -> int:
        """Tokens of the packed lines (padding not counted): each line has one more than targets."""
        return int((self.targets != -100).sum()) + self.n_lines


def pack(enc: Encoded, families: list[str], rows: int, row_len: int, pad_id: int,
         answer_weight: float) -> Packed:
    """First-fit packing of encoded lines, in order, into ``rows`` rows of ``row_len`` tokens.

    Each line goes into the first row with room for it; a line that fits nowhere is
    left out (the caller draws more lines than fit). Padding fills the rest of a
    row; its positions count on from the row's last line, and it has no target.
    """
    ids = np.full((rows, row_len), pad_id, dtype=np.int64)
    pos = np.zeros((rows, row_len), dtype=np.int64)
    tgt = np.full((rows, row_len), -100, dtype=np.int64)
    wts = np.zeros((rows, row_len), dtype=np.float32)
    fill = [0] * rows
    fams: list[list[str]] = [[] for _ in range(rows)]
    placed = 0
    for seq, start, fam in zip(enc.ids, enc.answer_start, families):
        n = len(seq)
        if n > row_len:
            raise ValueError(f"a {fam} line of {n} tokens does not fit rows of {row_len}")
        r = next((r for r in range(rows) if fill[r] + n <= row_len), None)
        if r is None:
            continue
        a = fill[r]
        ids[r, a:a + n] = seq
        pos[r, a:a + n] = np.arange(n)
        tgt[r, a:a + n - 1] = seq[1:]
        # target j (0-based in the line) predicts token j + 1: answer tokens and <eos> weigh more
        wts[r, a:a + n - 1] = 1.0
        wts[r, a + start - 1:a + n - 1] = answer_weight
        fill[r] += n
        fams[r].append(fam)
        placed += 1
    for r in range(rows):  # padding: its own positions after the row's last line
        if fill[r] < row_len:
            pos[r, fill[r]:] = np.arange(row_len - fill[r])
    ids, pos, tgt, wts = (torch.from_numpy(a) for a in (ids, pos, tgt, wts))
    return Packed(ids, pos, tgt, wts, fams, placed)


def packed_mask(position_ids: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The block-diagonal causal mask of packed lines, additive, ``(R, 1, T, T)``.

    A line starts wherever the position is 0; a token attends to the tokens of its
    own line up to itself (``0``) and to nothing else (the dtype's minimum). Passed
    as a 4D ``attention_mask``, ``transformers`` uses it as it is, for Llama and
    OPT alike (OPT does not infer packing from ``position_ids``).
    """
    line = (position_ids == 0).cumsum(-1)                                   # (R, T)
    t = position_ids.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=position_ids.device).tril()
    allowed = (line[:, :, None] == line[:, None, :]) & causal                # (R, T, T)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=position_ids.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def packed_loss(model: PreTrainedModel, batch: Packed) -> tuple[torch.Tensor, float]:
    """Weighted next-token loss of a packed batch, and its plain mean token loss (nats)."""
    dev = model.device
    ids, pos = batch.input_ids.to(dev), batch.position_ids.to(dev)
    tgt, w = batch.targets.to(dev), batch.weights.to(dev)
    mask = packed_mask(pos, model.dtype)
    logits = model(input_ids=ids, position_ids=pos, attention_mask=mask,
                   use_cache=False).logits.float()
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt, reduction="none",
                                           ignore_index=-100)
    loss = (ce * w).sum() / w.sum()
    valid = tgt != -100
    return loss, float(ce.detach()[valid].mean())


def mixture_at(corpus: Corpus, cfg: TrainConfig, step: int) -> np.ndarray:
    """The family mixture (probabilities over ``train_families``) of training step ``step``.

    Moves linearly from ``cfg.early_weights`` (normalised) to the corpus's
    ``train_weights`` over ``cfg.curriculum_steps``; without a curriculum it is
    ``train_weights`` throughout (equal weights when those are empty).
    """
    fams = corpus.config.train_families
    final = np.asarray(corpus.config.train_weights or [1.0] * len(fams), dtype=float)
    final = final / final.sum()
    if not cfg.early_weights or cfg.curriculum_steps == 0:
        return final
    early = np.asarray(cfg.early_weights, dtype=float)
    if len(early) != len(fams) or not early.sum() > 0:
        raise ValueError(f"early_weights must be {len(fams)} non-negative numbers, not all zero, "
                         f"aligned with {fams}")
    a = min(1.0, step / cfg.curriculum_steps)
    return (1 - a) * early / early.sum() + a * final


def stream_batch(corpus: Corpus, tok: PreTrainedTokenizerFast | WordEncoder, cfg: TrainConfig,
                 row_len: int, step: int) -> Packed:
    """The packed batch of step ``step``: fresh lines from the step's mixture, drawn with ``rng(seed, step)``.

    Lines are drawn in chunks until they hold 1.3 times what the rows can take
    (first-fit packing then leaves out what does not fit).
    """
    enc_fn = tok if isinstance(tok, WordEncoder) else WordEncoder(tok)
    rng = np.random.default_rng([cfg.seed, 7919, step])
    rows = max(1, cfg.batch_tokens // row_len)
    p = mixture_at(corpus, cfg, step)
    lines: list[Example] = []
    ids: list[list[int]] = []
    starts: list[int] = []
    total = 0
    while total < 1.3 * rows * row_len:
        extra = sample_lines(corpus, rng, p, max(8, int(1.3 * rows * row_len / 24)))
        enc = enc_fn(extra, max_len=row_len)
        lines += extra
        ids += enc.ids
        starts += enc.answer_start
        total += sum(len(x) for x in enc.ids)
    return pack(Encoded(ids, starts), [e.family for e in lines], rows, row_len,
                enc_fn.tok.pad_token_id, cfg.answer_weight)


@dataclass
class TrainedSubstrate:
    """The outcome of :func:`train_substrate`."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast
    curve: dict[str, list] = field(default_factory=dict)
    train_seconds: float = 0.0
    tokens_seen: int = 0
    tokenizer_seconds: float = 0.0
    device: str = "cpu"


def lr_at(cfg: TrainConfig, i: int) -> float:
    """The learning rate of step ``i``: linear warm-up, then cosine decay to ``lr * min_lr_frac``."""
    if i < cfg.warmup:
        return cfg.lr * (i + 1) / cfg.warmup
    frac = (i - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(model: PreTrainedModel, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW (betas 0.9, 0.95); weight decay on matrices only, not on norms and biases."""
    decay, no_decay = [], []
    for p in model.parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=cfg.lr, betas=(0.9, 0.95))


def train_device(device: str | None = None) -> torch.device:
    """``device``, else ``$MINIREPRO_DEVICE``, else the CPU."""
    return torch.device(device or os.environ.get("MINIREPRO_DEVICE") or "cpu")


class _Run:
    """The state of one training run: model, data, optimiser, batch queue and curve."""

    def __init__(self, corpus: Corpus, model_cfg: ModelConfig, cfg: TrainConfig,
                 tok: PreTrainedTokenizerFast, device: torch.device) -> None:
        self.cfg, self.tok, self.corpus, self.row_len = cfg, tok, corpus, model_cfg.max_len
        self.model = build_lm(model_cfg, tok, seed=cfg.seed).to(device)
        if not cfg.stream:
            self.train = encode_examples(tok, corpus.train, max_len=model_cfg.max_len)
            self.lengths = [len(s) for s in self.train.ids]
        self.words = WordEncoder(tok)
        val_ex = corpus.val[:cfg.eval_examples]
        self.val = encode_examples(tok, val_ex, max_len=model_cfg.max_len)
        self.val_fams = [e.family for e in val_ex]
        self.rng = np.random.default_rng(cfg.seed)
        self.opt = make_optimizer(self.model, cfg)
        self.batches: list[np.ndarray] = []
        self.curve: dict[str, list] = {"train_loss": [], "eval_step": [], "val_loss": [],
                                       "val_answer_acc": [], "val_family_acc": [],
                                       "induction_copy_acc": [], "prefix_matching": [],
                                       "tokens": []}
        self.seen = 0

    def record_eval(self, step: int) -> None:
        """Validation loss, teacher-forced answer accuracy and the induction scores at ``step``."""
        from minirepro.core.lm.diagnose import induction_scores

        ev = evaluate_encoded(self.model, self.val, self.val_fams, self.tok.pad_token_id)
        self.curve["eval_step"].append(step)
        self.curve["tokens"].append(self.seen)
        self.curve["val_loss"].append(round(ev["loss"], 5))
        self.curve["val_answer_acc"].append(round(ev["answer_acc"], 4))
        self.curve["val_family_acc"].append({k[4:]: round(v, 4) for k, v in ev.items()
                                             if k.startswith("acc_")})
        was = self.model.training
        self.model.eval()
        ind = induction_scores(self.model, self.tok, length=min(24, (self.row_len - 1) // 2),
                               n=32, seed=1)
        self.model.train(was)
        self.curve["induction_copy_acc"].append(round(ind["copy_acc"], 4))
        self.curve["prefix_matching"].append(round(ind["best_prefix_score"], 4))

    def step(self, i: int, batch: Packed | None = None) -> float:
        """One optimiser step on the next batch (``batch``: step ``i``'s packed batch, if made already)."""
        cfg = self.cfg
        for g in self.opt.param_groups:
            g["lr"] = lr_at(cfg, i)
        if cfg.stream:
            if batch is None:
                batch = stream_batch(self.corpus, self.words, cfg, self.row_len, i)
            loss, mean_ce = packed_loss(self.model, batch)
            self.seen += batch.n_tokens
        else:
            if not self.batches:
                self.batches.extend(length_batches(self.lengths, cfg.batch_size, self.rng,
                                                   batch_tokens=cfg.batch_tokens))
            idx = self.batches.pop()
            ids, mask = pad([self.train.ids[j] for j in idx], self.tok.pad_token_id)
            starts = torch.tensor([self.train.answer_start[j] for j in idx])
            dev = self.model.device
            loss, ce, valid, _ = weighted_loss(self.model, ids.to(dev), mask.to(dev),
                                               starts.to(dev), cfg.answer_weight)
            mean_ce = float(ce.detach()[valid].mean())
            self.seen += int(mask.sum())
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        if (i + 1) % cfg.eval_every == 0 or i + 1 == cfg.steps:
            self.record_eval(i + 1)
        return mean_ce

    # -- checkpoints -------------------------------------------------------------------
    def state(self, step: int, elapsed: float) -> dict:
        st = {"step": step, "elapsed": elapsed, "seen": self.seen, "curve": self.curve,
              "model": self.model.state_dict(), "opt": self.opt.state_dict(),
              "config": asdict(self.cfg)}
        if not self.cfg.stream:  # the fixed-lines batch queue is not saved; only streaming resumes exactly
            st["rng"] = self.rng.bit_generator.state
        return st

    def restore(self, st: dict) -> tuple[int, float]:
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["opt"])
        self.curve, self.seen = st["curve"], int(st["seen"])
        return int(st["step"]), float(st["elapsed"])


class _StepBatches(torch.utils.data.Dataset):
    """Step ``i`` -> its packed batch (for a ``DataLoader`` with worker processes)."""

    def __init__(self, run: _Run) -> None:
        self.corpus, self.words, self.cfg, self.row_len = run.corpus, run.words, run.cfg, run.row_len

    def __len__(self) -> int:
        return self.cfg.steps

    def __getitem__(self, i: int) -> Packed:
        return stream_batch(self.corpus, self.words, self.cfg, self.row_len, i)


def _as_is(x: Packed) -> Packed:
    return x


def _prefetch(run: _Run, start: int, workers: int):
    """Batches ``start, start + 1, ...`` made by ``workers`` processes, in order."""
    loader = torch.utils.data.DataLoader(_StepBatches(run), batch_size=None,
                                         sampler=range(start, run.cfg.steps), num_workers=workers,
                                         collate_fn=_as_is, prefetch_factor=4)
    return iter(loader)


def _save_checkpoint(path: Path, state: dict) -> None:
    """Write ``state`` atomically (``torch.save`` to a temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def progress_line(desc: str, step: int, steps: int, seen: int, elapsed: float, loss: float,
                  since_step: int = 0, since_elapsed: float = 0.0) -> str:
    """``desc: step 1,200/20,000 (6%), 3.2 M tokens, 5,100 tok/s, loss 1.234, 10m31s, ~2h45m left``.

    The time left extrapolates the rate of the steps run in this process (from
    ``since_step`` at ``since_elapsed`` seconds).
    """
    def hms(t: float) -> str:
        t = int(round(t))
        return (f"{t // 3600}h{t % 3600 // 60:02d}m" if t >= 3600 else f"{t // 60}m{t % 60:02d}s")
    rate = (step - since_step) / max(1e-9, elapsed - since_elapsed)
    left = (steps - step) / rate if rate > 0 else float("inf")
    return (f"{desc}: step {step:,}/{steps:,} ({step / steps:.0%}), {seen / 1e6:.1f} M tokens, "
            f"{seen / max(elapsed, 1e-9):,.0f} tok/s, loss {loss:.3f}, {hms(elapsed)}, "
            f"~{hms(left) if math.isfinite(left) else '?'} left")


def _resume(run: _Run, cfg: TrainConfig, ckpt: Path | None, dev: torch.device, desc: str,
            log: TextIO | None) -> tuple[int, float]:
    """The step to start at and the seconds already trained: from ``ckpt`` when it exists
    (same training config), else 0 after recording the step-0 evaluation."""
    if ckpt is not None and ckpt.exists():
        st = torch.load(ckpt, map_location=dev, weights_only=True)
        if st["config"] != asdict(cfg):
            raise ValueError(f"checkpoint {ckpt} is of another training config; remove it")
        start, before = run.restore(st)
        if log:
            print(f"{desc}: resuming at step {start:,} from {ckpt}", file=log, flush=True)
        return start, before
    run.record_eval(0)
    return 0, 0.0


def _train_loop(run: _Run, cfg: TrainConfig, start: int, before: float, ckpt: Path | None,
                checkpoint_every: int, desc: str, log: TextIO | None, log_every_s: float,
                on_eval: Callable[[dict], None] | None, data_workers: int) -> float:
    """Steps ``start .. cfg.steps - 1`` (checkpoints, progress lines, ``on_eval``); returns the
    seconds trained in all, ``before`` included."""
    t1 = time.perf_counter()
    last_log, losses = t1, run.curve["train_loss"]
    batches = _prefetch(run, start, data_workers) if cfg.stream and data_workers else None
    for i in range(start, cfg.steps):
        loss = run.step(i, next(batches) if batches is not None else None)
        if not math.isfinite(loss):
            raise FloatingPointError(f"{desc}: loss is {loss} at step {i}")
        losses.append(round(loss, 5))
        now = time.perf_counter()
        if ckpt is not None and ((i + 1) % checkpoint_every == 0) and i + 1 < cfg.steps:
            _save_checkpoint(ckpt, run.state(i + 1, before + now - t1))
        if on_eval is not None and ((i + 1) % cfg.eval_every == 0 or i + 1 == cfg.steps):
            on_eval(run.curve)
        if log and (now - last_log >= log_every_s or i + 1 == cfg.steps):
            print(progress_line(desc, i + 1, cfg.steps, run.seen, before + now - t1, loss,
                                start, before), file=log, flush=True)
            last_log = now
    return before + time.perf_counter() - t1


def train_substrate(corpus: Corpus, model_cfg: ModelConfig, cfg: TrainConfig,
                    tokenizer: PreTrainedTokenizerFast | None = None,
                    desc: str = "lm", checkpoint: str | Path | None = None,
                    checkpoint_every: int = 500, log: TextIO | None = None,
                    log_every_s: float = 60.0, device: str | None = None,
                    on_eval: Callable[[dict], None] | None = None,
                    data_workers: int = 0) -> TrainedSubstrate:
    """Train (tokenizer if not given, then) the model on ``corpus``; record the curve.

    Args:
        corpus, model_cfg, cfg: what to train on, what to train, how.
        tokenizer: a trained tokenizer (default: train one on ``corpus.texts("train")``).
        desc: the name in progress lines.
        checkpoint: a file; when it exists the run resumes from it (the tokenizer
            must be the same), and it is rewritten every ``checkpoint_every`` steps.
            With ``stream=True`` a resumed run ends with the same weights as an
            uninterrupted one (same kernels).
        log: where progress lines go (default: standard error, unless ``TQDM_DISABLE``
            is set); a line every ``log_every_s`` seconds and at the end.
        device: a torch device (default ``$MINIREPRO_DEVICE`` or ``"cpu"``).
        on_eval: called with the curve after every evaluation (for live plots).
        data_workers: with ``stream``, processes that make the batches ahead of the
            optimiser (each batch is a function of its step, so the result is the same);
            0 makes them in this process. Worth it where a step is faster than its data
            (a GPU).

    The curve holds ``train_loss`` (mean token loss of each step's batch) and, at
    every ``eval_every`` steps, ``eval_step``, ``tokens``, ``val_loss``,
    ``val_answer_acc`` and ``val_family_acc`` (teacher-forced, first
    ``eval_examples`` validation lines), ``induction_copy_acc`` and
    ``prefix_matching`` (:func:`~minirepro.core.lm.diagnose.induction_scores`).
    """
    threads_before = torch.get_num_threads()
    set_seed(cfg.seed, threads=cfg.threads)
    dev = train_device(device)
    if log is None and not bars_disabled():
        log = sys.stderr
    try:
        t0 = time.perf_counter()
        tok = tokenizer or train_bpe(corpus.texts("train"), vocab_size=cfg.vocab_size)
        t_tok = time.perf_counter() - t0
        run = _Run(corpus, model_cfg, cfg, tok, dev)
        run.model.train()
        ckpt = Path(checkpoint) if checkpoint is not None else None
        start, before = _resume(run, cfg, ckpt, dev, desc, log)
        train_seconds = _train_loop(run, cfg, start, before, ckpt, checkpoint_every, desc, log,
                                    log_every_s, on_eval, data_workers)
    finally:
        torch.set_num_threads(threads_before)
    run.model.eval()
    return TrainedSubstrate(run.model.cpu(), tok, run.curve, train_seconds, run.seen, t_tok,
                            str(dev))
