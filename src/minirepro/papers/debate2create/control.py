"""Open-loop CPG controllers, batched MuJoCo rollouts and CMA-ES [reconstruction].

The paper trains a PPO policy per candidate (350k steps). The miniature trains a
4-parameter central pattern generator per candidate with CMA-ES, so a candidate
trains in a fraction of a second. Because the controls are open loop, a whole
CMA-ES generation is one ``mujoco.rollout`` call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

FRAME_SKIP = 4  # Swimmer-v5: 4 physics steps of 0.01 s per control step
CPG_NAMES: tuple[str, ...] = ("A1", "A2", "freq", "phase")
CPG_LOWER = np.array([0.0, 0.0, 0.1, -np.pi])
CPG_UPPER = np.array([1.5, 1.5, 1.5, np.pi])


def cpg_controls(theta: np.ndarray, n_steps: int, dt: float) -> np.ndarray:
    """[reconstruction] Open-loop CPG: a_j(t) = clip(A_j sin(2 pi f t + j phi), -1, 1).

    ``theta`` has shape (B, 4) = (A1, A2, f in Hz, phi in rad); returns controls of
    shape (B, n_steps, 2), one per control step of ``dt`` seconds.
    """
    th = np.atleast_2d(np.asarray(theta, dtype=float))
    if th.shape[1] != 4 or not np.all(np.isfinite(th)):
        raise ValueError(f"theta must be finite with shape (B, 4), got {th.shape}")
    t = np.arange(n_steps) * dt
    ph = 2 * np.pi * th[:, 2:3] * t[None, :]
    a1 = th[:, 0:1] * np.sin(ph)
    a2 = th[:, 1:2] * np.sin(ph + th[:, 3:4])
    return np.clip(np.stack([a1, a2], axis=-1), -1.0, 1.0)


@dataclass
class Trajectory:
    """Rollouts at control-step resolution: qpos (B, T+1, nq), qvel (B, T+1, nv),
    actions (B, T, nu); ``dt`` is the control step in seconds."""

    qpos: np.ndarray
    qvel: np.ndarray
    actions: np.ndarray
    dt: float

    def forward_displacement(self) -> np.ndarray:
        """Final minus initial x of the torso frame (m), shape (B,): the chapter's score."""
        return self.qpos[:, -1, 0] - self.qpos[:, 0, 0]

    def distance_sum(self) -> np.ndarray:
        """The public code's score: sum over control steps of ||(x_t, y_t)|| (m), shape (B,)."""
        return np.linalg.norm(self.qpos[:, 1:, :2], axis=-1).sum(axis=1)


def initial_states(model: mujoco.MjModel, n: int, noise: float = 0.0,
                   seed: int = 0) -> np.ndarray:
    """Swimmer-v5's reset: qpos, qvel uniform in [-noise, noise] around zero; shape (n, nstate)."""
    data = mujoco.MjData(model)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    size = mujoco.mj_stateSize(model, spec)
    rng = np.random.default_rng(seed)
    out = np.empty((n, size))
    for i in range(n):
        mujoco.mj_resetData(model, data)
        data.qpos[:] = model.qpos0 + rng.uniform(-noise, noise, model.nq)
        data.qvel[:] = rng.uniform(-noise, noise, model.nv)
        mujoco.mj_forward(model, data)
        mujoco.mj_getState(model, data, out[i], spec)
    return out


def simulate(model: mujoco.MjModel, actions: np.ndarray, init: np.ndarray) -> Trajectory:
    """Roll out control sequences (B, T, nu), each held for FRAME_SKIP physics steps,
    from initial states (B or 1, nstate); returns the trajectory at control steps."""
    actions = np.asarray(actions, dtype=float)
    B, T, nu = actions.shape
    if nu != model.nu:
        raise ValueError(f"actions have {nu} channels, the model has {model.nu} actuators")
    ctrl = np.repeat(actions, FRAME_SKIP, axis=1)
    init = np.broadcast_to(np.atleast_2d(init), (B, init.shape[-1])).copy()
    state, _ = mj_rollout.rollout(model, mujoco.MjData(model), init, ctrl)
    state = state[:, FRAME_SKIP - 1::FRAME_SKIP]
    nq, nv = model.nq, model.nv
    qpos = np.concatenate([init[:, None, 1:1 + nq], state[:, :, 1:1 + nq]], axis=1)
    qvel = np.concatenate([init[:, None, 1 + nq:1 + nq + nv], state[:, :, 1 + nq:1 + nq + nv]], axis=1)
    return Trajectory(qpos, qvel, actions, model.opt.timestep * FRAME_SKIP)


def cmaes_maximize(f: Callable[[np.ndarray], np.ndarray], lower: np.ndarray, upper: np.ndarray,
                   generations: int, popsize: int, seed: int, x0: np.ndarray | None = None,
                   sigma: float = 0.3) -> tuple[np.ndarray, float, np.ndarray]:
    """CMA-ES (the ``cmaes`` package) maximising a batched objective ``f`` (n, d) -> (n,)
    inside box bounds, searched in coordinates scaled to [0, 1].

    Returns (best x, best value, best value after each generation (generations,)).
    """
    from cmaes import CMA

    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    if generations < 1 or popsize < 2:
        raise ValueError("need generations >= 1 and popsize >= 2")
    span = upper - lower
    z0 = np.full(len(lower), 0.5) if x0 is None else (np.asarray(x0, float) - lower) / span
    opt = CMA(mean=np.clip(z0, 0, 1), sigma=sigma, bounds=np.array([[0.0, 1.0]] * len(lower)),
              seed=seed, population_size=popsize)
    best_x, best_v, curve = None, -np.inf, []
    for _ in range(generations):
        zs = np.array([opt.ask() for _ in range(opt.population_size)])
        xs = lower + zs * span
        vals = np.asarray(f(xs), dtype=float)
        if vals.shape != (len(xs),):
            raise ValueError(f"objective returned shape {vals.shape}, expected ({len(xs)},)")
        vals = np.where(np.isfinite(vals), vals, -1e9)
        opt.tell([(z, -v) for z, v in zip(zs, vals, strict=True)])
        i = int(np.argmax(vals))
        if vals[i] > best_v:
            best_x, best_v = xs[i].copy(), float(vals[i])
        curve.append(best_v)
    return best_x, best_v, np.array(curve)


def tpe_maximize(f: Callable[[np.ndarray], float], lower: np.ndarray, upper: np.ndarray,
                 n_evals: int, seed: int, x0: np.ndarray | None = None
                 ) -> tuple[np.ndarray, float, np.ndarray]:
    """Bayesian optimisation (the paper's morphology-only baseline): optuna's default
    sampler, TPE, seeded, maximising a scalar objective ``f`` (d,) -> float inside box
    bounds with exactly ``n_evals`` evaluations (the first at ``x0`` if given, through
    ``enqueue_trial``; the sampler itself is left at optuna's defaults).

    Returns (best x, best value, best value after each evaluation (n_evals,)).
    """
    import optuna

    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    if isinstance(n_evals, bool) or int(n_evals) != n_evals or n_evals < 1:
        raise ValueError(f"the BO budget must be an integer >= 1 evaluation, got {n_evals!r}")
    if lower.shape != upper.shape or lower.ndim != 1 or not np.all(lower < upper):
        raise ValueError("need 1-d bounds with lower < upper")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {f"x{i}": optuna.distributions.FloatDistribution(float(lo), float(hi))
             for i, (lo, hi) in enumerate(zip(lower, upper, strict=True))}
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    if x0 is not None:
        study.enqueue_trial({k: float(v) for k, v in zip(dists, np.clip(x0, lower, upper), strict=True)})
    best_x, best_v, curve = None, -np.inf, []
    for _ in range(int(n_evals)):
        trial = study.ask(dists)
        x = np.array([trial.params[k] for k in dists])
        v = float(f(x))
        v = v if np.isfinite(v) else -1e9
        study.tell(trial, v)
        if v > best_v:
            best_x, best_v = x, v
        curve.append(best_v)
    return best_x, best_v, np.array(curve)
