"""The experiment: honest, attacked and real-data-control federations, valued and defended."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from minirepro.core import progress, set_seed

from .attack import AttackResult, craft_batch, target_classes
from .config import Config
from .data import Federation, make_federation, real_batch
from .defences import defence_report
from .fedavg import accuracy, fedavg_coalitions
from .valuation import banzhaf, exact_shapley, leave_one_out, monte_carlo_shapley, share

ARMS = ("honest", "attack", "real data")
EVALUATORS = ("Shapley", "leave-one-out", "Banzhaf", "MC Shapley")
DEFENCES = ("Krum", "FoolsGold", "norm clip")


@dataclass
class Results:
    """Long tables over seeds: ``values`` (seed, arm, evaluator, client, value, share),
    ``arms`` (seed, arm, test/val accuracy of the federation and of it without the adversary),
    ``flags`` (seed, arm, defence, client, flag rate), ``scores`` (seed, arm, round, client,
    each defence's score over its threshold), ``curves`` (seed, arm, round, val/test accuracy),
    ``mc`` (seed, arm, permutations, max error); ``attacks[seed]`` the crafted batches."""

    values: pd.DataFrame
    arms: pd.DataFrame
    flags: pd.DataFrame
    scores: pd.DataFrame
    curves: pd.DataFrame
    mc: pd.DataFrame
    attacks: dict[int, AttackResult] = field(default_factory=dict)
    feds: dict[int, Federation] = field(default_factory=dict)


def evaluate(U: np.ndarray, n: int, mc_permutations: int, seed: int) -> dict[str, np.ndarray]:
    """Every evaluator on one utility table ``U`` (2**n,): name -> values (n,)."""
    return {"Shapley": exact_shapley(U), "leave-one-out": leave_one_out(U), "Banzhaf": banzhaf(U),
            "MC Shapley": monte_carlo_shapley(U, n, mc_permutations, seed=seed)}


def _with_batch(fed: Federation, X: np.ndarray, y: np.ndarray) -> list:
    X0, y0 = fed.clients[0]
    return [(np.vstack([X0, X]), np.concatenate([y0, y]))] + list(fed.clients[1:])


def run_seed(cfg: Config, seed: int) -> dict:
    """One seed: craft the batch on the honest trajectory, then train all 2**n coalitions per arm."""
    set_seed(seed)
    fed = make_federation(seed, cfg.n_benign, cfg.per_class, cfg.rare_per_class, cfg.n_val,
                          cfg.proxy_per_class)
    train = dict(rounds=cfg.rounds, local_steps=cfg.local_steps, lr=cfg.lr, weight_decay=cfg.weight_decay)
    runs = {"honest": fedavg_coalitions(fed.clients, **train)}
    n = len(fed.clients)
    targets = target_classes(runs["honest"].history[-1], fed.proxy, fed.clients[0][1])
    labels = np.sort(np.resize(targets, cfg.n_synthetic))
    atk = craft_batch(fed.clients[0], fed.proxy, runs["honest"].history, n, labels,
                      latent_dim=cfg.latent_dim, steps=cfg.attack_steps, lr=cfg.attack_lr,
                      local_steps=cfg.local_steps, local_lr=cfg.lr, weight_decay=cfg.weight_decay,
                      lam_util=cfg.lam_util, lam_cos=cfg.lam_cos, lam_norm=cfg.lam_norm, seed=seed)
    runs["attack"] = fedavg_coalitions(_with_batch(fed, atk.X, labels), **train)
    runs["real data"] = fedavg_coalitions(_with_batch(fed, real_batch(fed, labels, seed), labels), **train)
    rows, arms, flags, scores, curves, mc = [], [], [], [], [], []
    full, no_adv = 2 ** n - 1, 2 ** n - 2
    for arm, run in runs.items():
        U = accuracy(run.W, *fed.val)
        test = accuracy(run.W, *fed.test)
        for ev, phi in evaluate(U, n, cfg.mc_permutations, seed).items():
            sh = share(phi)
            rows += [dict(seed=seed, arm=arm, evaluator=ev, client=k, value=phi[k], share=sh[k]) for k in range(n)]
        exact = exact_shapley(U)
        for T in sorted({5, 10, 20, 40, 80, 160, cfg.mc_permutations}):  # the curve, and the evaluators' T
            err = np.abs(monte_carlo_shapley(U, n, T, seed=seed) - exact).max()
            mc.append(dict(seed=seed, arm=arm, permutations=T, max_error=err))
        arms.append(dict(seed=seed, arm=arm, test_acc=test[full], val_acc=U[full],
                         test_acc_without_adversary=test[no_adv]))
        rep = defence_report(run.updates, cfg.krum_f, cfg.fg_threshold, cfg.clip_factor)
        krum_thr = np.sort(rep["krum"], axis=1)[:, n - cfg.krum_f - 1][:, None]
        ratios = {"Krum": rep["krum"] / krum_thr, "FoolsGold": rep["foolsgold"], "norm clip": rep["norm"]}
        for d, key in zip(DEFENCES, ("krum_flag", "foolsgold_flag", "norm_flag")):
            flags += [dict(seed=seed, arm=arm, defence=d, client=k, flag_rate=rep[key][:, k].mean())
                      for k in range(n)]
            scores += [dict(seed=seed, arm=arm, defence=d, round=t, client=k, score=ratios[d][t, k])
                       for t in range(cfg.rounds) for k in range(n)]
        for t, W in enumerate(run.history):
            curves.append(dict(seed=seed, arm=arm, round=t, val_acc=accuracy(W, *fed.val),
                               test_acc=accuracy(W, *fed.test)))
    return dict(values=rows, arms=arms, flags=flags, scores=scores, curves=curves, mc=mc, attack=atk, fed=fed)


def run_experiment(cfg: Config, seeds: list[int] | None = None) -> Results:
    """Run every seed (default ``cfg.seed .. cfg.seed + n_seeds - 1``) and gather the tables."""
    seeds = list(range(cfg.seed, cfg.seed + cfg.n_seeds)) if seeds is None else list(seeds)
    parts = [run_seed(cfg, s) for s in progress(seeds, desc="seeds")]
    cat = lambda key: pd.DataFrame([r for p in parts for r in p[key]])  # noqa: E731
    return Results(values=cat("values"), arms=cat("arms"), flags=cat("flags"), scores=cat("scores"),
                   curves=cat("curves"), mc=cat("mc"), attacks={s: p["attack"] for s, p in zip(seeds, parts)},
                   feds={s: p["fed"] for s, p in zip(seeds, parts)})


def adversary_shares(res: Results) -> pd.DataFrame:
    """The adversary's (client 0) normalised share: rows seed, columns (evaluator, arm)."""
    v = res.values[res.values.client == 0]
    return v.pivot_table(index="seed", columns=["evaluator", "arm"], values="share")


def benign_kendall(res: Results, evaluator: str = "Shapley", arm: str = "attack") -> pd.Series:
    """Kendall tau-b between the benign clients' values in the honest run and in ``arm``, per seed."""
    v = res.values[(res.values.client > 0) & (res.values.evaluator == evaluator)]
    out = {}
    for s, g in v.groupby("seed"):
        a = g[g.arm == "honest"].sort_values("client").value.to_numpy()
        b = g[g.arm == arm].sort_values("client").value.to_numpy()
        tau = kendalltau(a, b).statistic
        out[s] = 1.0 if np.isnan(tau) else float(tau)
    return pd.Series(out, name=f"tau {arm}")


def adversary_flag_rates(res: Results, arm: str = "attack") -> pd.DataFrame:
    """Fraction of rounds each defence flags the adversary: rows seed, columns defence."""
    f = res.flags[(res.flags.client == 0) & (res.flags.arm == arm)]
    return f.pivot_table(index="seed", columns="defence", values="flag_rate")[list(DEFENCES)]
