"""The chapter's experiment: priors, LI, fusion arms and stages over seeds, evaluated per material."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core import ScaledConfig, progress
from minirepro.papers.ali.metrics import region_metrics
from minirepro.papers.ali.models import Relighter
from minirepro.papers.ali.priors import PRIORS, linear_probe
from minirepro.papers.ali.render import MATERIALS, SceneSet, make_scenes
from minirepro.papers.ali.train import Models, train_seed

BASELINES: tuple[str, ...] = ("copy input", "copy reference")


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature. The paper: 512x512 photos, 6 large pretrained priors, a diffusion decoder."""

    size: int = 16  # image side in pixels
    n_train: int = 128  # training scenes, each under n_lights lights
    n_lights: int = 4
    n_test: int = 48  # test scenes per domain (one cross-scene triplet each)
    n_shifted: int = 128  # unlabeled shifted-domain images for Stage III
    width: int = 16
    c_s: int = 8
    c_l: int = 8
    batch_scenes: int = 5
    n_pixels: int = 192
    lr: float = 3e-3
    prior_steps: int = 120
    base_steps: int = 400
    stage1_steps: int = 100
    stage2_steps: int = 100
    stage3_steps: int = 60
    n_seeds: int = 5
    train_models: bool = False
    w_intrinsic: float = 0.1
    w_reg: float = 0.01
    PRESETS: ClassVar = {
        "smoke": {"n_train": 64, "n_test": 24, "n_shifted": 32, "prior_steps": 30, "base_steps": 60,
                  "stage1_steps": 15, "stage2_steps": 15, "stage3_steps": 15, "batch_scenes": 4,
                  "n_seeds": 3},
        "book": {},
        "full": {"size": 32, "n_train": 512, "n_test": 128, "n_shifted": 512, "prior_steps": 2000,
                 "base_steps": 5000, "stage1_steps": 1500, "stage2_steps": 1500, "stage3_steps": 1000,
                 "batch_scenes": 8, "train_models": True},
    }


@dataclass
class Pairs:
    """Cross-scene triplets: ``content`` (scene s, light a), ``reference`` (scene s', light b),
    ``target`` (s under b, noise-free), ``material`` (N, H, W) of scene s; all torch."""

    content: torch.Tensor
    reference: torch.Tensor
    target: torch.Tensor
    material: torch.Tensor


def cross_scene_pairs(scenes: SceneSet, seed: int = 0) -> Pairs:
    """§5 protocol (cross-scene): for every scene s, a light a, another light b and another
    scene s' (all at random), the triplet (s under a, s' under b, s under b)."""
    n, m = scenes.images.shape[:2]
    if n < 2 or m < 2:
        raise ValueError(f"cross-scene pairs need >= 2 scenes and >= 2 shared lights, got {n}, {m}")
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    a = rng.integers(0, m, n)
    b = (a + rng.integers(1, m, n)) % m
    s2 = (s + rng.integers(1, n, n)) % n
    t = lambda arr: torch.from_numpy(np.ascontiguousarray(arr))  # noqa: E731
    return Pairs(t(scenes.images[s, a]), t(scenes.images[s2, b]), t(scenes.clean[s, b]),
                 t(scenes.material))


@torch.no_grad()
def evaluate(pred: torch.Tensor, pairs: Pairs) -> list[dict]:
    """§5 metrics of predictions ``pred`` (N, 3, H, W): one row per region (``all`` and each material)."""
    rows = []
    regions = {"all": torch.ones_like(pairs.material, dtype=torch.bool)}
    regions |= {name: pairs.material == i for i, name in enumerate(MATERIALS)}
    for region, mask in regions.items():
        out = region_metrics(pred.clamp(0, 1), pairs.target, mask)
        rows.append({"region": region, **{k: float(np.nanmean(v.numpy())) for k, v in out.items()}})
    return rows


@torch.no_grad()
def swap_effects(model: Relighter, scenes: SceneSet, seed: int = 0) -> dict[str, float]:
    """[reconstruction] The codes' roles, as ratios of output change to the true change:

    * ``light swap``: change of ``D(A(s,a), L(.))`` when the reference's light goes b -> c,
      over the true change ``|x(s,b) - x(s,c)|`` (near 1 when ``L`` carries the light);
    * ``scene swap``: change when the content scene goes s -> s'' under one reference,
      over ``|x(s,b) - x(s'',b)|`` (near 1 when ``A`` carries the scene);
    * ``leak``: change when only the content's light goes a -> c, the reference held,
      over ``|x(s,a) - x(s,c)|`` (near 0 when no light leaks into ``A``).
    """
    rng = np.random.default_rng(seed)
    n, m = scenes.images.shape[:2]
    if m < 3:
        raise ValueError("swap_effects needs at least 3 shared lights")
    img, clean = torch.from_numpy(scenes.images), torch.from_numpy(scenes.clean)
    s = np.arange(n)
    a, b, c = (int(v) for v in rng.permutation(m)[:3])
    s2, s3 = (s + rng.integers(1, n, n)) % n, (s + rng.integers(1, n, n)) % n
    rel = lambda cont, ref: model.relight(cont, ref)  # noqa: E731
    ratio = lambda d_out, d_true: float(d_out.abs().mean() / d_true.abs().mean())  # noqa: E731
    return {
        "light swap": ratio(rel(img[s, a], img[s2, b]) - rel(img[s, a], img[s2, c]), clean[s, b] - clean[s, c]),
        "scene swap": ratio(rel(img[s, a], img[s2, b]) - rel(img[s3, a], img[s2, b]), clean[s, b] - clean[s3, b]),
        "leak": ratio(rel(img[s, a], img[s2, b]) - rel(img[s, c], img[s2, b]), clean[s, a] - clean[s, c]),
    }


@dataclass
class Data:
    """The scenes of one run (fixed by the data seed)."""

    train: SceneSet
    test: SceneSet
    shifted_train: SceneSet
    shifted_test: SceneSet
    pairs: dict[str, Pairs]


def make_data(cfg: Config, seed: int) -> Data:
    """[reconstruction] Training scenes (own lights each), a test set and a shifted test set with
    shared lights, and unlabeled shifted-domain images (one light each) for Stage III."""
    train = make_scenes(cfg.n_train, cfg.n_lights, cfg.size, "synthetic", seed)
    test = make_scenes(cfg.n_test, cfg.n_lights, cfg.size, "synthetic", seed + 10_000, shared_lights=True)
    sh_train = make_scenes(cfg.n_shifted, 1, cfg.size, "shifted", seed + 20_000)
    sh_test = make_scenes(cfg.n_test, cfg.n_lights, cfg.size, "shifted", seed + 30_000, shared_lights=True)
    pairs = {"synthetic": cross_scene_pairs(test, seed), "shifted": cross_scene_pairs(sh_test, seed)}
    return Data(train, test, sh_train, sh_test, pairs)


@dataclass
class Result:
    """Everything the page shows: metrics, probes, swaps, curves, and the first seed's models."""

    table: pd.DataFrame
    probes: pd.DataFrame
    swaps: pd.DataFrame
    curves: dict[str, list[float]] = field(default_factory=dict)
    models: dict[str, Relighter] = field(default_factory=dict)
    data: Data | None = None


def _rows(name: str, stage: str, seed: int, pred_fn, data: Data) -> list[dict]:
    rows = []
    for domain, pairs in data.pairs.items():
        for r in evaluate(pred_fn(pairs), pairs):
            rows.append({"method": name, "stage": stage, "domain": domain, "seed": seed, **r})
    return rows


def evaluate_seed(models: Models, data: Data, seed: int) -> tuple[list[dict], list[dict], dict]:
    """§5 for one seed's models: metric rows of every arm, stage and baseline on both domains,
    the priors' linear-probe accuracies, and LI's swap ratios."""
    rows = _rows("copy input", "-", seed, lambda p: p.content, data)
    rows += _rows("copy reference", "-", seed, lambda p: p.reference, data)
    for key, model in models.items():
        if isinstance(model, Relighter):
            arm, stage = key.rsplit(" ", 1)
            rows += _rows(arm, stage, seed, lambda p, m=model: m.relight(p.content, p.reference), data)
    flat, test_flat = torch.from_numpy(data.train.images[:, 0]), torch.from_numpy(data.test.images[:, 0])
    probes = [{"seed": seed, "prior": kind, "probe accuracy": linear_probe(
        models[f"{kind} prior"], flat, data.train.shape, test_flat, data.test.shape)} for kind in PRIORS]
    swaps = {"seed": seed, **swap_effects(models["LI II"], data.test, seed)}
    return rows, probes, swaps


def run_experiment(cfg: Config, seeds: list[int], data_seed: int = 0,
                   load: Callable[[int], Models] | None = None) -> Result:
    """The whole experiment over model ``seeds`` (the scenes come from ``data_seed``).

    With ``load`` (seed -> models, e.g. from the checked artifact) the models are loaded,
    not trained, and only evaluated; the curves are then empty.
    """
    if not seeds:
        raise ValueError("run_experiment needs at least one seed")
    data = make_data(cfg, data_seed)
    rows, probes, swaps, curves, first = [], [], [], {}, {}
    for k, seed in enumerate(progress(seeds, desc="seeds")):
        if load is None:
            models, c = train_seed(cfg, data.train, data.shifted_train, seed)
        else:
            models, c = load(seed), {}
        r, p, s = evaluate_seed(models, data, seed)
        rows, probes = rows + r, probes + p
        swaps.append(s)
        if k == 0:
            curves, first = c, models
    return Result(pd.DataFrame(rows), pd.DataFrame(probes), pd.DataFrame(swaps), curves, first, data)


def per_seed(table: pd.DataFrame, method: str, stage: str, metric: str = "psnr", region: str = "all",
             domain: str = "synthetic") -> np.ndarray:
    """One arm's metric per seed (sorted by seed), for the rules."""
    sel = table[(table.method == method) & (table.stage == stage) & (table.region == region) & (table.domain == domain)]
    if sel.empty:
        raise KeyError(f"no rows for {method!r} stage {stage!r} region {region!r} domain {domain!r}")
    return sel.sort_values("seed")[metric].to_numpy()


def material_table(table: pd.DataFrame, method: str = "ALI (dense)", baseline: str = "LI",
                   stage: str = "II", domain: str = "synthetic") -> pd.DataFrame:
    """§5's per-material RMSE, PSNR and SSIM: ``baseline``, ``method`` and their paired gain.

    One row per material region; for each metric, the two arms' means over seeds and the
    mean of the per-seed difference ``method - baseline`` (for RMSE, lower is better, so
    a gain is negative). Seeds are paired through :func:`per_seed`.
    """
    cols = {}
    for metric in ("rmse", "psnr", "ssim"):
        for name in (baseline, method):
            cols[(metric, name)] = [per_seed(table, name, stage, metric, reg, domain).mean()
                                    for reg in MATERIALS]
        cols[(metric, f"{method} - {baseline}")] = [
            (per_seed(table, method, stage, metric, reg, domain)
             - per_seed(table, baseline, stage, metric, reg, domain)).mean() for reg in MATERIALS]
    out = pd.DataFrame(cols, index=pd.Index(MATERIALS, name="material"))
    out.columns = pd.MultiIndex.from_tuples(out.columns, names=["metric", "arm"])
    return out
