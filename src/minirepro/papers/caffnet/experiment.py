"""The chapter's experiment: every method on every scenario over several seeds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core import ScaledConfig, compare_times
from minirepro.core.stats import per_seed_wide, seed_summary
from minirepro.papers.caffnet.layer import hardnet_aff, max_violation
from minirepro.papers.caffnet.models import (
    METHODS,
    Constraints,
    Data,
    EnsembleMLP,
    TrainedMethods,
    evaluate,
    make_data,
    output_layer,
    train_methods,
)
from minirepro.papers.caffnet.scenarios import (
    OptimisationScenario,
    PiecewiseScenario,
    UnicycleScenario,
)

M_LE_N = "convex QP, m <= n"
A_OF_X = "nonconvex, A(x)"
UNICYCLE = "unicycle CBF"


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature. The paper: 3x200 MLPs, 50k epochs (1-D), 10k (DC3)."""

    hidden: tuple[int, ...] = (64, 64)
    penalty: float = 100.0
    lr: float = 3e-3
    pwc_train: int = 50
    pwc_test: int = 400
    pwc_steps: int = 500
    opt_n: int = 4
    opt_ineq: int = 4
    opt_eq: int = 2
    opt_train: int = 400
    opt_test: int = 200
    opt_steps: int = 200
    batch_size: int = 64
    n_seeds: int = 5
    scenarios: tuple[str, ...] = ("piecewise", "convex QP", "nonconvex (DC3)")
    added: tuple[str, ...] = (M_LE_N, A_OF_X, UNICYCLE)  # the paper's other settings
    cbf_train: int = 400
    cbf_test: int = 200
    cbf_steps: int = 300
    cbf_rollouts: int = 20
    cbf_horizon: int = 80
    cbf_dt: float = 0.05
    timing_m: tuple[int, ...] = (4, 6, 8, 10, 12, 14)
    timing_n: int = 4
    timing_batch: int = 32
    PRESETS: ClassVar = {
        "smoke": {"pwc_steps": 100, "pwc_test": 100, "opt_train": 96, "opt_test": 32,
                  "opt_steps": 30, "batch_size": 32, "hidden": (32, 32), "n_seeds": 3,
                  "cbf_train": 128, "cbf_test": 64, "cbf_steps": 100, "cbf_rollouts": 6,
                  "cbf_horizon": 50, "timing_m": (4, 8)},
        "book": {},
        "full": {"hidden": (200, 200, 200), "lr": 1e-3, "pwc_steps": 20000,
                 "opt_n": 5, "opt_ineq": 5, "opt_eq": 3, "opt_train": 1000, "opt_test": 1000,
                 "opt_steps": 5000, "batch_size": 256},
    }


def build_scenario(name: str, cfg: Config, problem_seed: int):
    """The scenario called ``name`` at the config's sizes."""
    if name == "piecewise":
        return PiecewiseScenario()
    if name in ("convex QP", "nonconvex (DC3)"):
        return OptimisationScenario(cfg.opt_n, cfg.opt_ineq, cfg.opt_eq,
                                    convex=name == "convex QP", problem_seed=problem_seed)
    if name == M_LE_N:  # HardNet's rows G, C: opt_n - opt_eq + opt_eq = n, so m <= n
        return OptimisationScenario(cfg.opt_n, cfg.opt_n - cfg.opt_eq, cfg.opt_eq, convex=True,
                                    problem_seed=problem_seed, label=M_LE_N)
    if name == A_OF_X:
        return OptimisationScenario(cfg.opt_n, cfg.opt_ineq, cfg.opt_eq, convex=False,
                                    problem_seed=problem_seed, varying=True, label=A_OF_X)
    if name == UNICYCLE:
        return UnicycleScenario()
    raise ValueError(f"unknown scenario {name!r}; expected piecewise, convex QP, nonconvex (DC3), "
                     f"{M_LE_N}, {A_OF_X}, {UNICYCLE}")


def build_data(scenario, cfg: Config, seed: int) -> Data:
    """Train/test data of a scenario (test inputs on a grid for the 1-D scenario)."""
    if isinstance(scenario, PiecewiseScenario):
        return make_data(scenario, cfg.pwc_train, cfg.pwc_test, seed, grid_test=True)
    if isinstance(scenario, UnicycleScenario):
        return make_data(scenario, cfg.cbf_train, cfg.cbf_test, seed)
    return make_data(scenario, cfg.opt_train, cfg.opt_test, seed)


@dataclass
class ScenarioRun:
    """One scenario's data, its trained ensemble (every method and seed) and its metrics."""

    scenario: object
    data: Data
    model: TrainedMethods
    table: pd.DataFrame
    start: np.ndarray  # per-seed test error of the untrained fixed projection (the start point)


def run_scenario(name: str, cfg: Config, seeds: list[int], methods=METHODS,
                 data_seed: int = 0) -> ScenarioRun:
    """Train and test every method for every seed on one scenario (same data).

    The problem instance and the data are fixed by ``data_seed``; the seeds vary the
    network initialisation and the minibatch order. ``table`` has one row per
    (method, seed); ``start`` holds each seed's error before training.
    """
    sc = build_scenario(name, cfg, data_seed)
    data = build_data(sc, cfg, data_seed)
    steps = {"piecewise": cfg.pwc_steps, UNICYCLE: cfg.cbf_steps}.get(name, cfg.opt_steps)
    model = train_methods(sc, data, methods, seeds, hidden=tuple(cfg.hidden), steps=steps,
                          lr=cfg.lr, batch_size=cfg.batch_size, penalty=cfg.penalty)
    start = start_errors(sc, data, seeds, tuple(cfg.hidden))
    return ScenarioRun(sc, data, model, pd.DataFrame(evaluate(model, sc, data)), start)


def run_experiment(cfg: Config, names: tuple[str, ...] | None = None) -> dict[str, ScenarioRun]:
    """The chapter's experiment: :func:`run_scenario` for each of ``names`` (default
    ``cfg.scenarios``), in order, on the network seeds ``cfg.seeds``, with the problem
    instance and data drawn from ``cfg.seed``."""
    names = cfg.scenarios if names is None else names
    return {name: run_scenario(name, cfg, cfg.seeds, data_seed=cfg.seed) for name in names}


@torch.no_grad()
def rollouts(run: ScenarioRun, cfg: Config, seed: int = 0) -> pd.DataFrame:
    """Closed-loop rollouts of every trained member on the unicycle [reconstruction of the
    paper's CBF evaluation]: ``cfg.cbf_rollouts`` starts, ``cfg.cbf_horizon`` Euler steps of
    ``cfg.cbf_dt``. A rollout *collides* when the look-ahead point enters an obstacle
    (``h_i < 0``); it stops there. One row per (method, seed): colliding rollouts, the
    smallest barrier value reached, and the mean final distance to the goal."""
    sc, model = run.scenario, run.model
    S, R, M = len(model.seeds), cfg.cbf_rollouts, len(model.methods)
    X = sc.starts(R, np.random.default_rng(seed)).repeat(M * S, 1, 1)          # (K, R, 3)
    hit = torch.zeros(M * S, R, dtype=torch.bool)
    h_min = sc.barrier(X.reshape(-1, 3)).amin(dim=1).reshape(M * S, R)
    path = [X.clone()]
    for _ in range(cfg.cbf_horizon):
        cons = [Constraints.of(sc, X[mi * S:(mi + 1) * S].reshape(-1, 3)) for mi in range(M)]
        U = model.outputs(X, cons)                                                  # (K, R, 2)
        new = sc.step(X.reshape(-1, 3), U.reshape(-1, 2), cfg.cbf_dt).reshape(X.shape)
        X = torch.where(hit[..., None], X, new)                                     # stop at a hit
        h = sc.barrier(X.reshape(-1, 3)).amin(dim=1).reshape(M * S, R)
        h_min, hit = torch.minimum(h_min, h), hit | (h < 0)
        path.append(X.clone())
    goal = torch.tensor(sc.goal, dtype=X.dtype)
    dist = torch.linalg.vector_norm(X[..., :2] - goal, dim=-1)
    rows = [{"method": m, "seed": s, "collisions": int(hit[model.member(m, s)].sum()),
             "min barrier": float(h_min[model.member(m, s)].min()),
             "final distance": float(dist[model.member(m, s)].mean())}
            for m in model.methods for s in model.seeds]
    out = pd.DataFrame(rows)
    out.attrs["paths"] = torch.stack(path, dim=2)                                # (K, R, T+1, 3)
    return out


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Mean, standard deviation and 95% t interval over seeds of each metric, per scenario
    and method (``minirepro.core.stats.seed_summary``)."""
    return seed_summary(table, ["scenario", "method"], ["error", "max_violation", "violating_fraction"],
                        index=False)


def results_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The results as the page shows them, narrow enough for the book's column: per scenario and
    method, the mean error with its 95% interval over seeds (3 significant digits), the mean of
    the largest violation (2 digits, scientific) and the mean share of violating test inputs (%)."""
    from minirepro.core.stats import sig

    def num(x: float, digits: int = 3) -> str:
        return sig(float(x), digits)

    out = pd.DataFrame({
        "scenario": summary["scenario"], "method": summary["method"],
        "error (95% CI)": [f"{num(m)} [{num(lo)}, {num(hi)}]" for m, lo, hi in
                           zip(summary["error mean"], summary["error lo"], summary["error hi"])],
        "max violation": [f"{float(v):.1e}" for v in summary["max_violation mean"]],
        "inputs violating": [f"{100 * float(v):.1f}%" for v in summary["violating_fraction mean"]],
    })
    return out.set_index(["scenario", "method"])


def per_seed(table: pd.DataFrame, scenario: str, column: str = "error") -> pd.DataFrame:
    """``column`` of every method on one scenario, one row per seed (aligned for paired rules)."""
    return per_seed_wide(table, column, scenario=scenario)


def start_errors(scenario, data: Data, seeds: list[int], hidden: tuple[int, ...],
                 method: str = "fixed projection") -> np.ndarray:
    """Test error per seed of ``method`` with its *initial* weights (no training) [book's baseline].

    Every method of a seed starts from these weights, so this is the start point an
    equivalence rule needs: a trained method that is not measurably away from it did
    nothing. Returns one mean error per seed, in the order of ``seeds``.
    """
    sc = scenario
    net = EnsembleMLP(list(seeds), sc.x_dim, sc.n, tuple(hidden))
    model = TrainedMethods((method,), tuple(int(s) for s in seeds), net, None)
    rows = pd.DataFrame(evaluate(model, sc, data)).set_index("seed").loc[list(seeds)]
    return rows["error"].to_numpy(dtype=float)


def hardnet_control(n: int, m: int, count: int, seed: int) -> float:
    """Max violation of HardNet-Aff on random full-row-rank ``bl <= A y <= bu`` (m <= n)
    or random over-determined sets (m > n) that still contain a point."""
    rng = np.random.default_rng(seed)
    A = torch.as_tensor(rng.normal(size=(count, m, n)))
    y0 = torch.as_tensor(rng.normal(size=(count, n)))
    centre = torch.einsum("bmn,bn->bm", A, y0)
    width = torch.as_tensor(rng.uniform(0.0, 0.5, size=(count, m)))
    bl, bu = centre - width, centre + width
    f = torch.as_tensor(rng.normal(scale=3.0, size=(count, n)))
    y = hardnet_aff(f, A, bl, bu)
    A2 = torch.cat([A, -A], dim=1)
    return float(max_violation(y, A2, torch.cat([bu, -bl], dim=1)).max())


def inference_times(run: ScenarioRun, repeats: int = 3, seed: int = 0,
                    n_inputs: int = 64) -> pd.DataFrame:
    """Median wall time of each output layer on the first ``n_inputs`` test inputs, and
    of the reference solver ("solver") on the same inputs, measured interleaved in one run.

    The layers get the same random predictions ``f`` and ``w``; the solver solves
    the problem itself (cvxpy for the QP, IPOPT for DC3; for the 1-D problem the
    "solver" is the closed-form target). Returns seconds and the ratio to CAffNet.
    """
    sc, data = run.scenario, run.data
    rows = torch.arange(min(n_inputs, len(data.x_test)))
    x, cons = data.x_test[rows], data.cons_test.take(rows)
    rng = np.random.default_rng(seed)
    f = torch.as_tensor(rng.normal(scale=2.0, size=(len(rows), sc.n)))
    w = torch.as_tensor(rng.normal(size=f.shape))
    fns = {m: (lambda m=m: output_layer(m, f, cons, w)) for m in METHODS if m != "soft penalty"}
    fns["solver"] = lambda: sc.target(x)
    t = compare_times(fns, repeats=repeats, warmup=1, baseline="CAffNet")
    return pd.DataFrame({"seconds": t.medians,
                         "time / CAffNet": {k: 1.0 / v for k, v in t.speedups.items()}})


__all__ = ["A_OF_X", "Config", "M_LE_N", "ScenarioRun", "UNICYCLE", "build_data", "build_scenario",
           "hardnet_control", "inference_times", "per_seed", "results_table", "rollouts", "run_scenario",
           "start_errors", "summarise"]
