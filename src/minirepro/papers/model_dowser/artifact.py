"""The pretrained tiny MLLM as a checked artifact (``artifacts/model-dowser-mllm/``).

The recipe trains CNN, projector and decoder together on the four upstream tasks
(three templated questions about the training digits and the text-only sum) and stores
fp16 safetensors and the training curve. Re-make with
``minirepro artifacts build model-dowser-mllm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from minirepro.core import artifacts, set_seed
from minirepro.papers.model_dowser.data import (
    UPSTREAM,
    image_prompts,
    split_digits,
    text_prompts,
    upstream_sets,
)
from minirepro.papers.model_dowser.loading import ARCH, CURVE, NAME, WEIGHTS, load_model
from minirepro.papers.model_dowser.model import TinyMLLM, accuracy


@dataclass
class PretrainRecipe:
    """How the model is pretrained: AdamW steps, image and text batch sizes, learning rate."""

    steps: int = 800
    image_batch: int = 96
    text_batch: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    seed: int = 0


def pretrain_loss(model: TinyMLLM, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator,
                  text_batch: int) -> torch.Tensor:
    """[reconstruction] Cross-entropy over one minibatch of each upstream task (images split
    evenly over the three image questions) plus one batch of text-only sums."""
    loss = torch.zeros(())
    for k, task in enumerate(UPSTREAM[:3]):
        part = slice(k, None, 3)
        b = image_prompts(x[part], y[part], task)
        loss = loss + F.cross_entropy(model.logits(b), b.target)
    a, c = torch.randint(0, 10, (2, text_batch), generator=gen)
    t = text_prompts(a, c)
    return loss + F.cross_entropy(model.logits(t), t.target)


@artifacts.recipe(NAME, config=PretrainRecipe(),
                  sources=("minirepro.papers.model_dowser.data", "minirepro.papers.model_dowser.model"),
                  description="Model-Dowser chapter: the tiny multimodal LM (digit CNN, projector, "
                              "4-block decoder; upstream questions and text-only sums; fp16)")
def build_mllm(spec: PretrainRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] Pretrain the whole model with AdamW on the upstream tasks; store fp16
    weights, the curve, and the held-out accuracy per upstream task."""
    set_seed(spec.seed)
    gen = torch.Generator().manual_seed(spec.seed)
    x, y = split_digits("train")
    model = TinyMLLM(**ARCH)
    opt, sched = artifacts.one_cycle_adamw(model, spec.lr, spec.steps, spec.weight_decay)
    curve: dict = {"every": 50, "loss": []}
    losses = []
    for step in range(spec.steps):
        idx = torch.randint(0, len(y), (spec.image_batch,), generator=gen)
        loss = pretrain_loss(model, x[idx], y[idx], gen, spec.text_batch)
        losses.append(artifacts.clipped_step(model, opt, sched, loss))
        if (step + 1) % curve["every"] == 0:
            curve["loss"].append(round(sum(losses) / len(losses), 4))
            losses = []
    artifacts.write_files(out, WEIGHTS, artifacts.float16_state(model), {CURVE: curve})
    loaded = load_model(out)
    quality = {f"test accuracy {t}": round(accuracy(loaded, b), 4) for t, b in upstream_sets("test").items()}
    digest = artifacts.sha256_hex(x.numpy().tobytes(), y.numpy().tobytes())
    return artifacts.BuildResult(quality=quality, data_hash=digest)
