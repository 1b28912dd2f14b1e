"""The chapter's comparison: fit the policy to pi_ref once, then train every method on every seed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from minirepro.core import set_seed
from minirepro.papers.tbpo.config import Config
from minirepro.papers.tbpo.evaluation import evaluate, exact_rows, make_eval_set
from minirepro.papers.tbpo.losses import METHODS, generic_bregman_ell, sequence_margin
from minirepro.papers.tbpo.mdp import TokenMDP, make_preferences, make_token_preferences
from minirepro.papers.tbpo.policy import fit_reference, log_reference, token_stats
from minirepro.papers.tbpo.train import prefs_to_tensors, train_method

# what a reused fit depends on: the testbed and the policy's shape and fit
FIT_FIELDS = ("n_tokens", "horizon", "beta", "reward_scale", "eos_prob", "mdp_seed", "hidden", "layers",
              "heads", "fit_steps")


@dataclass
class Experiment:
    """Everything one comparison produced."""

    cfg: Config
    mdp: TokenMDP
    evals: pd.DataFrame
    curves: pd.DataFrame
    exact: pd.DataFrame
    fit_losses: list[float]
    init: dict[str, float]
    init_state: dict[str, torch.Tensor]
    prefs: dict[str, torch.Tensor]  # the first seed's preference pairs
    log_ref: torch.Tensor           # (V, V + 1) log pi_ref, computed once for the whole run


def run_experiment(cfg: Config, methods: tuple[str, ...] | None = None,
                   start: Experiment | None = None) -> Experiment:
    """[reconstruction] the comparison: fit the policy to pi_ref once, then train every method.

    Every method trains for the seeds ``cfg.seeds`` (``seed .. seed + n_seeds - 1``).

    ``start``: an experiment on the same testbed whose fitted starting policy is reused (the fit is
    deterministic given ``mdp_seed``, so this only saves its time).

    Seeds change the preference data (4k noisy BT pairs by default; ``cfg.labels`` chooses
    sequence-level or token-level Bradley-Terry labels) and the minibatch order;
    the testbed (``mdp_seed``), log pi_ref and the fitted starting policy are shared.
    """
    methods = tuple(methods or cfg.methods)
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; expected one of {list(METHODS)}")
    mdp = cfg.make_mdp()
    log_ref = log_reference(mdp)
    ev = make_eval_set(mdp, cfg.n_eval, log_ref=log_ref)
    set_seed(cfg.mdp_seed)
    base = cfg.make_policy()
    if start is not None:
        if any(getattr(start.cfg, k) != getattr(cfg, k) for k in FIT_FIELDS):
            raise ValueError("start was run on a different testbed or policy; its fit cannot be reused")
        base.load_state_dict(start.init_state)
        fit = list(start.fit_losses)
    else:
        fit = fit_reference(base, mdp, cfg.fit_steps, seed=cfg.mdp_seed, log_ref=log_ref)
    init_state = {k: v.clone() for k, v in base.state_dict().items()}
    base.eval()
    init = evaluate(base, mdp, ev)
    evals, curves, first = [], [], None
    for s in cfg.seeds:
        draw = make_token_preferences if cfg.labels == "token" else make_preferences
        prefs = prefs_to_tensors(draw(mdp, cfg.n_pairs, np.random.default_rng(s)))
        first = prefs if first is None else first
        for m in methods:
            e, c = train_method(m, init_state, mdp, prefs, ev, cfg, s)
            evals.append(e)
            curves.append(c)
    return Experiment(cfg, mdp, pd.concat(evals, ignore_index=True), pd.concat(curves, ignore_index=True),
                      exact_rows(mdp, ev), fit, init, init_state, first, log_ref)


def logistic_vs_dpo(ex: Experiment, n: int = 256) -> dict[str, float]:
    """Eqs. (tbpo-eq-bregman, tbpo-eq-dpo): check that the logistic member is DPO, on n pairs.

    On ``n`` real pairs and the fitted policy, the largest
    absolute difference between DPO's per-pair loss ``-log sigmoid(beta m)`` and the generic
    Bregman objective ``c_h [h'(R) R - h(R) - h'(1/R)]`` of the logistic ``h``, computed from
    ``h`` by autograd (:func:`losses.generic_bregman_ell`, no closed form), and between their
    slopes in the margin ``m`` (finite differences of the generic form against DPO's
    ``-beta sigmoid(-beta m)``)."""
    policy = ex.cfg.make_policy(ex.init_state)
    k = min(n, ex.prefs["prompt"].shape[0])
    x = ex.prefs["prompt"][:k]
    with torch.no_grad():
        s = token_stats(policy, ex.log_ref, torch.cat([x, x]),
                        torch.cat([ex.prefs["chosen"][:k], ex.prefs["rejected"][:k]]),
                        torch.cat([ex.prefs["len_chosen"][:k], ex.prefs["len_rejected"][:k]]))
    m = sequence_margin(s["lr"][:k], s["mask"][:k], s["lr"][k:], s["mask"][k:]).to(torch.float64)
    b = ex.cfg.beta
    dpo = -torch.nn.functional.logsigmoid(b * m)
    generic = generic_bregman_ell(-b * m, "logistic")
    eps = 1e-5
    slope = (generic_bregman_ell(-b * (m + eps), "logistic") - generic_bregman_ell(-b * (m - eps), "logistic")) / (2 * eps)
    return {"loss": float((generic - dpo).abs().max()),
            "grad": float((slope + b * torch.sigmoid(-b * m)).abs().max()),
            "dpo_loss": float(dpo.mean()), "n_pairs": int(k)}
