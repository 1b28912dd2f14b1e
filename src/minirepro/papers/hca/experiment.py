"""The chapter's experiment: closed loop, evidence, oracles, LIME, accuracies.

One *run* is a plant, a seed and a designed schedule: the NMPC drives the plant
in closed loop (with process noise) over ``n_days`` days; the move a few steps
before each event is explained, and so are ``random_per_day`` moves a day drawn
at random. Moves of the first ``calib_days`` days are the *early* data
(KKT-threshold calibration, pooled per domain over seeds and days; PCMCI's
training data), the rest are the *test* moves on which every method is scored.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import pandas as pd

from minirepro.core import ScaledConfig, progress
from minirepro.core.stats import seed_summary
from minirepro.papers.hca.evidence import (
    MoveContext,
    kg_evidence,
    kkt_evidence,
    knowledge_graph,
    pcmci_evidence,
    pcmci_pvalues,
)
from minirepro.papers.hca.lime_baseline import lime_explain
from minirepro.papers.hca.mpc import NMPC, MPCInfeasibleError, MPCProblem
from minirepro.papers.hca.oracle import design_oracle, interventional_oracle
from minirepro.papers.hca.plants import STEPS_PER_DAY, get_plant, make_schedule
from minirepro.papers.hca.ranking import Evidence, HCAParams, calibrate_tau, explain_all
from minirepro.papers.hca.shap_baseline import shap_explain

METHODS: tuple[str, ...] = ("HCA", "HCA (calibrated)", "LIME", "KernelSHAP", "KKT only", "majority",
                            "HCA without KG", "HCA without KKT", "HCA without PCMCI")
NO_CAUSE_DELTA = 1e-3  # a random move whose u0 no cause's removal changes by this much has no label
ORACLES: tuple[str, ...] = ("interventional", "design")
SOFT_PENALTY = 1000.0  # cost per unit of bound violation in the fallback MPC


@dataclass
class Config(ScaledConfig):
    """Sizes of the miniature."""

    domains: tuple[str, ...] = ("greenhouse", "hvac", "cstr")
    horizon: int = 8  # MPC steps (15 min each)
    n_days: int = 3  # simulated days per run
    calib_days: int = 2  # early days: calibration and PCMCI data (0: the first two moves, half a day)
    events_per_day: int = 5  # one full cycle of the 5 causes per day
    random_per_day: int = 5  # explained moves a day drawn at random (besides the event-anchored ones)
    lime_samples: int = 50  # LIME perturbations per explanation (100 in an earlier version)
    shap_samples: int = 30  # KernelSHAP coalitions (NMPC queries) per explanation
    tau_max: int = 3  # PCMCI's largest lag
    distractor: float = 0.5  # size of the overlapping weaker event (0: one event at a time)
    n_seeds: int = 5  # independent scenario sets (runs per domain)
    n_jobs: int = 2  # runs in parallel processes (joblib); results do not depend on it
    tau_kkt: float = 0.1  # the cross-domain KKT threshold (cost units) of HCAParams
    VIEW_PARAMETERS: ClassVar = ("domain",)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.calib_days < self.n_days:
            raise ValueError(f"need n_days >= 1 and 0 <= calib_days < n_days (test moves come from the "
                             f"later days), got n_days={self.n_days}, calib_days={self.calib_days}")
        if self.lime_samples < 10 or self.shap_samples < 10 or self.random_per_day < 0 or self.horizon < 1:
            raise ValueError(f"lime_samples, shap_samples >= 10, random_per_day >= 0 and horizon >= 1 "
                             f"are required: {self}")
        unknown = set(self.domains) - {"greenhouse", "hvac", "cstr"}
        if unknown:
            raise ValueError(f"unknown domains {sorted(unknown)}; expected some of greenhouse, hvac, cstr")

    PRESETS: ClassVar = {
        "smoke": {"n_days": 1, "calib_days": 0, "lime_samples": 20, "shap_samples": 12, "random_per_day": 1,
                  "n_seeds": 1, "n_jobs": 1, "tau_max": 2},
        "book": {},
        "full": {"n_days": 4, "calib_days": 2, "lime_samples": 200, "shap_samples": 100, "random_per_day": 9, "n_seeds": 8},
    }


@dataclass
class Run:
    """One closed-loop run: trajectory, the explained moves and their evidence."""

    plant_name: str
    seed: int
    traj: dict[str, np.ndarray]
    moves: pd.DataFrame
    evidence: list[Evidence]
    p_matrix: np.ndarray
    pcmci_seconds: float
    info: dict = field(default_factory=dict)


def _problem(schedule, t: int, N: int, x: np.ndarray, u_prev: np.ndarray) -> MPCProblem:
    return MPCProblem(x0=x.copy(), u_prev=u_prev.copy(), d=schedule.d_forecast[t:t + N].copy(),
                      x_lower=schedule.x_lower[t + 1:t + N + 1].copy(),
                      x_upper=schedule.x_upper[t + 1:t + N + 1].copy())


def closed_loop(plant_name: str, cfg: Config, seed: int) -> tuple[dict, list, object, NMPC]:
    """Run the NMPC in closed loop; keep the problem and solution at each explained step.

    Returns ``(traj, explained, schedule, mpc)``; ``explained`` lists ``(t, event or None,
    problem, solution, nominal forecast)`` in time order; ``traj`` arrays are over time:
    ``x`` ``(T+1, n_x)``, ``u`` ``(T, n_u)``, ``lam_upper``/``lam_lower`` ``(T, N, n_x)``,
    ``forecast_mean`` ``(T, n_d)``, bounds ``(T, n_x)``.
    """
    plant = get_plant(plant_name)
    rng = np.random.default_rng([seed, len(plant_name)])
    sch = make_schedule(plant, cfg.n_days, cfg.events_per_day, cfg.horizon, rng,
                        distractor=cfg.distractor)
    mpc = NMPC(plant, N=cfg.horizon)
    fallback = NMPC(plant, N=cfg.horizon, soft=SOFT_PENALTY)
    infeasible_steps = []
    explain_at = {ev.t_explain: ev for ev in sch.events}
    for t_r in random_moves(sch, cfg.random_per_day, np.random.default_rng([seed, len(plant_name), 7])):
        explain_at[t_r] = None  # a move drawn at random: no designed cause
    T, N = sch.n_steps, cfg.horizon
    xs, us = [plant.x_init.copy()], []
    lam_up, lam_lo, lam_uu, lam_ul, fmean = [], [], [], [], []
    explained = []
    u_prev = plant.u_init.copy()
    for t in range(T):
        pr = _problem(sch, t, N, xs[-1], u_prev)
        try:
            sol = mpc.solve(pr)
        except MPCInfeasibleError:  # no hard-feasible plan: act on the soft one, explain nothing
            sol = fallback.solve(pr)
            infeasible_steps.append(t)
            explain_at.pop(t, None)
        if t in explain_at:
            explained.append((t, explain_at[t], pr, sol, sch.d_nominal[t:t + N].copy()))
        u = sol.u[0]
        us.append(u)
        lam_up.append(sol.lam_x_upper)
        lam_lo.append(sol.lam_x_lower)
        lam_uu.append(sol.lam_u_upper[0])
        lam_ul.append(sol.lam_u_lower[0])
        fmean.append(pr.d.mean(axis=0))
        xs.append(plant.step(xs[-1], u, sch.d_actual[t], rng))
        u_prev = u
    traj = {"x": np.array(xs), "u": np.array(us), "lam_upper": np.array(lam_up),
            "lam_lower": np.array(lam_lo), "lam_u_upper": np.array(lam_uu),
            "lam_u_lower": np.array(lam_ul), "forecast_mean": np.array(fmean),
            "x_lower": sch.x_lower[1:T + 1], "x_upper": sch.x_upper[1:T + 1],
            "d_actual": sch.d_actual[:T], "events": sch.events,
            "infeasible_steps": np.array(infeasible_steps, dtype=int)}
    mpc.fallback = fallback
    return traj, explained, sch, mpc


def random_moves(sch, per_day: int, rng: np.random.Generator) -> list[int]:
    """[reconstruction] ``per_day`` steps a day drawn uniformly at random (without replacement) among
    the day's steps that are not event-anchored explained moves (and not the first step)."""
    taken = {ev.t_explain for ev in sch.events}
    out: list[int] = []
    for day in range(sch.n_steps // STEPS_PER_DAY):
        pool = [t for t in range(day * STEPS_PER_DAY, (day + 1) * STEPS_PER_DAY) if t not in taken and t > 0]
        out += sorted(rng.choice(pool, size=min(per_day, len(pool)), replace=False).tolist())
    return out


def run_domain(plant_name: str, cfg: Config, seed: int, params: HCAParams | None = None) -> Run:
    """Closed loop, PCMCI on early data, then evidence, oracles, LIME and KernelSHAP per explained move."""
    params = params or HCAParams()
    plant = get_plant(plant_name)
    traj, explained, sch, mpc = closed_loop(plant_name, cfg, seed)
    n_early = max(cfg.calib_days * STEPS_PER_DAY, min(STEPS_PER_DAY // 2, sch.n_steps))
    data = np.concatenate([traj["x"][:-1], traj["forecast_mean"], traj["u"]], axis=1)[:n_early]
    t0 = time.perf_counter()
    p_matrix = pcmci_pvalues(data, tau_max=cfg.tau_max)
    pcmci_s = time.perf_counter() - t0
    G = knowledge_graph(plant)
    # LIME's black box: the same NMPC, but a query unsolved in 40 IPOPT iterations
    # counts as infeasible (the controller holds its last input).
    lime_mpc = NMPC(plant, N=cfg.horizon, max_iter=40, tol=1e-6)
    rng_u = plant.u_max - plant.u_min
    rows, evidence = [], []
    for i, (t_move, ev, pr, sol, d_nom) in enumerate(explained):
        t0 = time.perf_counter()
        ctx = MoveContext(du=(sol.u[0] - pr.u_prev) / rng_u, sol=sol, d_dev=pr.d - d_nom,
                          x_lower=pr.x_lower, x_upper=pr.x_upper, d=pr.d)
        support, consistent = kg_evidence(G, plant, ctx)
        e = Evidence(kg_support=support, kg_consistent=consistent,
                     kkt=kkt_evidence(plant, ctx, params.gamma),
                     pcmci=pcmci_evidence(plant, p_matrix, ctx.primary_input))
        explain_all([e], params)
        hca_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        orc = interventional_oracle(mpc, pr, sol, d_nom, fallback=mpc.fallback)
        oracle_s = time.perf_counter() - t0
        day = t_move // STEPS_PER_DAY
        split = "early" if day < cfg.calib_days or (cfg.calib_days == 0 and i < 2) else "test"
        no_cause = ev is None and orc.deltas.max() < NO_CAUSE_DELTA
        row = {"domain": plant_name, "seed": seed, "t": t_move, "day": day, "split": split,
               "origin": "event" if ev is not None else "random",
               "interventional": -1 if no_cause else orc.label,
               "design": design_oracle(ev) if ev is not None else -1,
               "primary_input": ctx.primary_input, "hca_s": hca_s, "oracle_s": oracle_s,
               "lime": -1, "lime_s": np.nan, "lime_infeasible": 0, "shap": -1, "shap_s": np.nan}
        if split == "test":
            t0 = time.perf_counter()
            lr = lime_explain(lime_mpc, pr, d_nom, ctx.primary_input, cfg.lime_samples,
                              seed=seed * 1000 + i, sol=sol)
            row.update(lime=lr.label, lime_s=time.perf_counter() - t0, lime_infeasible=lr.n_infeasible)
            t0 = time.perf_counter()
            sr = shap_explain(lime_mpc, pr, d_nom, ctx.primary_input, cfg.shap_samples,
                              seed=seed * 1000 + i, sol=sol)
            row.update(shap=sr.label, shap_s=time.perf_counter() - t0)
        rows.append(row)
        evidence.append(e)
    return Run(plant_name, seed, traj, pd.DataFrame(rows), evidence, p_matrix, pcmci_s,
               info={"n_solves": mpc.n_solves + mpc.fallback.n_solves, "n_lime_queries": lime_mpc.n_solves,
                     "infeasible_steps": len(traj["infeasible_steps"]),
                     "skipped_moves": len(sch.events) + cfg.random_per_day * cfg.n_days - len(explained)})


def _labelled(run: Run, oracle: str, split: str) -> np.ndarray:
    m = run.moves
    return np.flatnonzero((m["split"].to_numpy() == split) & (m[oracle].to_numpy() >= 0))


def pooled_taus(runs: list[Run], params: HCAParams) -> dict[tuple[str, str], float]:
    """§ calibration [recon]: ``tau_KKT`` per (domain, oracle), calibrated on the early moves of
    every run of that domain (all seeds, all early days) pooled; the cross-domain value if none."""
    out = {}
    for dom in dict.fromkeys(r.plant_name for r in runs):
        for oracle in ORACLES:
            ev, lab = [], []
            for r in runs:
                if r.plant_name == dom:
                    idx = _labelled(r, oracle, "early")
                    ev += [r.evidence[i] for i in idx]
                    lab += r.moves[oracle].to_numpy()[idx].tolist()
            out[dom, oracle] = calibrate_tau(ev, lab, params) if ev else params.tau_kkt
    return out


def predictions(run: Run, params: HCAParams, oracle: str, tau: float | None = None) -> pd.DataFrame:
    """Every method's label for the run's labelled test moves (one row per move).

    ``tau`` is the calibrated KKT threshold (e.g. from :func:`pooled_taus`); without it the
    threshold is calibrated on this run's early moves alone. Moves the oracle gives no label
    (random moves for the design oracle; random moves no cause moved) are left out.
    """
    if oracle not in ORACLES:
        raise ValueError(f"unknown oracle {oracle!r}; expected one of {ORACLES}")
    m = run.moves
    early, test = _labelled(run, oracle, "early"), _labelled(run, oracle, "test")
    ev_test = [run.evidence[i] for i in test]
    if tau is None:
        ev_early = [run.evidence[i] for i in early]
        tau = calibrate_tau(ev_early, m[oracle].to_numpy()[early], params) if len(early) else params.tau_kkt
    labels = m[oracle].to_numpy()[test]
    vals, counts = np.unique(labels, return_counts=True)
    out = pd.DataFrame({"domain": run.plant_name, "seed": run.seed, "t": m["t"].to_numpy()[test],
                        "origin": m["origin"].to_numpy()[test], "label": labels})
    out["HCA"] = explain_all(ev_test, params)
    out["HCA (calibrated)"] = explain_all(ev_test, replace(params, tau_kkt=tau))
    out["LIME"] = m["lime"].to_numpy()[test]
    out["KernelSHAP"] = m["shap"].to_numpy()[test]
    out["KKT only"] = np.array([int(np.argmax(e.kkt)) for e in ev_test], dtype=int)
    out["majority"] = vals[np.argmax(counts)] if len(vals) else -1
    for src in ("KG", "KKT", "PCMCI"):
        out[f"HCA without {src}"] = explain_all(ev_test, params.without(src))
    out.attrs["tau_calibrated"] = tau
    return out


def move_table(runs: list[Run], params: HCAParams | None = None) -> pd.DataFrame:
    """Every method's label for every labelled test move, per oracle (long in oracle, wide in method);
    "HCA (calibrated)" uses the threshold calibrated per domain on the pooled early moves."""
    params = params or HCAParams()
    taus = pooled_taus(runs, params)
    parts = []
    for run in runs:
        for oracle in ORACLES:
            tau = taus[run.plant_name, oracle]
            parts.append(predictions(run, params, oracle, tau=tau).assign(oracle=oracle, tau=tau))
    return pd.concat(parts, ignore_index=True)


def accuracy_table(runs: list[Run], params: HCAParams | None = None) -> pd.DataFrame:
    """Accuracy of every method per (domain, seed, oracle) on the labelled test moves (long format)."""
    moves = move_table(runs, params)
    rows = []
    for (dom, seed, oracle), g in moves.groupby(["domain", "seed", "oracle"], sort=False):
        for meth in METHODS:
            rows.append({"domain": dom, "seed": seed, "oracle": oracle, "method": meth,
                         "accuracy": float(np.mean(g[meth] == g["label"])) if len(g) else float("nan"),
                         "n": len(g), "tau": float(g["tau"].iloc[0])})
    return pd.DataFrame(rows)


def correct_per_move(moves: pd.DataFrame, oracle: str, method: str) -> np.ndarray:
    """1/0 per labelled test move (rows of :func:`move_table` for ``oracle``): did ``method`` name
    the oracle's cause? The paired units of the chapter's McNemar-style rules."""
    if oracle not in ORACLES or method not in METHODS:
        raise ValueError(f"unknown oracle {oracle!r} or method {method!r}")
    g = moves[moves["oracle"] == oracle]
    return (g[method].to_numpy() == g["label"].to_numpy()).astype(float)


def mcnemar_power(n: int, delta: float, p_disc: float, alpha: float = 0.05) -> float:
    """[reconstruction] Power of the two-sided McNemar test (normal approximation, Connor 1987)
    for ``n`` paired moves, a difference of accuracies ``delta`` and a discordant fraction
    ``p_disc`` (moves on which exactly one of the two methods is right)."""
    from scipy.stats import norm

    if not 0 < p_disc <= 1 or not 0 <= abs(delta) <= p_disc or n < 1:
        raise ValueError(f"need n >= 1 and 0 <= |delta| <= p_disc <= 1, got {n}, {delta}, {p_disc}")
    z = norm.ppf(1 - alpha / 2)
    return float(norm.cdf((abs(delta) * np.sqrt(n) - z * np.sqrt(p_disc)) / np.sqrt(p_disc - delta ** 2)))


def mcnemar_moves(delta: float, p_disc: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """[reconstruction] The fewest paired moves for which :func:`mcnemar_power` reaches ``power``."""
    n = 1
    while mcnemar_power(n, delta, p_disc, alpha) < power:
        n += 1
        if n > 10 ** 6:
            raise ValueError("no sample size below a million reaches that power")
    return n


def run_experiment(cfg: Config, params: HCAParams | None = None) -> list[Run]:
    """All domains for all seeds of ``cfg.seeds``, ``cfg.n_jobs`` runs at a time (a progress
    bar over runs).

    Each run seeds its own generator from ``(seed, plant)``, so the runs are the
    same whichever process executes them.
    """
    jobs = [(d, s) for s in cfg.seeds for d in cfg.domains]
    if cfg.n_jobs > 1 and len(jobs) > 1:
        from joblib import Parallel, delayed

        par = Parallel(n_jobs=cfg.n_jobs, return_as="generator")
        gen = par(delayed(run_domain)(d, cfg, s, params) for d, s in jobs)
        return list(progress(gen, total=len(jobs), desc="closed-loop runs"))
    return [run_domain(d, cfg, s, params) for d, s in progress(jobs, desc="closed-loop runs")]


def summarise(acc: pd.DataFrame) -> pd.DataFrame:
    """Mean, std, 95% t interval (over runs = domain x seed) of each method's accuracy, per
    oracle (``minirepro.core.stats.seed_summary``); columns ``mean, std, lo, hi, runs``."""
    out = seed_summary(acc, ["oracle", "method"], "accuracy", index=False)
    out = out.rename(columns=lambda c: c.replace("accuracy ", "")).rename(columns={"n": "runs"})
    out["method"] = pd.Categorical(out["method"], METHODS, ordered=True)
    return out.sort_values(["oracle", "method"]).reset_index(drop=True)


def per_seed_accuracy(acc: pd.DataFrame, oracle: str) -> pd.DataFrame:
    """Accuracy against ``oracle`` per scenario seed (rows) and method (columns), pooling the
    test moves of every domain of that seed: the paired unit of the chapter's rules.

    Each run's accuracy is weighted by its number of test moves, so a seed's value is the
    fraction of all its test moves explained correctly.
    """
    if oracle not in ORACLES:
        raise ValueError(f"unknown oracle {oracle!r}; expected one of {ORACLES}")
    a = acc[acc["oracle"] == oracle].assign(correct=lambda d: d["accuracy"] * d["n"])
    g = a.groupby(["seed", "method"])[["correct", "n"]].sum()
    return (g["correct"] / g["n"]).unstack("method").sort_index()


def mean_accuracy(acc: pd.DataFrame, method: str, oracle: str) -> float:
    """A method's accuracy against ``oracle`` averaged over runs (all test moves)."""
    s = acc[(acc["method"] == method) & (acc["oracle"] == oracle)]["accuracy"]
    if s.empty:
        raise ValueError(f"no accuracy for method {method!r} and oracle {oracle!r}")
    return float(s.mean())


def one_move(acc: pd.DataFrame, method: str, oracle: str) -> float:
    """The largest change one move can make to :func:`mean_accuracy`: one move of the run with fewest.

    :func:`mean_accuracy` averages the runs that scored a move, so flipping one move of
    run r moves it by ``1 / (runs * n_r)``. Used as the golden tolerance of an
    explainer whose label can flip between processors (KernelSHAP's nearly singular
    few-coalition regression).
    """
    g = acc[(acc["method"] == method) & (acc["oracle"] == oracle) & (acc["n"] > 0)]
    if g.empty:
        raise ValueError(f"no scored move for method {method!r} and oracle {oracle!r}")
    return 1.0 / (len(g) * int(g["n"].min()))


def costs(runs: list[Run]) -> pd.DataFrame:
    """Per-explanation wall time (ms, medians) of HCA, LIME and the interventional oracle.

    HCA's cost is its online work per move (evidence + ranking) plus its share of
    the PCMCI run (PCMCI seconds / moves explained in that run).
    """
    rows = []
    for r in runs:
        m = r.moves
        share = r.pcmci_seconds / len(m)
        rows += [{"method": "HCA", "domain": r.plant_name, "ms": 1e3 * (h + share)} for h in m["hca_s"]]
        rows += [{"method": "LIME", "domain": r.plant_name, "ms": 1e3 * v} for v in m["lime_s"].dropna()]
        rows += [{"method": "KernelSHAP", "domain": r.plant_name, "ms": 1e3 * v} for v in m["shap_s"].dropna()]
        rows += [{"method": "interventional oracle", "domain": r.plant_name, "ms": 1e3 * v}
                 for v in m["oracle_s"]]
    df = pd.DataFrame(rows)
    return df.groupby("method")["ms"].median().rename("median ms per explanation").to_frame()


def oracle_agreement(runs: list[Run]) -> float:
    """Fraction of event-anchored explained moves on which the two oracles name the same cause."""
    m = pd.concat([r.moves for r in runs])
    m = m[m["origin"] == "event"]
    return float(np.mean(m["interventional"].to_numpy() == m["design"].to_numpy()))


def cost_ratios(runs: list[Run]) -> np.ndarray:
    """Per run, LIME's median time per explanation over HCA's (evidence, ranking and its share
    of the run's PCMCI time), as in :func:`costs`; one value per run with LIME explanations."""
    out = []
    for r in runs:
        m = r.moves
        lime = m["lime_s"].dropna()
        if len(m) and len(lime):
            out.append(float(lime.median() / (m["hca_s"] + r.pcmci_seconds / len(m)).median()))
    return np.array(out)
