"""Reward functions in the public code's signature, compiled from agent-written source.

``compute_reward(obs, action, prev_action, dt, metrics) -> (reward, components)``.
The public code asks for JAX; here the functions are numpy and must be vectorised
over any leading batch/time axes (the analogue of "jit/vmap-safe"). Every reward, the
default one included, runs in a sandboxed process (``sandbox.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from minirepro.papers.debate2create.control import Trajectory
from minirepro.papers.debate2create.sandbox import DEFAULT_LIMITS, Limits, SandboxedReward

RewardFn = Callable[..., tuple[np.ndarray, dict]]
METRIC_KEYS: tuple[str, ...] = ("x_velocity", "y_velocity", "x_position", "y_position",
                                "distance_from_origin")

DEFAULT_REWARD_SOURCE = '''def compute_reward(obs, action, prev_action, dt, metrics):
    forward = metrics["x_velocity"]
    ctrl_cost = 1e-4 * np.sum(action ** 2, axis=-1)
    return forward - ctrl_cost, {"forward": forward, "ctrl_cost": ctrl_cost}
'''

SHAPED_TEMPLATE = '''def compute_reward(obs, action, prev_action, dt, metrics):
    v = metrics["x_velocity"]
    forward = {w_fwd} * np.tanh(v / {v_temp})
    lateral = {w_lat} * np.tanh(np.abs(metrics["y_velocity"]) / 0.5)
    effort = {w_eff} * np.sum(action ** 2, axis=-1)
    jerk = {w_jerk} * np.sum((action - prev_action) ** 2, axis=-1)
    backward = {w_back} * np.maximum(-v, 0.0)
    reward = forward - lateral - effort - jerk - backward
    return reward, {{"forward": forward, "lateral": lateral, "effort": effort,
                    "jerk": jerk, "backward": backward}}
'''
WEIGHT_NAMES: tuple[str, ...] = ("w_fwd", "v_temp", "w_lat", "w_eff", "w_jerk", "w_back")


def shaped_reward_source(weights: Mapping[str, float]) -> str:
    """[reconstruction] The source of a shaped reward in the form of the released D2C
    Swimmer reward (tanh of speed minus bounded penalties), for the given weights."""
    missing = set(WEIGHT_NAMES) - set(weights)
    if missing:
        raise ValueError(f"reward weights missing {sorted(missing)}")
    vals = {k: float(weights[k]) for k in WEIGHT_NAMES}
    if vals["v_temp"] <= 0 or any(not np.isfinite(v) or v < 0 for v in vals.values()):
        raise ValueError(f"reward weights must be finite, >= 0, with v_temp > 0: {vals}")
    return SHAPED_TEMPLATE.format(**{k: repr(v) for k, v in vals.items()})


def compile_reward(source: str, limits: Limits = DEFAULT_LIMITS) -> RewardFn:
    """§3.2 (the control agent's reward): ``compute_reward`` from source text, run in a sandbox.

    The source runs in a separate, locked-down process (:mod:`~minirepro.papers.debate2create.sandbox`:
    no files, network, imports or child processes; CPU and memory limits) with a read-only numpy
    subset as ``np`` (and ``jp``, the public code's alias) and a few builtins. Raises
    ``ValueError`` when the source does not define ``compute_reward``, does not compile, imports
    or names an underscored attribute, and :class:`~minirepro.papers.debate2create.sandbox.RewardError`
    when defining it fails in the sandbox.
    """
    return SandboxedReward(source, limits)


def observations(traj: Trajectory) -> dict[str, np.ndarray]:
    """[reconstruction] A reward's inputs: Swimmer-v5's observation and the metrics it may read, per step.

    Returns ``obs`` (B, T, 8) = (3 angles, tip vx, vy, 3 angular rates) after each
    step, ``action``/``prev_action`` (B, T, 2) and ``metrics`` (each (B, T)).
    """
    qpos, qvel, a = traj.qpos, traj.qvel, traj.actions
    obs = np.concatenate([qpos[:, 1:, 2:], qvel[:, 1:]], axis=-1)
    prev = np.concatenate([np.zeros_like(a[:, :1]), a[:, :-1]], axis=1)
    vel = (qpos[:, 1:, :2] - qpos[:, :-1, :2]) / traj.dt
    metrics = {"x_velocity": vel[..., 0], "y_velocity": vel[..., 1],
               "x_position": qpos[:, 1:, 0], "y_position": qpos[:, 1:, 1],
               "distance_from_origin": np.linalg.norm(qpos[:, 1:, :2], axis=-1)}
    return {"obs": obs, "action": a, "prev_action": prev, "metrics": metrics}


def episode_return(fn: RewardFn, traj: Trajectory) -> np.ndarray:
    """Eq. (debate2create-eq-score)'s objective: the sum over control steps of reward ``fn``, shape (B,).

    Raises ``ValueError`` when the function returns the wrong shape; non-finite
    returns become -inf (a broken reward never wins).
    """
    o = observations(traj)
    out = fn(o["obs"], o["action"], o["prev_action"], traj.dt, o["metrics"])
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError("compute_reward must return (reward, components)")
    r = np.asarray(out[0], dtype=float)
    if r.shape != o["metrics"]["x_velocity"].shape:
        raise ValueError(f"reward has shape {r.shape}, expected {o['metrics']['x_velocity'].shape}")
    total = r.sum(axis=1)
    return np.where(np.isfinite(total), total, -np.inf)


def probe_reward(source: str, limits: Limits = DEFAULT_LIMITS) -> RewardFn:
    """[reconstruction] Define a reward and call it once on a small all-zero probe of batch 2 and 3
    steps (every input and metric key present); raise ``ValueError`` or ``RewardError`` when it
    fails, returns the wrong shape or a non-finite value. Returns the compiled reward."""
    fn = compile_reward(source, limits)
    shape = (2, 3)
    out = fn(np.zeros((*shape, 8)), np.zeros((*shape, 2)), np.zeros((*shape, 2)), 0.04,
             {k: np.zeros(shape) for k in METRIC_KEYS})
    r = np.asarray(out[0], dtype=float)
    if r.shape != shape:
        raise ValueError(f"reward has shape {r.shape} on inputs of batch x time {shape}; "
                         f"it must have the shape of metrics['x_velocity']")
    if not np.all(np.isfinite(r)):
        raise ValueError("reward is not finite on an all-zero probe")
    return fn
