"""[stand-in] Scripted agents that answer the prompts without a language model.

Every rule is written here and fixed before any run:

* design agent, thesis: with an empty hall of fame, a draw from a broad log-normal
  prior around the default body; otherwise the hall-of-fame best perturbed
  log-normally, with a step that the judges' words set (speed "not the best so far"
  shrinks it, novelty "close to earlier designs" widens it).
* control agent, critique: keyword rules on the parameters (fragile thin segment,
  long tail, long body, thick body, or "taper"). Synthesis maps the words to edits.
* control agent, rewards: the released D2C reward form with weights selected by the
  critique and the judges' words (sideways drift raises the lateral penalty, high
  effort the effort penalty).
* judges: deterministic functions of the measured rollout, worded without numbers.
"""

from __future__ import annotations

import json

import numpy as np

from minirepro.papers.debate2create.agents import read_prompt
from minirepro.papers.debate2create.body import DEFAULT, LOWER, UPPER
from minirepro.papers.debate2create.rewards import shaped_reward_source

PRIOR_SIGMA = 0.5   # log-space spread of zero-shot proposals around the default body
STEP_SIGMA = 0.3    # log-space step around the hall-of-fame best
BASE_WEIGHTS = {"w_fwd": 2.2, "v_temp": 1.5, "w_lat": 0.1, "w_eff": 0.05, "w_jerk": 0.02,
                "w_back": 0.5}


def _clip(p: np.ndarray) -> list[float]:
    return [round(float(v), 4) for v in np.clip(p, LOWER, UPPER)]


class ScriptedLLM:
    """[stand-in] ``LLM(prompt) -> str`` answering every role with rule-based JSON.

    ``seed`` makes the random proposals reproducible; calls are counted in ``calls``.
    """

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.calls = 0

    def __call__(self, prompt: str) -> str:
        role, ctx = read_prompt(prompt)
        self.calls += 1
        if role.startswith("judge_"):
            return json.dumps({"observation": judge_observation(role[6:], ctx)})
        handler = getattr(self, "_" + role, None)
        if handler is None:
            raise ValueError(f"the scripted stand-in has no rule for role {role!r}")
        return json.dumps(handler(ctx))

    def _design_thesis(self, ctx: dict) -> dict:
        hof = ctx.get("hall_of_fame", [])
        if not hof:
            p = np.array(DEFAULT) * np.exp(self.rng.normal(0, PRIOR_SIGMA, 6))
            return {"parameters": _clip(p), "description": "a variation on the default swimmer"}
        best = max(hof, key=lambda h: h["distance"])
        sigma = STEP_SIGMA
        words = " ".join(j["observation"].lower() for j in ctx.get("judges", []))
        if "not the best" in words or "slower" in words:
            sigma *= 0.7
        if "close to earlier" in words:
            sigma *= 1.5
        p = np.array(best["parameters"]) * np.exp(self.rng.normal(0, sigma, 6))
        return {"parameters": _clip(p), "description": "a step from the best design so far"}

    def _control_critique(self, ctx: dict) -> dict:
        L, r = np.array(ctx["parameters"][:3]), np.array(ctx["parameters"][3:])
        if r.min() < 0.02:
            c = "The thinnest segment is fragile; thicken it."
        elif L[2] > 1.5 * L[0]:
            c = "The long tail is hard to control; shorten the tail."
        elif L.sum() > 4.5:
            c = "The body is long and sluggish to turn; shorten every segment."
        elif r.mean() > 0.12:
            c = "Thick segments cost energy against the fluid; slim them."
        else:
            c = "The design is balanced; taper the radii from head to tail."
        return {"critique": c}

    def _design_synthesis(self, ctx: dict) -> dict:
        p = np.array(ctx["thesis"], dtype=float)
        c = ctx["critique"].lower()
        if "thicken" in c:
            i = 3 + int(np.argmin(p[3:]))
            p[i] *= 1.5
        if "shorten the tail" in c:
            p[2] *= 0.8
        if "shorten every" in c:
            p[:3] *= 0.85
        if "slim" in c:
            p[3:] *= 0.8
        if "taper" in c:
            p[4] *= 0.9
            p[5] *= 0.8
        p *= np.exp(self.rng.normal(0, 0.05, 6))
        return {"parameters": _clip(p), "description": f"revised after: {ctx['critique']}"}

    def _control_rewards(self, ctx: dict) -> dict:
        w = dict(BASE_WEIGHTS)
        words = " ".join(j["observation"].lower() for j in ctx.get("judges", []))
        if "sideways" in words and "little sideways" not in words:
            w["w_lat"] *= 2
        if "lot of effort" in words:
            w["w_eff"] *= 2
        if "fragile" in ctx.get("critique", "").lower():
            w["w_jerk"] *= 2
        variants = [w, {**w, "v_temp": 0.5, "w_eff": w["w_eff"] / 2, "w_jerk": w["w_jerk"] / 2}]
        n = int(ctx.get("n", 1))
        return {"reward_functions": [shaped_reward_source(variants[i % len(variants)])
                                     for i in range(n)]}


def judge_observation(criterion: str, ctx: dict) -> str:
    """[stand-in] §3.3: a criterion-specific judge as a deterministic function of the
    measured rollout of the round's top design (distances in m, effort in sum a^2)."""
    if criterion == "speed":
        if ctx["distance"] > ctx["best_distance"]:
            return "It moves faster than every earlier design."
        if ctx["distance"] > ctx["baseline_distance"]:
            return "It beats the default body but is not the best design so far."
        return "It is slower than the default body."
    if criterion == "stability":
        if ctx["lateral_ratio"] > 0.3:
            return "It drifts sideways a lot relative to its forward progress."
        return "It swims straight with little sideways drift."
    if criterion == "efficiency":
        if ctx["effort_per_metre"] > 100.0:
            return "It spends a lot of effort per metre travelled."
        return "It travels far for the effort it spends."
    if criterion == "novelty":
        if ctx["novelty"] < 0.15:
            return "It is close to earlier designs."
        return "It explores a new region of the design space."
    raise ValueError(f"unknown judge {criterion!r}")
