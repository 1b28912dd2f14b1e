"""The agents' interface ``LLM(prompt) -> str``, the JSON they must emit, and its parsers.

Three kinds of output, in the public code's JSON:

* design agent (thesis, synthesis): ``{"parameters": [6 numbers], "description": "..."}``
* control agent: ``{"critique": "one sentence"}`` and ``{"reward_functions": ["def compute_reward...", ...]}``
* judges: ``{"observation": "one sentence, under 30 words, no numbers"}``

A prompt is the role line, the instructions and a ``CONTEXT:`` JSON block; the
scripted stand-in (``scripted.py``) reads the same text an LLM would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from minirepro.papers.debate2create.body import PARAM_NAMES, check_params

LLM = Callable[[str], str]  # any callable from prompt text to reply text
JUDGES: tuple[str, ...] = ("speed", "stability", "efficiency", "novelty")

INSTRUCTIONS = {
    "design_thesis": "Propose a Swimmer body. Reply with JSON only: "
                     '{"parameters": [L1, L2, L3, r1, r2, r3], "description": "..."}.',
    "control_critique": "Critique this body in one sentence (stability, energy, fragility, "
                        'controllability). Reply with JSON only: {"critique": "..."}.',
    "design_synthesis": "Revise the thesis to answer the critique (structural changes welcome). "
                        'Reply with JSON only: {"parameters": [...], "description": "..."}.',
    "control_rewards": "Write reward functions compute_reward(obs, action, prev_action, dt, metrics) "
                       '-> (reward, components). Reply with JSON only: {"reward_functions": ["..."]}.',
    "judge": "Judge the top design of this round on your criterion. Reply with JSON only: "
             '{"observation": "one sentence, under 30 words, no numbers"}.',
}


class AgentOutputError(ValueError):
    """[reconstruction] Strict JSON outputs: a reply that is not the JSON its role must emit (says what)."""


def make_prompt(role: str, context: dict[str, Any]) -> str:
    """[reconstruction] Our prompt for ``role`` (INSTRUCTIONS key or ``judge_<criterion>``) and context."""
    base = "judge" if role.startswith("judge_") else role
    if base not in INSTRUCTIONS:
        raise ValueError(f"unknown role {role!r}")
    return f"ROLE: {role}\n{INSTRUCTIONS[base]}\nCONTEXT:\n{json.dumps(context, sort_keys=True)}\n"


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


def parse_rewards(text: str) -> list[str]:
    """§3.2 (reward output): a non-empty list of ``compute_reward`` sources."""
    obj = _load_object(text, "rewards")
    fns = obj.get("reward_functions")
    if not isinstance(fns, list) or not fns or not all(isinstance(f, str) for f in fns):
        raise AgentOutputError("rewards: 'reward_functions' must be a non-empty list of strings")
    for f in fns:
        if "def compute_reward" not in f:
            raise AgentOutputError("rewards: each entry must define compute_reward(...)")
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
