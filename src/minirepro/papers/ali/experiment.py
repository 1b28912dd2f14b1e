"""The chapter's experiment: priors, LI, fusion arms and stages over seeds, evaluated per material."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core import ScaledConfig, progress
from minirepro.papers.ali.metrics import region_metrics, ssim_map
from minirepro.papers.ali.models import Relighter
from minirepro.papers.ali.priors import PRIORS, linear_probe
from minirepro.papers.ali.render import MATERIALS, SceneSet, make_scenes
from minirepro.papers.ali.train import Models, train_seed, training_scenes

BASELINES: tuple[str, ...] = ("copy input", "copy reference")


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature. The paper: 512x512 photos, 6 large pretrained priors, a diffusion decoder."""

    size: int = 16  # image side in pixels
    n_train: int = 128  # training scenes, each under n_lights lights
    n_lights: int = 4  # lights per training scene
    n_test: int = 64  # scenes of each test set (every model seed draws its own set per domain)
    n_test_lights: int = 16  # lights shared by the scenes of a test set
    n_triplets: int = 512  # cross-scene triplets drawn from each test set
    n_probe: int = 256  # held-out scenes (one light each) that score each seed's linear probes
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
    n_seeds: int = 10  # model seeds (the artifact holds 0-9)
    train_models: bool = False
    w_intrinsic: float = 0.1
    w_reg: float = 0.01
    data_seed: int = 0  # seed of the test sets (with each model seed) and of the probes' training scenes
    PRESETS: ClassVar = {
        "smoke": {"n_train": 64, "n_test": 16, "n_test_lights": 8, "n_triplets": 96, "n_probe": 48, "n_shifted": 32, "prior_steps": 30, "base_steps": 60,
                  "stage1_steps": 15, "stage2_steps": 15, "stage3_steps": 15, "batch_scenes": 4,
                  "n_seeds": 3},
        "book": {},
        "full": {"size": 32, "n_train": 512, "n_test": 128, "n_test_lights": 32, "n_triplets": 1024, "n_shifted": 512, "prior_steps": 2000,
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


def cross_scene_pairs(scenes: SceneSet, n_triplets: int, seed: int = 0) -> Pairs:
    """§5 protocol (cross-scene): ``n_triplets`` draws, each of a scene s, a light a, another light b
    and another scene s' (uniformly, with replacement over the draws), giving the triplet
    (s under a, s' under b, s under b). The scenes must share their lights."""
    n, m = scenes.images.shape[:2]
    if n < 2 or m < 2:
        raise ValueError(f"cross-scene pairs need >= 2 scenes and >= 2 shared lights, got {n}, {m}")
    if n_triplets < 1:
        raise ValueError(f"n_triplets must be >= 1, got {n_triplets}")
    rng = np.random.default_rng(seed)
    s = rng.integers(0, n, n_triplets)
    a = rng.integers(0, m, n_triplets)
    b = (a + rng.integers(1, m, n_triplets)) % m
    s2 = (s + rng.integers(1, n, n_triplets)) % n
    t = lambda arr: torch.from_numpy(np.ascontiguousarray(arr))  # noqa: E731
    return Pairs(t(scenes.images[s, a]), t(scenes.images[s2, b]), t(scenes.clean[s, b]),
                 t(scenes.material[s]))


@torch.no_grad()
def evaluate(pred: torch.Tensor, pairs: Pairs) -> list[dict]:
    """§5 metrics of predictions ``pred`` (N, 3, H, W): one row per region (``all`` and each material)."""
    rows = []
    regions = {"all": torch.ones_like(pairs.material, dtype=torch.bool)}
    regions |= {name: pairs.material == i for i, name in enumerate(MATERIALS)}
    pred = pred.clamp(0, 1)
    full = ssim_map(pred, pairs.target)  # one SSIM map for every region
    for region, mask in regions.items():
        out = region_metrics(pred, pairs.target, mask, ssim_full=full)
        rows.append({"region": region, **{k: float(np.nanmean(v.numpy())) for k, v in out.items()}})
    return rows


@torch.no_grad()
def swap_effects(model: Relighter, scenes: SceneSet, seed: int = 0) -> dict[str, float]:
    """[reconstruction] The codes' roles, as ratios of output change to the true change, over every
    scene ``s`` of ``scenes`` with three distinct lights ``a, b, c`` of its own draw and other scenes
    ``s'``, ``s''``:

    * ``light swap``: change of ``D(A(s,a), L(.))`` when the reference's light goes b -> c,
      over the true change ``|x(s,b) - x(s,c)|`` (near 1 when ``L`` carries the light);
    * ``scene swap``: change when the content scene goes s -> s'' under one reference,
      over ``|x(s,b) - x(s'',b)|`` (near 1 when ``A`` carries the scene);
    * ``leak``: change when only the content's light goes a -> c, the reference held,
      over ``|x(s,a) - x(s,c)|`` (near 0 when no light leaks into ``A``).
    """
    rng = np.random.default_rng(seed)
    n, m = scenes.images.shape[:2]
    if m < 3 or n < 2:
        raise ValueError(f"swap_effects needs at least 2 scenes and 3 shared lights, got {n}, {m}")
    img, clean = torch.from_numpy(scenes.images), torch.from_numpy(scenes.clean)
    s = np.arange(n)
    a, b, c = np.argsort(rng.random((n, m)), axis=1)[:, :3].T  # three distinct lights per scene
    s2, s3 = (s + rng.integers(1, n, n)) % n, (s + rng.integers(1, n, n)) % n
    rel = lambda cont, ref: model.relight(cont, ref)  # noqa: E731
    ratio = lambda d_out, d_true: float(d_out.abs().mean() / d_true.abs().mean())  # noqa: E731
    return {
        "light swap": ratio(rel(img[s, a], img[s2, b]) - rel(img[s, a], img[s2, c]), clean[s, b] - clean[s, c]),
        "scene swap": ratio(rel(img[s, a], img[s2, b]) - rel(img[s3, a], img[s2, b]), clean[s, b] - clean[s3, b]),
        "leak": ratio(rel(img[s, a], img[s2, b]) - rel(img[s, c], img[s2, b]), clean[s, a] - clean[s, c]),
    }


@dataclass
class TestSet:
    """One model seed's test data: scenes under shared lights and cross-scene triplets, per domain,
    and the scenes that score its linear probes."""

    scenes: dict[str, SceneSet]
    pairs: dict[str, Pairs]
    probe: SceneSet


def make_test_set(cfg: Config, data_seed: int, model_seed: int) -> TestSet:
    """[reconstruction] The test set of one model seed: ``cfg.n_test`` synthetic and as many shifted
    scenes, each set under ``cfg.n_test_lights`` shared lights, and ``cfg.n_triplets`` cross-scene
    triplets from each, and ``cfg.n_probe`` synthetic scenes (one light each) for the probes. Drawn
    from ``(data_seed, model_seed)``, so every seed is scored on scenes and lights of its own: a
    per-seed mean then carries the test set's variance as well as the model's, and seeds are
    independent units."""
    if cfg.n_test_lights < 3:
        raise ValueError(f"a test set needs at least 3 shared lights (the swap ratios), got {cfg.n_test_lights}")
    s_syn, s_sh, s_pairs, s_probe = (int(v) for v in
                                     np.random.SeedSequence([data_seed, model_seed, 1]).generate_state(4))
    scenes = {"synthetic": make_scenes(cfg.n_test, cfg.n_test_lights, cfg.size, "synthetic", s_syn,
                                       shared_lights=True),
              "shifted": make_scenes(cfg.n_test, cfg.n_test_lights, cfg.size, "shifted", s_sh,
                                     shared_lights=True)}
    pairs = {d: cross_scene_pairs(sc, cfg.n_triplets, s_pairs + i) for i, (d, sc) in enumerate(scenes.items())}
    probe = make_scenes(cfg.n_probe, 1, cfg.size, "synthetic", s_probe)
    return TestSet(scenes, pairs, probe)


@dataclass
class Data:
    """The scenes of one run: training scenes (fixed by the data seed; the models' own when they
    are loaded and ``data_seed`` is the artifact's) and one test set per model seed."""

    train: SceneSet
    shifted_train: SceneSet
    tests: dict[int, TestSet] = field(default_factory=dict)


def make_data(cfg: Config, seed: int, model_seeds: list[int] | tuple[int, ...] = ()) -> Data:
    """[reconstruction] Training scenes (own lights each) and unlabeled shifted-domain images for
    Stage III from ``seed``, and a test set for each of ``model_seeds`` (:func:`make_test_set`)."""
    train, sh_train = training_scenes(cfg, seed)
    return Data(train, sh_train, {m: make_test_set(cfg, seed, m) for m in model_seeds})


@dataclass
class Result:
    """Everything the page shows: metrics, probes, swaps, curves, and the first seed's models."""

    table: pd.DataFrame
    probes: pd.DataFrame
    swaps: pd.DataFrame
    curves: dict[str, list[float]] = field(default_factory=dict)
    models: dict[str, Relighter] = field(default_factory=dict)
    data: Data | None = None


def _rows(name: str, stage: str, seed: int, pred_fn, test: TestSet) -> list[dict]:
    rows = []
    for domain, pairs in test.pairs.items():
        for r in evaluate(pred_fn(pairs), pairs):
            rows.append({"method": name, "stage": stage, "domain": domain, "seed": seed, **r})
    return rows


def evaluate_seed(models: Models, data: Data, seed: int) -> tuple[list[dict], list[dict], dict]:
    """§5 for one seed's models on that seed's test set: metric rows of every arm, stage and
    baseline on both domains, the priors' linear-probe accuracies (probes trained on the training
    scenes, scored on the seed's probe scenes), and LI's swap ratios."""
    test = data.tests[seed]
    rows = _rows("copy input", "-", seed, lambda p: p.content, test)
    rows += _rows("copy reference", "-", seed, lambda p: p.reference, test)
    for key, model in models.items():
        if isinstance(model, Relighter):
            arm, stage = key.rsplit(" ", 1)
            rows += _rows(arm, stage, seed, lambda p, m=model: m.relight(p.content, p.reference), test)
    syn = test.scenes["synthetic"]
    flat, test_flat = torch.from_numpy(data.train.images[:, 0]), torch.from_numpy(test.probe.images[:, 0])
    probes = [{"seed": seed, "prior": kind, "probe accuracy": linear_probe(
        models[f"{kind} prior"], flat, data.train.shape, test_flat, test.probe.shape)} for kind in PRIORS]
    swaps = {"seed": seed, **swap_effects(models["LI II"], syn, seed)}
    return rows, probes, swaps


def run_experiment(cfg: Config, load: Callable[[int], Models] | None = None) -> Result:
    """The whole experiment over the model seeds ``cfg.seeds``; each seed is scored on a test set of
    its own, drawn from ``(cfg.data_seed, seed)``.

    With ``load`` (seed -> models, e.g. from the checked artifact) the models are loaded,
    not trained, and only evaluated; the curves are then empty.
    """
    seeds = cfg.seeds
    data = make_data(cfg, cfg.data_seed, seeds)
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
