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
BOOST = 3.0  # the planted attacker of Krum and clipping: the adversary's honest update times BOOST
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


def _federation(cfg: Config, seed: int) -> Federation:
    set_seed(seed)
    return make_federation(seed, cfg.n_benign, cfg.per_class, cfg.rare_per_class, cfg.n_val,
                           cfg.proxy_per_class)


def _train(cfg: Config) -> dict:
    return dict(rounds=cfg.rounds, local_steps=cfg.local_steps, lr=cfg.lr, weight_decay=cfg.weight_decay)


def _craft(cfg: Config, fed: Federation, honest_history: np.ndarray, seed: int) -> tuple[AttackResult, np.ndarray]:
    """The crafted batch and its labels, optimised against the honest run's global models."""
    targets = target_classes(honest_history[-1], fed.proxy, fed.clients[0][1])
    labels = np.sort(np.resize(targets, cfg.n_synthetic))
    atk = craft_batch(fed.clients[0], fed.proxy, honest_history, len(fed.clients), labels,
                      latent_dim=cfg.latent_dim, steps=cfg.attack_steps, lr=cfg.attack_lr,
                      local_steps=cfg.local_steps, local_lr=cfg.lr, weight_decay=cfg.weight_decay,
                      lam_util=cfg.lam_util, lam_cos=cfg.lam_cos, lam_norm=cfg.lam_norm, seed=seed)
    return atk, labels


def _flag_rows(cfg: Config, seed: int, arm: str, updates: np.ndarray) -> tuple[list[dict], dict]:
    rep = defence_report(updates, cfg.krum_f, cfg.fg_threshold, cfg.clip_factor)
    rows = [dict(seed=seed, arm=arm, defence=d, client=k, flag_rate=rep[key][:, k].mean())
            for d, key in zip(DEFENCES, ("krum_flag", "foolsgold_flag", "norm_flag"))
            for k in range(updates.shape[1])]
    return rows, rep


def run_seed(cfg: Config, seed: int) -> dict:
    """One seed: craft the batch on the honest trajectory, then train all 2**n coalitions per arm."""
    fed = _federation(cfg, seed)
    train = _train(cfg)
    runs = {"honest": fedavg_coalitions(fed.clients, **train)}
    n = len(fed.clients)
    atk, labels = _craft(cfg, fed, runs["honest"].history, seed)
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
        rows_f, rep = _flag_rows(cfg, seed, arm, run.updates)
        flags += rows_f
        krum_thr = np.sort(rep["krum"], axis=1)[:, n - cfg.krum_f - 1][:, None]
        ratios = {"Krum": rep["krum"] / krum_thr, "FoolsGold": rep["foolsgold"], "norm clip": rep["norm"]}
        for d in DEFENCES:
            scores += [dict(seed=seed, arm=arm, defence=d, round=t, client=k, score=ratios[d][t, k])
                       for t in range(cfg.rounds) for k in range(n)]
        for t, W in enumerate(run.history):
            curves.append(dict(seed=seed, arm=arm, round=t, val_acc=accuracy(W, *fed.val),
                               test_acc=accuracy(W, *fed.test)))
    return dict(values=rows, arms=arms, flags=flags, scores=scores, curves=curves, mc=mc, attack=atk, fed=fed)


def run_experiment(cfg: Config) -> Results:
    """Run every seed of ``cfg.seeds`` and gather the tables."""
    seeds = cfg.seeds
    parts = [run_seed(cfg, s) for s in progress(seeds, desc="seeds")]
    cat = lambda key: pd.DataFrame([r for p in parts for r in p[key]])  # noqa: E731
    return Results(values=cat("values"), arms=cat("arms"), flags=cat("flags"), scores=cat("scores"),
                   curves=cat("curves"), mc=cat("mc"), attacks={s: p["attack"] for s, p in zip(seeds, parts)},
                   feds={s: p["fed"] for s, p in zip(seeds, parts)})


def planted_updates(updates: np.ndarray, defence: str) -> np.ndarray:
    """[reconstruction] the positive control of a defence: the honest run's updates (R, n, ...)
    with the attacker each defence is built to catch planted as client 0: for Krum and clipping
    its update boosted ``BOOST`` times (a model-boosting attacker); for FoolsGold a sybil (client 1
    sends client 0's update, so their histories coincide)."""
    u = np.array(updates, dtype=float, copy=True)
    if defence == "FoolsGold":
        u[:, 1] = u[:, 0]
    elif defence in DEFENCES:
        u[:, 0] *= BOOST
    else:
        raise ValueError(f"unknown defence {defence!r}; expected one of {DEFENCES}")
    return u


def defence_seed(cfg: Config, seed: int) -> list[dict]:
    """One seed of the defence study: the grand coalition alone (the defences see only it), honest
    and attacking (the batch crafted as in :func:`run_seed`), and each defence's planted attacker
    (:func:`planted_updates`, arm ``"planted"``); each defence's flag rate per client and arm
    (rows seed, arm, defence, client, flag_rate)."""
    fed = _federation(cfg, seed)
    grand = np.ones((1, len(fed.clients)), dtype=bool)
    honest = fedavg_coalitions(fed.clients, masks=grand, **_train(cfg))
    atk, labels = _craft(cfg, fed, honest.history, seed)
    attack = fedavg_coalitions(_with_batch(fed, atk.X, labels), masks=grand, **_train(cfg))
    rows = [r for arm, run in (("honest", honest), ("attack", attack)) for r in _flag_rows(cfg, seed, arm, run.updates)[0]]
    for d in DEFENCES:
        rows += [r for r in _flag_rows(cfg, seed, "planted", planted_updates(honest.updates, d))[0] if r["defence"] == d]
    return rows


def run_defences(cfg: Config) -> pd.DataFrame:
    """The defence study over ``cfg.defence_seeds`` (more seeds than the valuation, since only the
    grand coalition is trained): rows seed, arm, defence, client, flag_rate."""
    return pd.DataFrame([r for s in progress(cfg.defence_seeds, desc="defence seeds") for r in defence_seed(cfg, s)])


def flag_rise(flags: pd.DataFrame, defence: str) -> pd.DataFrame:
    """Per seed, for one defence: the adversary's flag rate honest and under the attack, their
    difference (``rise``), the planted attacker's rate, and the benign clients' mean rate in the
    honest and the attack run."""
    f = flags[flags.defence == defence]
    adv = f[f.client == 0].pivot_table(index="seed", columns="arm", values="flag_rate")
    ben = f[f.client > 0].groupby(["seed", "arm"]).flag_rate.mean().unstack("arm")
    return pd.DataFrame({"honest": adv["honest"], "attack": adv["attack"], "rise": adv["attack"] - adv["honest"],
                         "planted": adv["planted"], "benign honest": ben["honest"], "benign attack": ben["attack"]})


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
