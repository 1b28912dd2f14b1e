"""The spread variant's learner as a checked artifact (``artifacts/tasm-icl-spread/``).

Trained by the chapter's own loss (:func:`minirepro.papers.tasm.artifact.episode_loss`, the
query's label plus the auxiliary digit class) on label-first episodes from the ``"train"`` half
of the digits, with the local encoder of :mod:`minirepro.papers.tasm.spread`; fp16 safetensors.
Re-make with ``minirepro artifacts build tasm-icl-spread``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from minirepro.core import artifacts, set_seed
from minirepro.papers.tasm.artifact import DATA_SEED, episode_loss, full_context_accuracy
from minirepro.papers.tasm.data import make_episodes, split_digits
from minirepro.papers.tasm.loading import CURVE, SPREAD_NAME, SPREAD_WEIGHTS, load_spread_model
from minirepro.papers.tasm.spread import SPREAD_ARCH, SPREAD_FORMAT, SpreadICLTransformer


@dataclass
class SpreadRecipe:
    """How the spread learner is trained: episode shape, steps, batch, learning rate, radius."""

    n_way: int = 5
    k_shot: int = 1
    steps: int = 2500
    batch: int = 32
    lr: float = 2e-3
    aux: float = 0.5
    radius: int = 1
    layers: int = 3
    local: int = 1
    eval_episodes: int = 500
    seed: int = 0


def train_spread(spec: SpreadRecipe) -> tuple[SpreadICLTransformer, dict]:
    """[reconstruction] AdamW with a one-cycle schedule on fresh label-first training episodes per
    step (the recipe of ``tasm-icl-transformer``, other model). Returns the model and its curve."""
    set_seed(spec.seed)
    model = SpreadICLTransformer(radius=spec.radius, **{**SPREAD_ARCH, "layers": spec.layers, "local": spec.local})
    opt, sched = artifacts.one_cycle_adamw(model, spec.lr, spec.steps)
    curve: dict = {"every": 50, "loss": [], f"acc {SPREAD_FORMAT}": []}
    losses, accs = [], []
    for step in range(spec.steps):
        ep = make_episodes(spec.batch, spec.n_way, spec.k_shot, DATA_SEED + step, "train")
        loss, acc = episode_loss(model, ep, SPREAD_FORMAT, spec.aux)
        losses.append(artifacts.clipped_step(model, opt, sched, loss))
        accs.append(acc.item())
        if (step + 1) % 50 == 0:
            curve["loss"].append(round(sum(losses) / len(losses), 4))
            curve[f"acc {SPREAD_FORMAT}"].append(round(sum(accs) / len(accs), 4))
            if (step + 1) % 500 == 0:
                print(f"step {step + 1}: loss {curve['loss'][-1]}, query accuracy "
                      f"{curve[f'acc {SPREAD_FORMAT}'][-1]}", file=sys.stderr, flush=True)
            losses, accs = [], []
    return model, curve


@artifacts.recipe(SPREAD_NAME, config=SpreadRecipe(),
                  sources=("minirepro.papers.tasm.data", "minirepro.papers.tasm.model",
                           "minirepro.papers.tasm.artifact", "minirepro.papers.tasm.spread"),
                  description="TASM chapter, spread variant: learner whose demonstration tokens "
                              "see only a 3x3 patch neighbourhood and their label (fp16)")
def build_spread_transformer(spec: SpreadRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] Train the spread learner; store fp16 weights, the curve and its held-out
    full-context accuracy."""
    model, curve = train_spread(spec)
    artifacts.write_files(out, SPREAD_WEIGHTS, artifacts.float16_state(model), {CURVE: curve})
    loaded = load_spread_model(out)
    quality = {f"held-out accuracy {SPREAD_FORMAT}": round(full_context_accuracy(
        loaded, spec.eval_episodes, 999, SPREAD_FORMAT, spec.n_way, spec.k_shot), 4)}
    imgs, y = split_digits("train")
    digest = artifacts.sha256_hex(imgs.tobytes(), y.tobytes(), str(DATA_SEED).encode())
    return artifacts.BuildResult(quality=quality, data_hash=digest)
