"""The agents' interface ``LLM(prompt) -> str``, the prompts, the JSON they must emit, its parsers,
and the bounded re-asking of an agent whose reply is rejected.

Three kinds of output, in the public code's JSON:

* design agent (thesis, synthesis): ``{"parameters": [6 numbers], "description": "..."}``
* control agent: ``{"critique": "one sentence"}`` and ``{"reward_functions": ["def compute_reward...", ...]}``
* judges: ``{"observation": "one sentence, under 30 words, no numbers"}``

A prompt is the role line, the instructions, a brief that gives a real model what it needs
(the body's parameters with units, ranges and default; the score; for rewards the observation
layout, the metric keys and the vectorisation contract; for judges what each number means),
an optional note on why the previous reply was rejected, and a ``CONTEXT:`` JSON block. The
scripted stand-in (``scripted.py``) reads only the role and the context.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from minirepro.papers.debate2create._reward_worker import BUILTINS
from minirepro.papers.debate2create.body import DEFAULT, LOWER, PARAM_NAMES, UPPER, check_params
from minirepro.papers.debate2create.rewards import DEFAULT_REWARD_SOURCE, METRIC_KEYS, probe_reward

LLM = Callable[[str], str]  # any callable from prompt text to reply text
JUDGES: tuple[str, ...] = ("speed", "stability", "efficiency", "novelty")
CONTROL_DT = 0.04  # s per control step (Swimmer-v5: 4 MuJoCo steps of 0.01 s)

INSTRUCTIONS = {
    "design_thesis": "Propose a Swimmer body. Reply with JSON only: "
                     '{"parameters": [L1, L2, L3, r1, r2, r3], "description": "..."}.',
    "control_critique": "Critique this body in one sentence (stability, energy, fragility, "
                        'controllability). Reply with JSON only: {"critique": "..."}.',
    "design_synthesis": "Revise the thesis to answer the critique (structural changes welcome). "
                        'Reply with JSON only: {"parameters": [...], "description": "..."}.',
    "control_rewards": "Write reward functions compute_reward(obs, action, prev_action, dt, metrics) "
                       '-> (reward, components). Reply with JSON only: {"reward_functions": ["..."]}, '
                       "as many functions as the context's n.",
    "judge": "Judge the top design of this round on your criterion. Reply with JSON only: "
             '{"observation": "one sentence, under 30 words, no numbers"}.',
}


def _box() -> str:
    lo, hi = dict(zip(PARAM_NAMES, LOWER, strict=True)), dict(zip(PARAM_NAMES, UPPER, strict=True))
    return (f"segment lengths L1 (head), L2 (middle), L3 (tail), each in [{lo['L1']:g}, {hi['L1']:g}] m, "
            f"and their capsule radii r1, r2, r3, each in [{lo['r1']:g}, {hi['r1']:g}] m")


BODY_BRIEF = (
    "The robot is MuJoCo's Swimmer (gymnasium Swimmer-v5): three capsules in a row, head first, in a "
    "viscous fluid (density 4000, viscosity 0.1), joined by two hinge joints (range -100 to 100 degrees, "
    "motor gear 150), moving in the plane. A body is 6 numbers in this order: " + _box() + ". The default "
    f"body is {list(DEFAULT)}. A body with any number outside its range is rejected. Each body's gait is "
    "trained on a reward, then the body is scored by how far its torso moves forward along +x, in metres, "
    f"in one episode of episode_steps control steps of {CONTROL_DT} s (episode_steps is in the context).")
HISTORY_BRIEF = (
    "The context holds round and index, hall_of_fame (the best body of each earlier round: its "
    "parameters and its forward distance in m) and judges (the last round's judges, one sentence each).")
REWARD_BRIEF = (
    "Contract: def compute_reward(obs, action, prev_action, dt, metrics): ... return reward, components. "
    "The inputs share leading axes (batch, time), say (B, T). obs is (B, T, 8), after each step: "
    "[0] torso angle, [1] joint 1 angle, [2] joint 2 angle (rad); [3] torso x velocity, [4] torso y "
    "velocity (m/s); [5] torso angular velocity, [6] joint 1 and [7] joint 2 angular velocity (rad/s). "
    "action and prev_action are (B, T, 2), the two joint torques in [-1, 1] (prev_action is 0 at the "
    f"first step). dt is the control step, {CONTROL_DT} s. metrics is a dict of (B, T) arrays with "
    f"exactly these keys: {', '.join(METRIC_KEYS)} (velocities in m/s, positions in m); read no other key. "
    "Vectorise: no Python loop over steps or batch; reduce only the last axis of obs or action "
    "(axis=-1); return reward with the shape of metrics['x_velocity'] and components as a dict of arrays "
    "of that shape. Use numpy as np (alias jp); no import, no file or network access, no name that "
    f"starts with an underscore; builtins: {', '.join(sorted(BUILTINS))}. The default reward is:\n"
    f"{DEFAULT_REWARD_SOURCE}The body is scored by forward distance, never by your reward.")
JUDGE_BRIEF = (
    "The context describes the round's top design: parameters (L1, L2, L3, r1, r2, r3 in m), distance "
    "(forward, m), episode_reward (under its own reward), best_distance (the best of earlier rounds, m), "
    "baseline_distance (the default body, m), lateral_ratio (sideways over forward displacement), "
    "effort_per_metre (summed squared torques per metre forward) and novelty (distance to earlier designs "
    "in range-scaled parameters, 0 when repeated).")
BRIEFS = {"design_thesis": (BODY_BRIEF, HISTORY_BRIEF), "design_synthesis": (BODY_BRIEF,),
          "control_critique": (BODY_BRIEF,), "control_rewards": (BODY_BRIEF, REWARD_BRIEF),
          "judge": (BODY_BRIEF, JUDGE_BRIEF)}


class AgentOutputError(ValueError):
    """[reconstruction] Strict JSON outputs: a reply that is not the JSON its role must emit (says what)."""


def make_prompt(role: str, context: dict[str, Any], rejected: str | None = None) -> str:
    """[reconstruction] Our prompt for ``role`` (INSTRUCTIONS key or ``judge_<criterion>``) and context.

    ``rejected``: why the previous reply to this prompt was refused, told to the agent.
    """
    base = "judge" if role.startswith("judge_") else role
    if base not in INSTRUCTIONS:
        raise ValueError(f"unknown role {role!r}")
    brief = "\n".join(BRIEFS[base])
    if base == "judge":
        brief = f"Your criterion: {role[len('judge_'):]}.\n{brief}"
    note = (f"\nYOUR PREVIOUS REPLY WAS REJECTED: {rejected}. Reply again, following the format exactly."
            if rejected else "")
    return (f"ROLE: {role}\n{INSTRUCTIONS[base]}\n{brief}{note}\n"
            f"CONTEXT:\n{json.dumps(context, sort_keys=True)}\n")


def read_prompt(prompt: str) -> tuple[str, dict[str, Any]]:
    """[reconstruction] Inverse of :func:`make_prompt`: (role, context)."""
    m = re.match(r"ROLE: (\S+)\n", prompt)
    if m is None or "\nCONTEXT:\n" not in prompt:
        raise ValueError("not a Debate2Create prompt (no ROLE line or CONTEXT block)")
    return m.group(1), json.loads(prompt.split("\nCONTEXT:\n", 1)[1])


def _load_object(text: str, what: str) -> dict[str, Any]:
    if not isinstance(text, str) or not text.strip():
        raise AgentOutputError(f"{what}: empty reply")
    s = text.strip()
    fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", s, flags=re.S)
    if fence:
        s = fence.group(1)
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as err:
        raise AgentOutputError(f"{what}: reply is not valid JSON ({err.msg} at char {err.pos})") from err
    if not isinstance(obj, dict):
        raise AgentOutputError(f"{what}: reply must be a JSON object, got {type(obj).__name__}")
    return obj


def parse_design(text: str) -> tuple[np.ndarray, str]:
    """§3.1 (thesis/synthesis output): the parameter vector (6,) and description.

    Raises ``AgentOutputError`` for malformed JSON, missing keys, a wrong length,
    non-numbers, booleans, NaN/inf or values outside the design space.
    """
    obj = _load_object(text, "design")
    if "parameters" not in obj:
        raise AgentOutputError("design: missing key 'parameters'")
    p = obj["parameters"]
    if not isinstance(p, list) or len(p) != len(PARAM_NAMES):
        raise AgentOutputError(f"design: 'parameters' must be a list of {len(PARAM_NAMES)} numbers "
                               f"{PARAM_NAMES}")
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in p):
        raise AgentOutputError(f"design: every parameter must be a number, got {p}")
    try:
        params = check_params(p)
    except ValueError as err:
        raise AgentOutputError(f"design: {err}") from err
    desc = obj.get("description", "")
    if not isinstance(desc, str):
        raise AgentOutputError("design: 'description' must be a string")
    return params, desc


def parse_critique(text: str) -> str:
    """§3.1 (antithesis output): the control agent's one-sentence critique."""
    obj = _load_object(text, "critique")
    c = obj.get("critique")
    if not isinstance(c, str) or not c.strip():
        raise AgentOutputError("critique: 'critique' must be a non-empty string")
    return c.strip()


def parse_rewards(text: str, check: bool = True) -> list[str]:
    """§3.2 (reward output): a non-empty list of ``compute_reward`` sources.

    With ``check`` each source is also defined and called once in the reward sandbox on a small
    probe (:func:`~minirepro.papers.debate2create.rewards.probe_reward`), so a reward that does not
    compile, imports, reads a missing key or returns the wrong shape is refused here, with why.
    """
    obj = _load_object(text, "rewards")
    fns = obj.get("reward_functions")
    if not isinstance(fns, list) or not fns or not all(isinstance(f, str) for f in fns):
        raise AgentOutputError("rewards: 'reward_functions' must be a non-empty list of strings")
    for i, f in enumerate(fns):
        if "def compute_reward" not in f:
            raise AgentOutputError("rewards: each entry must define compute_reward(...)")
        if check:
            try:
                probe_reward(f)
            except (ValueError, RuntimeError) as err:
                raise AgentOutputError(f"rewards: function {i + 1} fails: {err}") from err
    return fns


def parse_judgement(text: str) -> str:
    """§3.3 (judge output): one observation, under 30 words, without digits."""
    obj = _load_object(text, "judge")
    o = obj.get("observation")
    if not isinstance(o, str) or not o.strip():
        raise AgentOutputError("judge: 'observation' must be a non-empty string")
    if len(o.split()) >= 30:
        raise AgentOutputError("judge: observation must be under 30 words")
    if re.search(r"\d", o):
        raise AgentOutputError("judge: observation must not contain numbers")
    return o.strip()


def ask(llm: LLM, role: str, context: dict[str, Any], parse: Callable[[str], Any],
        retries: int) -> tuple[Any, int]:
    """[reconstruction] One agent call with bounded re-asking: ``(parsed reply, retries used)``.

    A reply that ``parse`` rejects (``AgentOutputError``: not JSON, a body outside the box, a
    reward that fails) is answered by the same prompt with the reason, up to ``retries`` times
    (the public code re-prompts on execution errors); then the error is raised, naming the role.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    why = None
    for attempt in range(retries + 1):
        try:
            return parse(llm(make_prompt(role, context, why))), attempt
        except AgentOutputError as err:
            why = str(err)
    raise AgentOutputError(f"{role}: no valid reply after {retries} re-asks; the last was refused: {why}")
