"""The chapter's trained models as a checked artifact (``artifacts/ali-book/``).

Training both priors and every arm for ten seeds takes longer than the book's budget,
so the recipe below trains them once (:func:`minirepro.papers.ali.train.train_seed` at
the book preset) and the chapter loads them. Re-make with
``minirepro artifacts build ali-book``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from joblib import Parallel, delayed
from safetensors.torch import load_file, save_file

from minirepro.core import artifacts
from minirepro.papers.ali.experiment import Config, evaluate_seed, make_data
from minirepro.papers.ali.models import PriorEncoder, Relighter
from minirepro.papers.ali.priors import PRIORS
from minirepro.papers.ali.train import ARMS, SELF_SUP, Models, train_seed

NAME = "ali-book"
WEIGHTS = "models.safetensors"
CURVES = "curves.json"
TRAINING_FIELDS: tuple[str, ...] = (
    "size", "n_train", "n_lights", "n_shifted", "width", "c_s", "c_l", "batch_scenes", "n_pixels", "lr",
    "prior_steps", "base_steps", "stage1_steps", "stage2_steps", "stage3_steps", "w_intrinsic", "w_reg")
"""The Config fields that decide the trained models (the rest only decide how they are evaluated)."""


def _book_training() -> dict[str, float | int]:
    book = Config.preset("book")
    return {k: getattr(book, k) for k in TRAINING_FIELDS}


@dataclass
class ArtifactSpec:
    """What the artifact holds: the models for ``seeds``, trained on scenes from ``data_seed`` with
    the book preset's training settings ``training`` (the evaluation settings are not part of it,
    so the chapter may change how it tests the models without re-training them)."""

    seeds: tuple[int, ...] = tuple(range(10))
    data_seed: int = 0
    training: dict[str, float | int] = field(default_factory=_book_training)

    @property
    def config(self) -> Config:
        """The chapter's Config with these training settings."""
        return Config.preset("book", **self.training)


SPEC = ArtifactSpec()


def _prior_of(key: str) -> str | None:
    arm = key.rsplit(" ", 1)[0]
    return "dense" if arm == SELF_SUP else ARMS[arm]


@artifacts.recipe(NAME, config=SPEC, description="ALI chapter: priors and relighters, 10 seeds (book preset)",
                  sources=("minirepro.papers.ali.render", "minirepro.papers.ali.models",
                           "minirepro.papers.ali.priors", "minirepro.papers.ali.train"))
def build_ali_book(spec: ArtifactSpec, out: Path) -> artifacts.BuildResult:
    """[reconstruction] Train every seed's models and write their weights (fp32 safetensors)."""
    cfg = spec.config
    data = make_data(cfg, spec.data_seed, spec.seeds[:1])  # a test set for the first seed's quality
    tensors: dict[str, torch.Tensor] = {}
    curves: dict[str, list[float]] = {}
    quality: dict[str, float] = {}
    jobs = Parallel(n_jobs=len(spec.seeds))(  # one process (one thread) per seed
        delayed(train_seed)(cfg, data.train, data.shifted_train, seed) for seed in spec.seeds)
    for seed, (models, c) in zip(spec.seeds, jobs):
        for key, model in models.items():
            for name, t in model.state_dict().items():
                if not name.startswith("prior."):  # a fused prior is stored once, as "<kind> prior"
                    tensors[f"{seed}/{key}/{name}"] = t.detach().contiguous().clone()
        if seed == spec.seeds[0]:
            curves = {k: [round(v, 5) for v in vals] for k, vals in c.items()}
            rows, probes, _ = evaluate_seed(models, data, seed)
            for r in rows:
                if r["domain"] == "synthetic" and r["region"] == "all" and r["stage"] in ("II", "III", "-"):
                    quality[f"psnr {r['method']} (seed {seed})"] = round(r["psnr"], 3)
            for p in probes:
                quality[f"probe {p['prior']} (seed {seed})"] = round(p["probe accuracy"], 3)
    save_file(tensors, str(out / WEIGHTS))
    (out / CURVES).write_text(json.dumps(curves) + "\n", encoding="utf-8")
    digest = hashlib.sha256(data.train.images.tobytes() + data.shifted_train.images.tobytes()).hexdigest()
    return artifacts.BuildResult(quality=quality, data_hash=digest)


def load_models(seed: int, folder: Path | None = None) -> Models:
    """One seed's models from the artifact (verified by :func:`minirepro.core.artifacts.load`)."""
    if seed not in SPEC.seeds:
        raise ValueError(f"the artifact {NAME} holds seeds {list(SPEC.seeds)}, not {seed}; "
                         "train instead (train_models=True)")
    folder = Path(folder) if folder is not None else artifacts.load(NAME)
    flat = load_file(str(folder / WEIGHTS))
    cfg = SPEC.config
    groups: dict[str, dict[str, torch.Tensor]] = {}
    for k, t in flat.items():
        s, key, name = k.split("/", 2)
        if int(s) == seed:
            groups.setdefault(key, {})[name] = t
    models: Models = {}
    for kind in PRIORS:
        prior = PriorEncoder(cfg.width)
        prior.load_state_dict(groups.pop(f"{kind} prior"))
        prior.eval().requires_grad_(False)
        models[f"{kind} prior"] = prior
    for key, state in groups.items():
        model = Relighter(cfg.width, cfg.c_s, cfg.c_l)
        kind = _prior_of(key)
        if kind is not None:
            model.attach_prior(models[f"{kind} prior"])
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or any(not m.startswith("prior.") for m in missing):
            raise ValueError(f"artifact {NAME}: weights of {key!r} do not fit the model "
                             f"(missing {missing}, unexpected {unexpected})")
        model.eval().requires_grad_(False)
        models[key] = model
    return models


def load_curves(folder: Path | None = None) -> dict[str, list[float]]:
    """The loss curves of the artifact's first seed, recorded when it was built."""
    folder = Path(folder) if folder is not None else artifacts.load(NAME)
    return json.loads((folder / CURVES).read_text(encoding="utf-8"))
