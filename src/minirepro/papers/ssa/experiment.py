"""The chapter's experiment: a grid of runs (seeds x collapse levels x arms) on two data sets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from minirepro.core import ScaledConfig
from minirepro.papers.ssa.data import Pairs, digits_pairs, synthetic_pairs
from minirepro.papers.ssa.geometry import subspace_pair
from minirepro.papers.ssa.metrics import measure, post_hoc
from minirepro.papers.ssa.model import ARMS_TRAINED, Member, build_ensemble, train_ensemble

ARMS: tuple[str, ...] = ("CLIP", "gap penalty", "SSA", "SSP", "translation")


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature (the paper: CLIP ViT-B/32 and ViT-L/14, 512-768-d, frozen)."""

    n_seeds: int = 10
    phis: tuple[float, ...] = (0.0, 22.5, 45.0, 67.5, 90.0)
    dim: int = 8
    rank: int = 7
    n_own: int = 1
    hidden: int = 64
    steps: int = 300
    lr: float = 5e-3
    batch_size: int = 64
    lambda_gap: float = 40.0  # set before the runs from CLIP's scale on tuning seeds (see the page)
    lambda_ssa: float = 0.5
    ssa_every: int = 50
    n_train: int = 1024
    n_est: int = 256
    n_test: int = 500
    noise: float = 0.3
    digits_phi: float = 90.0
    digits_train: int = 1000
    digits_est: int = 297
    digits_test: int = 500
    caption_noise: float = 0.3
    datasets: tuple[str, ...] = ("synthetic", "digits")
    PRESETS: ClassVar = {
        "smoke": {"n_seeds": 2, "phis": (0.0, 90.0), "steps": 100, "n_train": 384, "n_est": 200,
                  "n_test": 300, "digits_train": 500, "digits_est": 200, "digits_test": 300},
        "book": {},
        "full": {"n_seeds": 10, "phis": (0.0, 15.0, 30.0, 45.0, 60.0, 75.0, 90.0), "dim": 32,
                 "rank": 31, "hidden": 256, "steps": 3000, "n_train": 8192, "batch_size": 512},
    }


@dataclass
class Experiment:
    """Every run's measurements (``runs``), the training curves and a few embeddings for plots."""

    runs: pd.DataFrame
    curves: pd.DataFrame
    init: pd.DataFrame  # the untrained encoders' metrics (the "did nothing" start point)
    examples: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def _grid(cfg: Config, name: str, seeds: list[int], phis: list[float], data: dict[int, Pairs],
          example_phi: float) -> tuple[list[dict], list[dict], list[dict], dict]:
    bases = {p: subspace_pair(cfg.dim, cfg.rank, cfg.n_own, p) for p in phis}
    members = [Member(s, p, a) for s in seeds for p in phis for a in ARMS_TRAINED]
    x = {s: (d.x_train, d.y_train, d.x_est, d.y_est) for s, d in data.items()}
    model = build_ensemble(members, x, bases, cfg.hidden)
    stack = lambda attr: np.stack([getattr(data[m.seed], attr) for m in members])  # noqa: E731
    prompts = data[seeds[0]].prompts
    pr = None if prompts is None else np.stack([prompts] * len(members))

    def evaluate() -> list[tuple[Member, str, tuple]]:
        ex_e, ey_e = model.embed(stack("x_est"), stack("y_est"))
        ex_t, ey_t = model.embed(stack("x_test"), stack("y_test"))
        ep = None if pr is None else model.embed_y(pr)
        return [(m, m.arm, (ex_e[i], ey_e[i], ex_t[i], ey_t[i], None if ep is None else ep[i]))
                for i, m in enumerate(members)]

    init_rows = []
    for m, _, sets in evaluate():
        if m.arm == "CLIP":
            init_rows.append({"data": name, "seed": m.seed, "phi": m.phi,
                              **measure(*sets[:4], sets[4], data[m.seed].labels_test)})
    train_ensemble(model, x, cfg.steps, cfg.lr, cfg.lambda_gap, cfg.lambda_ssa, cfg.ssa_every,
                   cfg.batch_size, desc=f"{name}: {len(members)} runs")
    rows, examples = [], {}
    for m, arm, sets in evaluate():
        arms = {arm: sets} | (post_hoc(*sets[:4], sets[4]) if arm == "CLIP" else {})
        for a, st in arms.items():
            rows.append({"data": name, "seed": m.seed, "phi": m.phi, "arm": a,
                         **measure(*st[:4], st[4], data[m.seed].labels_test)})
            if m.seed == seeds[0] and m.phi == example_phi:
                examples[(name, a)] = (st[2], st[3])
    scale = np.exp(model.logit_scale.detach().numpy())
    for row in rows:
        i = next(j for j, m in enumerate(members) if (m.seed, m.phi) == (row["seed"], row["phi"])
                 and m.arm == (row["arm"] if row["arm"] in ARMS_TRAINED else "CLIP"))
        row["temperature"] = float(1 / scale[i])
    curves = [{"data": name, "seed": m.seed, "phi": m.phi, "arm": m.arm, "step": s, "InfoNCE": float(c[i])}
              for s, c in zip(model.steps, model.curve, strict=True) for i, m in enumerate(members)]
    return rows, curves, init_rows, examples


def run_experiment(cfg: Config) -> Experiment:
    """[reconstruction] The miniature: train CLIP, gap-penalty and SSA encoders for every seed and
    collapse angle on the synthetic pairs (and every seed at ``digits_phi`` on the digits
    pair; ``cfg.datasets`` picks the data sets), add the post-hoc arms (SSP, translation) to each CLIP run, and measure them all.

    The seeds are ``cfg.seeds``. A seed fixes the data split, the synthetic data and the initial
    weights, shared by the arms of that seed (a paired design).
    """
    seeds = cfg.seeds
    if not seeds:
        raise ValueError("run_experiment needs at least one seed")
    unknown = set(cfg.datasets) - {"synthetic", "digits"}
    if unknown or not cfg.datasets:
        raise ValueError(f"datasets must be a non-empty subset of synthetic, digits; got {cfg.datasets}")
    phis = [float(p) for p in cfg.phis]
    rows, curves, init, examples = [], [], [], {}
    if "synthetic" in cfg.datasets:
        syn = {s: synthetic_pairs(cfg.n_train, cfg.n_est, cfg.n_test, seed=s, noise=cfg.noise) for s in seeds}
        example_phi = max(phis, key=lambda p: (p == cfg.digits_phi, p))
        r, c, i, e = _grid(cfg, "synthetic", seeds, phis, syn, example_phi)
        rows, curves, init, examples = rows + r, curves + c, init + i, examples | e
    if "digits" in cfg.datasets:
        dig = {s: digits_pairs(cfg.digits_train, cfg.digits_est, cfg.digits_test, seed=s,
                               caption_noise=cfg.caption_noise) for s in seeds}
        r, c, i, e = _grid(cfg, "digits", seeds, [float(cfg.digits_phi)], dig, float(cfg.digits_phi))
        rows, curves, init, examples = rows + r, curves + c, init + i, examples | e
    return Experiment(pd.DataFrame(rows), pd.DataFrame(curves), pd.DataFrame(init), examples)
