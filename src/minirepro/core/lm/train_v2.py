"""Training the v2 substrate: tokenizer, model and loss curve, on one thread, reproducibly.

:func:`train_substrate` trains the BPE tokenizer on the corpus's train split,
builds the model, and trains it with AdamW (linear warm-up, cosine decay to
``min_lr_frac``), batches of similar-length lines (less padding), and a loss
that weights answer tokens by ``answer_weight``. Every ``eval_every`` steps it
records the validation loss and the teacher-forced answer accuracy on a fixed
validation subset, so the loss curve ships with the model. A fixed number of
steps (never a time budget) keeps the weights a function of the configs alone
on a given CPU kernel set; training runs on ``threads`` torch threads (one by
default).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from minirepro.core.lm.bpe import train_bpe
from minirepro.core.lm.corpus_v2 import CorpusV2, Example
from minirepro.core.lm.models_v2 import ModelV2Config, build_lm
from minirepro.core.progress import train_loop
from minirepro.core.scale import ScaledConfig
from minirepro.core.seed import set_seed


@dataclass
class TrainV2Config(ScaledConfig):
    """How the v2 substrate is trained.

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
    pos = torch.arange(1, ids.shape[1])[None, :]
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
        _, ce, valid, right = weighted_loss(model, ids, mask, starts, 1.0)
        tot += float(ce[valid].sum())
        cnt += int(valid.sum())
        for j, r in zip(idx, right.tolist()):
            ok.setdefault(families[j], []).append(bool(r))
    model.train(was)
    out = {"loss": tot / cnt, "answer_acc": float(np.mean([x for v in ok.values() for x in v]))}
    out.update({f"acc_{f}": float(np.mean(v)) for f, v in sorted(ok.items())})
    return out


@dataclass
class TrainedSubstrate:
    """The outcome of :func:`train_substrate`."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast
    curve: dict[str, list] = field(default_factory=dict)
    train_seconds: float = 0.0
    tokens_seen: int = 0
    tokenizer_seconds: float = 0.0


def lr_at(cfg: TrainV2Config, i: int) -> float:
    """The learning rate of step ``i``: linear warm-up, then cosine decay to ``lr * min_lr_frac``."""
    if i < cfg.warmup:
        return cfg.lr * (i + 1) / cfg.warmup
    frac = (i - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(model: PreTrainedModel, cfg: TrainV2Config) -> torch.optim.AdamW:
    """AdamW (betas 0.9, 0.95); weight decay on matrices only, not on norms and biases."""
    decay, no_decay = [], []
    for p in model.parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=cfg.lr, betas=(0.9, 0.95))


class _Run:
    """The state of one training run: model, data, optimiser, batch queue and curve."""

    def __init__(self, corpus: CorpusV2, model_cfg: ModelV2Config, cfg: TrainV2Config,
                 tok: PreTrainedTokenizerFast) -> None:
        self.cfg, self.tok = cfg, tok
        self.model = build_lm(model_cfg, tok, seed=cfg.seed)
        self.train = encode_examples(tok, corpus.train, max_len=model_cfg.max_len)
        val_ex = corpus.val[:cfg.eval_examples]
        self.val = encode_examples(tok, val_ex, max_len=model_cfg.max_len)
        self.val_fams = [e.family for e in val_ex]
        self.rng = np.random.default_rng(cfg.seed)
        self.lengths = [len(s) for s in self.train.ids]
        self.opt = make_optimizer(self.model, cfg)
        self.batches: list[np.ndarray] = []
        self.curve: dict[str, list] = {"train_loss": [], "eval_step": [], "val_loss": [],
                                       "val_answer_acc": [], "val_family_acc": []}
        self.seen = 0

    def record_eval(self, step: int) -> None:
        """Validation loss and teacher-forced answer accuracy (overall, per family) at ``step``."""
        ev = evaluate_encoded(self.model, self.val, self.val_fams, self.tok.pad_token_id)
        self.curve["eval_step"].append(step)
        self.curve["val_loss"].append(round(ev["loss"], 5))
        self.curve["val_answer_acc"].append(round(ev["answer_acc"], 4))
        self.curve["val_family_acc"].append({k[4:]: round(v, 4) for k, v in ev.items()
                                             if k.startswith("acc_")})

    def step(self, i: int) -> float:
        """One optimiser step on the next batch (a new epoch of batches when the queue is empty)."""
        cfg = self.cfg
        if not self.batches:
            self.batches.extend(length_batches(self.lengths, cfg.batch_size, self.rng,
                                               batch_tokens=cfg.batch_tokens))
        idx = self.batches.pop()
        ids, mask = pad([self.train.ids[j] for j in idx], self.tok.pad_token_id)
        starts = torch.tensor([self.train.answer_start[j] for j in idx])
        for g in self.opt.param_groups:
            g["lr"] = lr_at(cfg, i)
        loss, ce, valid, _ = weighted_loss(self.model, ids, mask, starts, cfg.answer_weight)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.seen += int(mask.sum())
        if (i + 1) % cfg.eval_every == 0 or i + 1 == cfg.steps:
            self.record_eval(i + 1)
        return float(ce.detach()[valid].mean())


def train_substrate(corpus: CorpusV2, model_cfg: ModelV2Config, cfg: TrainV2Config,
                    tokenizer: PreTrainedTokenizerFast | None = None,
                    desc: str = "lm v2") -> TrainedSubstrate:
    """Train (tokenizer if not given, then) the model on ``corpus.train``; record the curve.

    The curve holds ``step`` and ``train_loss`` (mean token CE of each step's
    batch, every step), and at every ``eval_every`` steps ``eval_step``,
    ``val_loss``, ``val_answer_acc`` (teacher-forced) on the first
    ``eval_examples`` validation lines.
    """
    threads_before = torch.get_num_threads()
    set_seed(cfg.seed, threads=cfg.threads)
    try:
        t0 = time.perf_counter()
        tok = tokenizer or train_bpe(corpus.texts("train"), vocab_size=cfg.vocab_size)
        t_tok = time.perf_counter() - t0
        run = _Run(corpus, model_cfg, cfg, tok)
        run.model.train()
        run.record_eval(0)
        t1 = time.perf_counter()
        run.curve["train_loss"] = [round(x, 5) for x in train_loop(run.step, cfg.steps, desc=desc)]
        train_seconds = time.perf_counter() - t1
    finally:
        torch.set_num_threads(threads_before)
    run.model.eval()
    return TrainedSubstrate(run.model, tok, run.curve, train_seconds, run.seen, t_tok)
