"""Training and scoring one candidate (body, reward) [reconstruction of the paper's RL step].

The controller is the CPG of ``control.py`` tuned by CMA-ES on the candidate's
generated reward; the candidate is then scored by forward displacement in the
simulator, never by the generated reward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from minirepro.papers.debate2create.body import load_model
from minirepro.papers.debate2create.control import (
    CPG_LOWER,
    CPG_UPPER,
    Trajectory,
    cmaes_maximize,
    cpg_controls,
    initial_states,
    simulate,
)
from minirepro.papers.debate2create.rewards import compile_reward, episode_return
from minirepro.papers.debate2create.sandbox import RewardError


@dataclass
class Candidate:
    """Eq. (debate2create-eq-score) for one candidate: body θ, reward R, controller, measured rollout."""

    params: np.ndarray
    reward_source: str
    theta: np.ndarray
    reward: float            # episode return under its own generated reward
    distance: float          # forward displacement (m) of the trained controller
    distance_sum: float      # the public code's score, sum_t ||(x_t, y_t)|| (m)
    lateral_ratio: float     # |final y| / max(|final x|, 0.01)
    effort_per_metre: float  # sum_t ||a_t||^2 / max(|final x|, 0.01)
    curve: np.ndarray = field(repr=False, default=None)
    error: str = ""          # why training failed (the reward raised or hit a limit), else ""


@lru_cache(maxsize=256)
def _model(params: tuple[float, ...]):
    return load_model(params)


def gait_grid() -> np.ndarray:
    """[reconstruction] The fixed start grid of CPG gaits: full amplitude, frequencies
    0.4-1.3 Hz, phase lags +-1 and +-2 rad; shape (16, 4)."""
    f, ph = np.meshgrid([0.4, 0.7, 1.0, 1.3], [-2.0, -1.0, 1.0, 2.0], indexing="ij")
    return np.stack([np.ones(16), np.ones(16), f.ravel(), ph.ravel()], axis=1)


def train_candidate(params: np.ndarray, reward_source: str, steps: int, popsize: int,
                    generations: int, seed: int) -> Candidate:
    """§3.2 (train a candidate): a 16-gait start grid, then CMA-ES on the CPG from the
    grid's best for ``generations`` x ``popsize`` rollouts of ``steps`` control steps, maximising the generated reward's return from
    the noiseless start; then the trained controller's rollout is measured."""
    key = tuple(round(float(v), 6) for v in params)
    model = _model(key)
    fn = compile_reward(reward_source)
    init = initial_states(model, 1)
    dt = model.opt.timestep * 4

    def objective(th: np.ndarray) -> np.ndarray:
        return episode_return(fn, simulate(model, cpg_controls(th, steps, dt), init))

    grid = gait_grid()
    g = objective(grid)
    x0 = grid[int(np.argmax(g))]
    theta, ret, curve = cmaes_maximize(objective, CPG_LOWER, CPG_UPPER, generations, popsize, seed,
                                       x0=x0, sigma=0.15)
    if float(np.max(g)) > ret:
        theta, ret = x0, float(np.max(g))
    tr = simulate(model, cpg_controls(theta, steps, dt), init)
    return Candidate(np.asarray(params, float), reward_source, theta, ret, *_measure(tr), curve)


def train_or_fail(params: np.ndarray, reward_source: str, steps: int, popsize: int, generations: int,
                  seed: int) -> Candidate:
    """§3.2 (train a candidate), or a failed candidate (distance -inf, never a winner) when its
    reward raises or hits a sandbox limit during training."""
    try:
        return train_candidate(params, reward_source, steps, popsize, generations, seed)
    except RewardError as err:
        nan = float("nan")
        return Candidate(np.asarray(params, float), reward_source, np.full(4, nan), -np.inf, -np.inf,
                         nan, nan, nan, error=str(err))


def _measure(tr: Trajectory) -> tuple[float, float, float, float]:
    d = float(tr.forward_displacement()[0])
    if not np.isfinite(d):
        return -np.inf, np.nan, np.nan, np.nan
    dx = max(abs(d), 0.01)
    lat = abs(float(tr.qpos[0, -1, 1] - tr.qpos[0, 0, 1])) / dx
    eff = float((tr.actions[0] ** 2).sum()) / dx
    return d, float(tr.distance_sum()[0]), lat, eff


def evaluate_fresh(params: np.ndarray, reward_source: str, steps: int, popsize: int,
                   generations: int, seed: int, n_inits: int, noise: float) -> tuple[float, Trajectory]:
    """Eq. (debate2create-eq-fresh): re-evaluation on fresh seeds, against best-of-N selection bias.

    Retrain the controller with a new CMA-ES seed, then average the forward displacement (m)
    over ``n_inits`` Swimmer-v5 resets with uniform noise ``noise``. Returns (mean, rollouts)."""
    c = train_candidate(params, reward_source, steps, popsize, generations, seed)
    model = _model(tuple(round(float(v), 6) for v in params))
    init = initial_states(model, n_inits, noise=noise, seed=seed)
    tr = simulate(model, cpg_controls(np.tile(c.theta, (n_inits, 1)), steps,
                                      model.opt.timestep * 4), init)
    d = tr.forward_displacement()
    return float(np.mean(np.where(np.isfinite(d), d, 0.0))), tr


def zero_control_distance(params: np.ndarray, steps: int, seed: int, n_inits: int,
                          noise: float) -> float:
    """[reconstruction] Ours: mean forward displacement (m) with zero control from the same noisy
    resets (the do-nothing baseline, not the paper's, that gives the transfer claim its power check)."""
    model = _model(tuple(round(float(v), 6) for v in params))
    init = initial_states(model, n_inits, noise=noise, seed=seed)
    tr = simulate(model, np.zeros((n_inits, steps, model.nu)), init)
    return float(np.mean(tr.forward_displacement()))
