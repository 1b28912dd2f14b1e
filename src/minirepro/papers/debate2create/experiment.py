"""The chapter's experiment: every condition on every seed, winners re-evaluated on
fresh seeds, and the debate's reward transferred to the default body."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from minirepro.core import ScaledConfig
from minirepro.core.progress import progress
from minirepro.core.stats import seed_summary
from minirepro.papers.debate2create.agents import LLM
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
from minirepro.papers.debate2create.http_llm import OpenAIChatLLM
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
    agent: str = "scripted"  # the agents' backend: "scripted" (stand-ins) or "openai" (an HTTP endpoint)
    llm_base_url: str | None = None  # the OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1
    llm_model: str | None = None  # the model name the endpoint serves
    llm_timeout: float = 120.0  # s to wait for one reply
    agent_retries: int = 2  # re-asks of an agent whose reply is refused
    PRESETS: ClassVar = {
        "smoke": {"rounds": 2, "theses": 2, "rewards": 1, "episode_steps": 60,
                  "cma_generations": 2, "n_seeds": 1},
        "book": {},
        "full": {"rounds": 5, "theses": 8, "rewards": 4, "episode_steps": 250,
                 "cma_popsize": 10, "cma_generations": 15, "n_seeds": 10},
    }

    AGENTS: ClassVar = ("scripted", "openai")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.agent not in self.AGENTS:
            raise ValueError(f"agent must be one of {', '.join(self.AGENTS)}, got {self.agent!r}")
        if self.agent == "openai" and not (self.llm_base_url and self.llm_model):
            raise ValueError("agent 'openai' needs llm_base_url and llm_model")
        if not (isinstance(self.agent_retries, int) and 0 <= self.agent_retries <= 10):
            raise ValueError(f"agent_retries must be an int in [0, 10], got {self.agent_retries!r}")
        if not self.llm_timeout > 0:
            raise ValueError(f"llm_timeout must be positive, got {self.llm_timeout}")

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
    agent: str = "scripted"  # the backend the agents ran on

    @property
    def llm_share(self) -> np.ndarray:
        """Per seed, the share of agent calls a language model answered (0 with the scripted
        stand-ins, 1 through an endpoint): the precondition of the claims about LLM agents."""
        return np.full(len(self.runs), 0.0 if self.agent == "scripted" else 1.0)

    @property
    def retries(self) -> int:
        """Agent replies refused and asked again, over every seed and condition."""
        return sum(r.retries for runs in self.runs.values() for r in runs.values())


def make_agent(cfg: Config, seed: int) -> LLM:
    """[reconstruction] The agents' backend the config names: the scripted stand-in (seeded), or an
    OpenAI-compatible chat endpoint at ``llm_base_url`` serving ``llm_model`` (its key, if it needs
    one, from the environment variable ``OPENAI_API_KEY``; ``seed`` sent with every request)."""
    if cfg.agent == "scripted":
        return ScriptedLLM(seed)
    return OpenAIChatLLM(cfg.llm_base_url, cfg.llm_model, api_key=os.environ.get("OPENAI_API_KEY"),
                         timeout=cfg.llm_timeout, seed=seed)


def run_seed(cfg: Config, seed: int) -> dict[str, ConditionRun]:
    """Every condition of :data:`CONDITIONS` on one seed, at the same candidate budget; each
    agent-driven condition gets a fresh agent from :func:`make_agent`."""
    b = cfg.budget()
    out = {"default body": run_default(b, seed)}
    baseline = out["default body"].candidates[0].distance
    for name, (iterative, synthesis, judges, reward_design) in PROTOCOL_FLAGS.items():
        out[name] = run_debate(make_agent(cfg, seed), b, seed, baseline, iterative, synthesis,
                               judges, reward_design, condition=name, retries=cfg.agent_retries)
    out["Bayesian optimisation"] = run_morphology_bo(b, seed)
    out["CMA-ES morphology"] = run_morphology_cmaes(b, seed)
    return {c: out[c] for c in CONDITIONS}


def trainings_per_seed(cfg: Config) -> int:
    """Candidate trainings one seed of :func:`run_experiment` runs: the default body, the five
    agent-driven conditions and the two body-only searches at the budget, then one fresh
    re-evaluation per condition and the transfer test (the cost of a seed is about this many
    times one training)."""
    b = cfg.budget()
    pop = max(4, b.theses * b.rewards)
    cma = max(1, b.candidates // pop) * pop
    return 1 + (len(PROTOCOL_FLAGS) + 1) * b.candidates + cma + len(CONDITIONS) + 1


def run_experiment(cfg: Config) -> Experiment:
    """All seeds (``cfg.seeds``): train every condition, pick each winner by measured displacement,
    re-evaluate it on fresh seeds (new CMA-ES seed, noisy resets), and train the default
    body on the debate winner's reward (the transfer test)."""
    b, seeds = cfg.budget(), cfg.seeds
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
    return Experiment(table, runs, rollouts, pd.DataFrame(transfer), cfg.agent)


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
