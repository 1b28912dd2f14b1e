"""The in-context learner as a checked artifact (``artifacts/tasm-icl-transformer/``).

The recipe trains :class:`~minirepro.papers.tasm.model.ICLTransformer` on episodes built from
the ``"train"`` half of the digits (image-first episodes by default: an earlier trial that
alternated both formats learned the label-first one too slowly for the CPU budget), and
stores fp16 safetensors. Re-make with ``minirepro artifacts build tasm-icl-transformer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from minirepro.core import artifacts, set_seed
from minirepro.papers.tasm.data import FORMATS, ITEM, N_PATCH, make_episodes, split_digits
from minirepro.papers.tasm.loading import ARCH, CURVE, NAME, WEIGHTS, load_model
from minirepro.papers.tasm.model import ICLTransformer

DATA_SEED = 100_000  # training episodes; the chapter's evaluation seeds are far below it


@dataclass
class ICLRecipe:
    """How the learner is trained: episode shape, Adam steps, batch, learning rate."""

    n_way: int = 5
    k_shot: int = 1
    steps: int = 2400
    batch: int = 32
    lr: float = 2e-3
    aux: float = 0.5
    formats: tuple = ("image-first",)
    eval_episodes: int = 500
    seed: int = 0


def episode_loss(model: ICLTransformer, ep, fmt: str, aux: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """[reconstruction] Cross-entropy of the query's label, plus an auxiliary cross-entropy of
    the true digit class read at every image's last patch token (demonstrations and query),
    weight ``aux``, plus (image-first, more than one shot) of every demonstration's label read
    at its last patch before the label is shown. The auxiliary loss gives the residual stream
    class features early, so that the in-context lookup (match the query to a demonstration,
    copy its label) can be learned within the CPU budget; the labels stay permuted per episode."""
    x = torch.cat([model.embed_items(ep.demo_patches, ep.demo_labels, fmt),
                   model.embed_query(ep.query_patches, fmt)], 1)
    h = model(x)
    q_logits = model.logits_at(h[:, -1])
    loss = F.cross_entropy(q_logits, ep.query_label)
    if fmt == "image-first" and ep.n_demos > model.n_way:
        pos = torch.arange(ep.n_demos) * ITEM + N_PATCH - 1
        d_logits = model.logits_at(h[:, pos])
        loss = 0.5 * loss + 0.5 * F.cross_entropy(d_logits.reshape(-1, model.n_way), ep.demo_labels.reshape(-1))
    if aux > 0:
        last = N_PATCH - 1 if fmt == "image-first" else ITEM - 1
        pos = torch.arange(ep.n_demos) * ITEM + last
        h_img = torch.cat([h[:, pos], h[:, -1:]], 1)
        cls = torch.cat([ep.demo_classes, ep.query_class[:, None]], 1)
        loss = loss + aux * F.cross_entropy(model.cls(h_img).reshape(-1, 10), cls.reshape(-1))
    return loss, (q_logits.argmax(-1) == ep.query_label).float().mean()


@torch.no_grad()
def full_context_accuracy(model: ICLTransformer, n: int, seed: int, fmt: str, n_way: int, k_shot: int) -> float:
    """Query accuracy with the full demonstration cache on held-out digits."""
    ep = make_episodes(n, n_way, k_shot, seed, "test")
    x = torch.cat([model.embed_items(ep.demo_patches, ep.demo_labels, fmt),
                   model.embed_query(ep.query_patches, fmt)], 1)
    pred = model.logits_at(model(x)[:, -1]).argmax(-1)
    return float((pred == ep.query_label).float().mean())


@artifacts.recipe(NAME, config=ICLRecipe(),
                  sources=("minirepro.papers.tasm.data", "minirepro.papers.tasm.model"),
                  description="TASM chapter: the in-context learner (3-layer transformer on digit "
                              "patch tokens, labels permuted per episode; fp16)")
def build_icl_transformer(spec: ICLRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] Train the learner with Adam on fresh episodes per step; store fp16
    weights and the curve."""
    set_seed(spec.seed)
    model = ICLTransformer(**ARCH)
    opt, sched = artifacts.one_cycle_adamw(model, spec.lr, spec.steps)
    curve: dict = {"every": 50, "loss": [], **{f"acc {f}": [] for f in spec.formats}}
    run = {f: [] for f in spec.formats}
    losses = []
    for step in range(spec.steps):
        fmt = spec.formats[step % len(spec.formats)]
        ep = make_episodes(spec.batch, spec.n_way, spec.k_shot, DATA_SEED + step, "train")
        loss, acc = episode_loss(model, ep, fmt, spec.aux)
        losses.append(artifacts.clipped_step(model, opt, sched, loss))
        run[fmt].append(acc.item())
        if (step + 1) % 50 == 0:
            curve["loss"].append(round(sum(losses) / len(losses), 4))
            for f in spec.formats:
                curve[f"acc {f}"].append(round(sum(run[f]) / max(len(run[f]), 1), 4))
            losses, run = [], {f: [] for f in spec.formats}
    artifacts.write_files(out, WEIGHTS, artifacts.float16_state(model), {CURVE: curve})
    loaded = load_model(out)
    quality = {f"held-out accuracy {f}": round(full_context_accuracy(
        loaded, spec.eval_episodes, 999, f, spec.n_way, spec.k_shot), 4) for f in FORMATS}
    quality["training formats"] = ",".join(spec.formats)
    imgs, y = split_digits("train")
    digest = artifacts.sha256_hex(imgs.tobytes(), y.tobytes(), str(DATA_SEED).encode())
    return artifacts.BuildResult(quality=quality, data_hash=digest)
