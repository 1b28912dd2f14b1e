"""Debate2Create (ICML 2026): multi-agent debate for robot co-design, in miniature.

* ``body``: Swimmer bodies from the public code's 6 parameters (MJCF, gymnasium env).
* ``control``: open-loop CPG controllers, batched MuJoCo rollouts, CMA-ES, TPE (optuna).
* ``rewards``: reward functions in the public code's signature, compiled from source.
* ``sandbox``: agent-written rewards run in a separate, locked-down process (``_reward_worker``).
* ``training``: training and scoring one (body, reward) candidate.
* ``agents``: the ``LLM(prompt) -> str`` interface, prompts, strict JSON parsers, bounded re-asking.
* ``scripted``: the offline scripted stand-in for every agent and judge.
* ``http_llm``: an adapter for OpenAI-compatible endpoints (the chapter's ``agent = "openai"``).
* ``debate``: the protocol, its ablations and the morphology-only baselines (BO, CMA-ES).
* ``experiment``: the chapter's config and runs; ``plots``: its figures.
"""

from minirepro.papers.debate2create import plots  # noqa: E402
from minirepro.papers.debate2create.agents import (
    JUDGES,
    AgentOutputError,
    ask,
    make_prompt,
    parse_critique,
    parse_design,
    parse_judgement,
    parse_rewards,
    read_prompt,
)
from minirepro.papers.debate2create.body import (
    DEFAULT,
    LOWER,
    PARAM_NAMES,
    PUBLIC_BODIES,
    UPPER,
    check_params,
    load_model,
    make_env,
    segment_geometry,
    swimmer_xml,
)
from minirepro.papers.debate2create.control import (
    Trajectory,
    cmaes_maximize,
    cpg_controls,
    initial_states,
    simulate,
    tpe_maximize,
)
from minirepro.papers.debate2create.debate import (
    CONDITIONS,
    Budget,
    ConditionRun,
    run_debate,
    run_default,
    run_morphology_bo,
    run_morphology_cmaes,
)
from minirepro.papers.debate2create.experiment import (
    Config,
    Experiment,
    log_ratio,
    make_agent,
    per_seed,
    run_experiment,
    run_seed,
    summarise,
    trainings_per_seed,
)
from minirepro.papers.debate2create.http_llm import LLMEndpointError, OpenAIChatLLM
from minirepro.papers.debate2create.rewards import (
    DEFAULT_REWARD_SOURCE,
    compile_reward,
    episode_return,
    observations,
    probe_reward,
    shaped_reward_source,
)
from minirepro.papers.debate2create.sandbox import (
    Limits,
    RewardError,
    SandboxedReward,
    check_reward_source,
)
from minirepro.papers.debate2create.scripted import ScriptedLLM, judge_observation
from minirepro.papers.debate2create.training import (
    Candidate,
    evaluate_fresh,
    train_candidate,
    train_or_fail,
    zero_control_distance,
)

__all__ = [
    "AgentOutputError", "Budget", "CONDITIONS", "Candidate", "ConditionRun", "Config",
    "DEFAULT", "DEFAULT_REWARD_SOURCE", "Experiment", "JUDGES", "LLMEndpointError", "LOWER", "Limits",
    "OpenAIChatLLM", "PARAM_NAMES", "PUBLIC_BODIES", "RewardError", "SandboxedReward", "ScriptedLLM",
    "Trajectory", "UPPER", "ask", "check_params", "check_reward_source", "cmaes_maximize", "compile_reward", "cpg_controls", "episode_return",
    "evaluate_fresh", "initial_states", "judge_observation", "load_model", "log_ratio",
    "make_agent", "make_env", "make_prompt", "observations", "parse_critique", "parse_design",
    "parse_judgement", "parse_rewards", "per_seed", "plots", "probe_reward", "read_prompt", "run_debate",
    "run_default", "run_experiment", "run_morphology_bo", "run_morphology_cmaes", "run_seed", "segment_geometry",
    "shaped_reward_source", "simulate", "summarise", "swimmer_xml", "trainings_per_seed", "train_candidate",
    "train_or_fail", "tpe_maximize", "zero_control_distance",
]

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("debate", "agents", "rewards", "training")
