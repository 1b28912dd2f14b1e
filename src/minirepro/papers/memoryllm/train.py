"""Training and scoring the variants on the substrate corpus (one thread, fixed steps).

The data pipeline is the substrate's (:func:`minirepro.core.lm.train.encode_examples`,
``length_batches``, ``pad``); the loss is plain next-token cross-entropy over every
token with the answer tokens weighted by ``answer_weight`` (as the substrate trains).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from minirepro.core import set_seed
from minirepro.core.lm.train import Encoded, length_batches, pad
from minirepro.papers.memoryllm.model import Arch, MemoryLM


@dataclass(frozen=True)
class TrainSpec:
    """AdamW schedule: steps, batch, peak lr (warm-up then cosine to 10%), weight decay."""

    steps: int = 1200
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 60
    weight_decay: float = 0.05
    answer_weight: float = 3.0


def token_losses(model: MemoryLM, ids: torch.Tensor, mask: torch.Tensor, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token next-token NLL ``(B, T-1)`` (nats) and its validity mask."""
    logits = model(ids, attention_mask=mask, **kw)[:, :-1].float()
    ce = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return ce, mask[:, 1:].bool()


def train_variant(arch: Arch, enc: Encoded, spec: TrainSpec, seed: int, pad_id: int = 0
                  ) -> tuple[MemoryLM, list[float], float]:
    """[reconstruction] Train one variant from scratch: model, per-step train loss, seconds.

    The paper trains with Adam (0.9, 0.95), weight decay 0.1, warm-up and cosine decay
    on C4; we keep the optimiser and schedule and shrink everything else.
    """
    set_seed(seed)
    model = MemoryLM(arch).train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": spec.weight_decay},
                             {"params": other, "weight_decay": 0.0}], lr=spec.lr, betas=(0.9, 0.95))
    rng = np.random.default_rng(seed)
    lengths = [len(s) for s in enc.ids]
    batches: list[np.ndarray] = []
    curve = []
    t0 = time.process_time()
    for i in range(spec.steps):
        if not batches:
            batches.extend(length_batches(lengths, spec.batch_size, rng))
        idx = batches.pop()
        ids, mask = pad([enc.ids[j] for j in idx], pad_id)
        starts = torch.tensor([enc.answer_start[j] for j in idx])
        frac = max(0.0, (i - spec.warmup) / max(1, spec.steps - spec.warmup))
        lr = spec.lr * min(1.0, (i + 1) / spec.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        ce, valid = token_losses(model, ids, mask)
        pos = torch.arange(1, ids.shape[1])[None, :]
        w = valid.float() * torch.where(pos >= starts[:, None], spec.answer_weight, 1.0)
        loss = (ce * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        curve.append(float(ce.detach()[valid].mean()))
    return model.eval(), curve, time.process_time() - t0


@torch.no_grad()
def score(model: MemoryLM, enc: Encoded, families: list[str], batch_size: int = 64, **kw) -> dict:
    """Token perplexity of the whole lines, and per family the answer-token NLL and exact match.

    Returns ``{"ppl", "nll", "tokens", "fam": {family: {"nll", "acc", "n"}}}``; ``nll`` is
    the mean answer-token NLL (nats), ``acc`` teacher-forced exact match of the answer.
    ``kw`` goes to the model (``alpha``, ``tol``, ``drop_layer``).
    """
    tot, cnt = 0.0, 0
    fam: dict[str, dict[str, list]] = {}
    order = np.argsort([len(s) for s in enc.ids], kind="stable")
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        ids, mask = pad([enc.ids[j] for j in idx], 0)
        logits = model(ids, attention_mask=mask, **kw)[:, :-1].float()
        tgt = ids[:, 1:]
        ce = F.cross_entropy(logits.transpose(1, 2), tgt, reduction="none")
        valid = mask[:, 1:].bool()
        tot += float(ce[valid].sum())
        cnt += int(valid.sum())
        right = logits.argmax(-1) == tgt
        for r, j in enumerate(idx):
            a, e = enc.answer_start[j] - 1, len(enc.ids[j]) - 2   # positions predicting the answer
            f = fam.setdefault(families[j], {"nll": [], "acc": []})
            f["nll"].append(float(ce[r, a:e].mean()))
            f["acc"].append(bool(right[r, a:e].all()))
    return {"ppl": math.exp(tot / cnt), "nll": tot / cnt, "tokens": cnt,
            "fam": {k: {"nll": float(np.mean(v["nll"])), "acc": float(np.mean(v["acc"])), "n": len(v["acc"])}
                    for k, v in sorted(fam.items())}}
