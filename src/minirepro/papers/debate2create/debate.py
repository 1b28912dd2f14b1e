"""The debate protocol (thesis, antithesis, synthesis, judges, hall of fame) and its
ablations and baselines, each at the same budget of candidate trainings."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from minirepro.papers.debate2create.agents import (
    JUDGES,
    LLM,
    ask,
    parse_critique,
    parse_design,
    parse_judgement,
    parse_rewards,
)
from minirepro.papers.debate2create.body import DEFAULT, LOWER, UPPER
from minirepro.papers.debate2create.control import cmaes_maximize, tpe_maximize
from minirepro.papers.debate2create.rewards import DEFAULT_REWARD_SOURCE
from minirepro.papers.debate2create.training import Candidate, train_candidate, train_or_fail

CONDITIONS: tuple[str, ...] = ("debate", "zero-shot", "thesis only", "no judges", "single agent",
                               "Bayesian optimisation", "CMA-ES morphology", "default body")
PROTOCOL_FLAGS = {  # condition: (iterative rounds, synthesis, judges, reward design)
    "debate": (True, True, True, True),
    "zero-shot": (False, True, False, True),
    "thesis only": (True, False, True, True),
    "no judges": (True, True, False, True),
    "single agent": (True, True, True, False),
}


@dataclass
class Budget:
    """[reconstruction] Budget: rounds x theses x rewards per body = trainings; controller sizes."""

    rounds: int
    theses: int
    rewards: int
    steps: int
    popsize: int
    generations: int

    @property
    def candidates(self) -> int:
        return self.rounds * self.theses * self.rewards


@dataclass
class ConditionRun:
    """[reconstruction] One condition's run: every candidate trained (in order), hall of fame, judge log."""

    condition: str
    candidates: list[Candidate]
    hall_of_fame: list[dict] = field(default_factory=list)
    judge_log: list[list[dict]] = field(default_factory=list)
    critiques: list[str] = field(default_factory=list)
    retries: int = 0  # agent replies refused and asked again

    def winner(self) -> Candidate:
        """The candidate with the largest measured displacement (never the generated reward)."""
        return max(self.candidates, key=lambda c: c.distance)

    def best_so_far(self) -> np.ndarray:
        """Best displacement (m) after each candidate evaluated, shape (n_candidates,)."""
        return np.maximum.accumulate([c.distance for c in self.candidates])


def _novelty(p: np.ndarray, seen: list[np.ndarray]) -> float:
    if not seen:
        return 1.0
    span = np.array(UPPER) - np.array(LOWER)
    return float(min(np.linalg.norm((p - q) / span) for q in seen))


def judge_context(top: Candidate, best_before: float, baseline: float, seen: list[np.ndarray]) -> dict:
    """[reconstruction] What the judges see about the round's top design (the public code passes
    parameters, distance, episode reward and length, best and baseline scores)."""
    return {"parameters": [float(v) for v in top.params], "distance": top.distance,
            "episode_reward": top.reward, "best_distance": best_before,
            "baseline_distance": baseline, "lateral_ratio": top.lateral_ratio,
            "effort_per_metre": top.effort_per_metre, "novelty": _novelty(top.params, seen)}


DEFAULT_RETRIES = 2  # re-asks of an agent whose reply is refused, before the run stops


def _propose(llm: LLM, run: ConditionRun, ctx: dict, steps: int, synthesis: bool, retries: int
             ) -> tuple[np.ndarray, str]:
    """One thesis, and with ``synthesis`` its critique, the revised body and the body's fresh critique."""
    def call(role: str, context: dict, parse):
        out, used = ask(llm, role, {**context, "episode_steps": steps}, parse, retries)
        run.retries += used
        return out

    thesis, _ = call("design_thesis", ctx, parse_design)
    if not synthesis:
        return thesis, ""
    crit = call("control_critique", {"parameters": thesis.tolist()}, parse_critique)
    body, _ = call("design_synthesis", {"thesis": thesis.tolist(), "critique": crit}, parse_design)
    run.critiques.append(crit)
    return body, call("control_critique", {"parameters": body.tolist()}, parse_critique)


def run_debate(llm: LLM, budget: Budget, seed: int, baseline: float, iterative: bool = True,
               synthesis: bool = True, judges: bool = True, reward_design: bool = True,
               condition: str = "debate", retries: int = DEFAULT_RETRIES) -> ConditionRun:
    """Alg. 1 (Debate2Create loop): per round, theses -> critique -> synthesis -> fresh
    critique and rewards -> train every (body, reward) -> hall of fame -> judges.

    ``iterative=False`` is compute-matched zero-shot (all theses in one round, no
    feedback); ``synthesis=False`` trains the theses (no critique); ``judges=False``
    leaves only the numeric hall of fame as feedback; ``reward_design=False`` is the
    single agent: no control agent writes rewards, every body trains on the default
    reward (``rewards`` times, with different CMA-ES seeds). Every reply goes through the
    strict parsers; a refused reply (bad JSON, a body outside the box, a reward that fails
    its probe) is asked again with the reason, up to ``retries`` times, before the run stops
    with the error. A reward that fails later, during training, makes a failed candidate
    (distance -inf) instead of stopping the run.
    """
    rounds, theses = (budget.rounds, budget.theses) if iterative else (1, budget.rounds * budget.theses)
    run = ConditionRun(condition, [])
    seen: list[np.ndarray] = []
    judge_obs: list[dict] = []
    k = 0
    for r in range(rounds):
        ctx = {"round": r, "hall_of_fame": run.hall_of_fame, "judges": judge_obs}
        round_cands: list[Candidate] = []
        for i in range(theses):
            body, critique = _propose(llm, run, {**ctx, "index": i}, budget.steps, synthesis, retries)
            if reward_design:
                sources, used = ask(llm, "control_rewards", {
                    "parameters": body.tolist(), "critique": critique, "judges": judge_obs,
                    "n": budget.rewards, "episode_steps": budget.steps}, parse_rewards, retries)
                run.retries += used
                sources = sources[:budget.rewards]
            else:
                sources = [DEFAULT_REWARD_SOURCE] * budget.rewards
            for src in sources:
                round_cands.append(train_or_fail(body, src, budget.steps, budget.popsize,
                                                 budget.generations, seed=1000 * seed + k))
                k += 1
        best_before = max((h["distance"] for h in run.hall_of_fame), default=-np.inf)
        top = max(round_cands, key=lambda c: c.distance)
        run.candidates.extend(round_cands)
        run.hall_of_fame.append({"round": r, "parameters": [float(v) for v in top.params],
                                 "distance": top.distance})
        if judges:
            jctx = judge_context(top, best_before, baseline, seen)
            judge_obs = []
            for j in JUDGES:
                obs, used = ask(llm, f"judge_{j}", jctx, parse_judgement, retries)
                run.retries += used
                judge_obs.append({"judge": j, "observation": obs})
            run.judge_log.append(judge_obs)
        seen.extend(c.params for c in round_cands)
    return run


def run_morphology_bo(budget: Budget, seed: int) -> ConditionRun:
    """[reconstruction] The paper's morphology-only Bayesian-optimisation baseline: optuna's
    TPE (library defaults, seeded) over the 6 body parameters in their box, the default body
    evaluated first, each body trained on the default reward; exactly
    ``budget.candidates`` bodies (the same number of trainings as every other arm)."""
    if budget.candidates < 1:
        raise ValueError(f"the BO arm needs a budget of at least 1 candidate, got {budget.candidates}")
    run = ConditionRun("Bayesian optimisation", [])

    def f(p: np.ndarray) -> float:
        c = train_candidate(p, DEFAULT_REWARD_SOURCE, budget.steps, budget.popsize,
                            budget.generations, seed=1000 * seed + len(run.candidates))
        run.candidates.append(c)
        return c.distance

    tpe_maximize(f, np.array(LOWER), np.array(UPPER), budget.candidates, seed=seed,
                 x0=np.array(DEFAULT))
    return run


def run_morphology_cmaes(budget: Budget, seed: int) -> ConditionRun:
    """[reconstruction; an extra arm, not in the paper] CMA-ES over the 6 body parameters
    (box-scaled), from the default body, each body trained on the default reward;
    ``budget.candidates`` bodies in generations of max(4, theses x rewards)."""
    run = ConditionRun("CMA-ES morphology", [])

    def f(ps: np.ndarray) -> np.ndarray:
        out = []
        for p in ps:
            c = train_candidate(p, DEFAULT_REWARD_SOURCE, budget.steps, budget.popsize,
                                budget.generations, seed=1000 * seed + len(run.candidates))
            run.candidates.append(c)
            out.append(c.distance)
        return np.array(out)

    pop = max(4, budget.theses * budget.rewards)  # CMA-ES needs >= 4 (cmaes' weights)
    cmaes_maximize(f, np.array(LOWER), np.array(UPPER), max(1, budget.candidates // pop), pop,
                   seed=seed, x0=np.array(DEFAULT), sigma=0.2)
    return run


def run_default(budget: Budget, seed: int) -> ConditionRun:
    """Eq. (debate2create-eq-fresh)'s reference: default body θ0 on default reward R0 (one candidate)."""
    c = train_candidate(np.array(DEFAULT), DEFAULT_REWARD_SOURCE, budget.steps, budget.popsize,
                        budget.generations, seed=1000 * seed + 999)
    return ConditionRun("default body", [c])
