"""The chapter's experiment: every condition on every seed, winners re-evaluated on
fresh seeds, and the debate's reward transferred to the default body."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from minirepro.core import ScaledConfig
from minirepro.core.progress import progress
from minirepro.core.stats import seed_summary
from minirepro.papers.debate2create.body import DEFAULT
from minirepro.papers.debate2create.debate import (
    CONDITIONS,
    PROTOCOL_FLAGS,
    Budget,
    ConditionRun,
    run_debate,
    run_default,
    run_morphology_bo,
    run_morphology_cmaes,
)
from minirepro.papers.debate2create.rewards import DEFAULT_REWARD_SOURCE
from minirepro.papers.debate2create.scripted import ScriptedLLM
from minirepro.papers.debate2create.training import evaluate_fresh, zero_control_distance


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature. The paper: 5 rounds x 8 theses x 4 rewards, PPO 350k steps."""

    rounds: int = 3
    theses: int = 2
    rewards: int = 2
    episode_steps: int = 80
    cma_popsize: int = 6
    cma_generations: int = 3
    eval_inits: int = 3
    eval_noise: float = 0.1
    n_seeds: int = 5
    PRESETS: ClassVar = {
        "smoke": {"rounds": 2, "theses": 2, "rewards": 1, "episode_steps": 60,
                  "cma_generations": 2, "n_seeds": 1},
        "book": {},
        "full": {"rounds": 5, "theses": 8, "rewards": 4, "episode_steps": 250,
                 "cma_popsize": 10, "cma_generations": 15, "n_seeds": 10},
    }

    def budget(self) -> Budget:
        return Budget(self.rounds, self.theses, self.rewards, self.episode_steps,
                      self.cma_popsize, self.cma_generations)


@dataclass
class Experiment:
    """Per-seed scores (``table``), every condition's run (``runs[seed][condition]``),
    the fresh re-evaluation rollouts of the first seed, and the transfer test."""

    table: pd.DataFrame
    runs: dict[int, dict[str, ConditionRun]]
    rollouts: dict[str, object] = field(default_factory=dict)
    transfer: pd.DataFrame | None = None


def run_seed(cfg: Config, seed: int) -> dict[str, ConditionRun]:
    """Every condition of :data:`CONDITIONS` on one seed, at the same candidate budget."""
    b = cfg.budget()
    out = {"default body": run_default(b, seed)}
    baseline = out["default body"].candidates[0].distance
    for name, (iterative, synthesis, judges, reward_design) in PROTOCOL_FLAGS.items():
        out[name] = run_debate(ScriptedLLM(seed), b, seed, baseline, iterative, synthesis,
                               judges, reward_design, condition=name)
    out["Bayesian optimisation"] = run_morphology_bo(b, seed)
    out["CMA-ES morphology"] = run_morphology_cmaes(b, seed)
    return {c: out[c] for c in CONDITIONS}


def run_experiment(cfg: Config, seeds: list[int]) -> Experiment:
    """All seeds: train every condition, pick each winner by measured displacement,
    re-evaluate it on fresh seeds (new CMA-ES seed, noisy resets), and train the default
    body on the debate winner's reward (the transfer test)."""
    b = cfg.budget()
    rows, runs, rollouts, transfer = [], {}, {}, []
    fresh = dict(steps=b.steps, popsize=b.popsize, generations=b.generations,
                 n_inits=cfg.eval_inits, noise=cfg.eval_noise)
    for seed in progress(seeds, desc="seeds"):
        runs[seed] = run_seed(cfg, seed)
        for cond, run in runs[seed].items():
            w = run.winner()
            d, tr = evaluate_fresh(w.params, w.reward_source, seed=50_000 + seed, **fresh)
            rows.append({"seed": seed, "condition": cond, "candidates": len(run.candidates),
                         "selected distance": w.distance, "fresh distance": d,
                         "distance sum": w.distance_sum, "params": np.round(w.params, 3).tolist()})
            if seed == seeds[0]:
                rollouts[cond] = tr
        w = runs[seed]["debate"].winner()
        gen, _ = evaluate_fresh(np.array(DEFAULT), w.reward_source, seed=50_000 + seed, **fresh)
        dflt = [r["fresh distance"] for r in rows if r["seed"] == seed and r["condition"] == "default body"][0]
        zero = zero_control_distance(np.array(DEFAULT), b.steps, 50_000 + seed, cfg.eval_inits,
                                     cfg.eval_noise)
        transfer.append({"seed": seed, "debate reward": gen, "default reward": dflt,
                         "zero control": zero,
                         "shaped": w.reward_source != DEFAULT_REWARD_SOURCE})
    table = pd.DataFrame(rows)
    base = table[table.condition == "default body"].set_index("seed")["fresh distance"]
    table["normalised"] = table["fresh distance"] / table.seed.map(base)
    return Experiment(table, runs, rollouts, pd.DataFrame(transfer))


def per_seed(table: pd.DataFrame, column: str = "fresh distance") -> pd.DataFrame:
    """``column`` of every condition, one row per seed (aligned for paired rules)."""
    return table.pivot(index="seed", columns="condition", values=column).sort_index()[list(CONDITIONS)]


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Mean, sd and 95% t interval over seeds per condition (``seed_summary``)."""
    out = seed_summary(table, "condition", ["selected distance", "fresh distance", "normalised"])
    return out.loc[[c for c in CONDITIONS if c in out.index]]


def log_ratio(a: np.ndarray, b: np.ndarray, floor: float = 0.01) -> np.ndarray:
    """log(a / b) with both clipped below at ``floor`` metres (a relative gain per seed)."""
    return np.log(np.maximum(np.asarray(a, float), floor)) - np.log(np.maximum(np.asarray(b, float), floor))
