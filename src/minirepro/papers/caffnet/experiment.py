"""The chapter's experiment: every method on every scenario over several seeds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core import ScaledConfig, compare_times
from minirepro.papers.caffnet.layer import hardnet_aff, max_violation
from minirepro.papers.caffnet.models import (
    METHODS,
    Data,
    Trained,
    evaluate,
    make_data,
    output_layer,
    train_methods,
)
from minirepro.papers.caffnet.scenarios import OptimisationScenario, PiecewiseScenario

DELTA = 1e-6  # errors closer than this count as equal (solver precision; MSE or objective units)


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
    scenarios: tuple[str, ...] = ("piecewise", "convex QP", "nonconvex (DC3)")
    PRESETS: ClassVar = {
        "smoke": {"pwc_steps": 100, "pwc_test": 100, "opt_train": 96, "opt_test": 32,
                  "opt_steps": 30, "batch_size": 32, "hidden": (32, 32)},
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
    raise ValueError(f"unknown scenario {name!r}; expected piecewise, convex QP, nonconvex (DC3)")


def build_data(scenario, cfg: Config, seed: int) -> Data:
    """Train/test data of a scenario (test inputs on a grid for the 1-D scenario)."""
    if isinstance(scenario, PiecewiseScenario):
        return make_data(scenario, cfg.pwc_train, cfg.pwc_test, seed, grid_test=True)
    return make_data(scenario, cfg.opt_train, cfg.opt_test, seed)


@dataclass
class ScenarioRun:
    """One scenario's data, its trained ensemble (every method and seed) and its metrics."""

    scenario: object
    data: Data
    model: Trained
    table: pd.DataFrame


def run_scenario(name: str, cfg: Config, seeds: list[int], methods=METHODS,
                 data_seed: int = 0) -> ScenarioRun:
    """Train and test every method for every seed on one scenario (same data).

    The problem instance and the data are fixed by ``data_seed``; the seeds vary the
    network initialisation and the minibatch order. ``table`` has one row per
    (method, seed).
    """
    sc = build_scenario(name, cfg, data_seed)
    data = build_data(sc, cfg, data_seed)
    steps = cfg.pwc_steps if name == "piecewise" else cfg.opt_steps
    model = train_methods(sc, data, methods, seeds, hidden=tuple(cfg.hidden), steps=steps,
                          lr=cfg.lr, batch_size=cfg.batch_size, penalty=cfg.penalty)
    return ScenarioRun(sc, data, model, pd.DataFrame(evaluate(model, sc, data)))


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of each metric, per scenario and method."""
    g = table.groupby(["scenario", "method"], sort=False)
    out = g[["error", "max_violation", "violating_fraction"]].agg(["mean", "std"])
    out.columns = [f"{a} {b}" for a, b in out.columns]
    return out.reset_index()


def paired_difference(table: pd.DataFrame, scenario: str, a: str, b: str) -> dict[str, float]:
    """``error(a) - error(b)`` paired by seed: mean, standard error, count, and the
    number of seeds where ``a`` is at or below ``b``."""
    t = table[table.scenario == scenario].pivot(index="seed", columns="method", values="error")
    d = (t[a] - t[b]).to_numpy()
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else math.nan
    return {"mean": float(d.mean()), "se": se, "n": len(d), "at_or_below": int((d <= 0).sum())}


def better_beyond_noise(diff: dict[str, float], delta: float = DELTA) -> bool:
    """True when the mean paired difference is below ``-delta`` by more than 2 standard
    errors (never for a single seed: one seed cannot show superiority)."""
    return diff["n"] > 1 and diff["mean"] + 2 * diff["se"] < -delta


def worse_beyond_noise(diff: dict[str, float], delta: float = DELTA) -> bool:
    """True when the mean paired difference is above ``delta`` by more than 2 standard errors."""
    return diff["n"] > 1 and diff["mean"] - 2 * diff["se"] > delta


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


def fmt(value: float, digits: int = 3, floor: float = DELTA) -> str:
    """A number rounded to ``digits`` significant digits; ``|value| < floor`` prints as 0.

    Checked cells print through this, so float noise below ``floor`` cannot flip them.
    """
    if not math.isfinite(value):
        return str(value)
    if abs(value) < floor:
        return "0"
    return f"{value:.{digits}g}"


def claim_feasible(table: pd.DataFrame, method: str = "CAffNet", tol: float = 1e-9):
    """Largest violation of ``method`` over every scenario, seed and test input, and
    the verdict: reproduced when it is at most ``tol``."""
    worst = float(table[table.method == method].max_violation.max())
    return f"max violation {worst:.1e} (bound {tol:g})", ("reproduced" if worst <= tol
                                                           else "not reproduced")


def claim_violates(table: pd.DataFrame, method: str, eps: float = 1e-6):
    """How many (scenario, seed) runs of ``method`` violate some row by more than ``eps``:
    reproduced when all do, partly when some do, not reproduced when none do."""
    t = table[table.method == method]
    hit = int((t.max_violation > eps).sum())
    frac = t.groupby("scenario", sort=False).violating_fraction.mean()
    measured = f"{hit}/{len(t)} runs violate; " + ", ".join(
        f"{k}: {100 * v:.0f}% of inputs" for k, v in frac.items())
    return measured, ("reproduced" if hit == len(t) else "partly" if hit else "not reproduced")


def claim_lower_error(table: pd.DataFrame, scenarios: list[str], a: str, b: str):
    """Per scenario, the paired error difference ``a - b`` over seeds (mean +- SE) and
    whether ``a`` is better or worse than ``b`` beyond noise (2 SE and DELTA)."""
    out = {}
    for sc in scenarios:
        d = paired_difference(table, sc, a, b)
        d["better"], d["worse"] = better_beyond_noise(d), worse_beyond_noise(d)
        out[sc] = d
    text = "; ".join(f"{sc}: {fmt(d['mean'])} +- {fmt(d['se'], 2)}" for sc, d in out.items())
    return out, f"{a} - {b}: {text}"


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


__all__ = ["DELTA", "Config", "ScenarioRun", "better_beyond_noise", "build_data",
           "build_scenario", "claim_feasible", "claim_lower_error", "claim_violates", "fmt",
           "hardnet_control", "inference_times", "paired_difference", "run_scenario", "summarise",
           "worse_beyond_noise"]
