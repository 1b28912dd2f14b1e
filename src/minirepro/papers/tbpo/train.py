"""One training loop for every loss: a run of one method from the fitted reference policy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from minirepro.core import progress, set_seed
from minirepro.papers.tbpo.config import Config
from minirepro.papers.tbpo.evaluation import EvalSet, evaluate
from minirepro.papers.tbpo.losses import METHODS, method_loss, sequence_margin
from minirepro.papers.tbpo.mdp import TokenMDP
from minirepro.papers.tbpo.policy import token_stats

# extra evaluations early in training, where the policy moves fastest (a finer frontier)
EARLY_EVALS = (1, 2, 3, 5, 10)


def prefs_to_tensors(prefs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """The preference arrays as torch tensors."""
    return {k: torch.as_tensor(v) for k, v in prefs.items()}


def train_method(method: str, init_state: dict[str, torch.Tensor], mdp: TokenMDP,
                 prefs: dict[str, torch.Tensor], ev: EvalSet, cfg: Config,
                 seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One run: start from the fitted reference policy, optimise ``method``'s loss with Adam.

    Every method gets the same data, minibatch order (from ``seed``), beta, steps and lr.
    ``ev.log_ref`` is the run's log pi_ref (the steps read it, never recompute it).
    Returns ``evals`` (one row per evaluation, step 0 included) and ``curve`` (loss and
    mean margin ``beta m`` at every step).
    """
    set_seed(seed)
    policy = cfg.make_policy(init_state)
    params = list(policy.lm.parameters()) + (list(policy.value.parameters()) if METHODS[method][0] == "tbpo-q" else [])
    opt = torch.optim.Adam(params, lr=cfg.lr)
    order = np.random.default_rng(seed + 1000)
    n = prefs["prompt"].shape[0]
    evals, curve = [], []

    def record(step: int) -> None:
        policy.eval()
        evals.append({"method": method, "seed": seed, "step": step, **evaluate(policy, mdp, ev)})
        policy.train()

    record(0)
    for step in progress(range(1, cfg.steps + 1), desc=f"{method} seed {seed}"):
        idx = torch.as_tensor(order.choice(n, size=min(cfg.batch_size, n), replace=False))
        x = prefs["prompt"][idx]
        toks = torch.cat([prefs["chosen"][idx], prefs["rejected"][idx]])
        lens = torch.cat([prefs["len_chosen"][idx], prefs["len_rejected"][idx]])
        s = token_stats(policy, ev.log_ref, torch.cat([x, x]), toks, lens)
        B = idx.shape[0]
        chosen = {k: v[:B] for k, v in s.items()}
        rejected = {k: v[B:] for k, v in s.items()}
        if "token_win" in prefs:  # token-level labels (the token-BT testbed)
            chosen["win"] = prefs["token_win"][idx]
        loss = method_loss(method, chosen, rejected, cfg)
        opt.zero_grad()
        loss.backward()
        opt.step()
        margin = (cfg.beta * sequence_margin(chosen["lr"], chosen["mask"], rejected["lr"], rejected["mask"])).mean().item()
        curve.append({"method": method, "seed": seed, "step": step, "loss": loss.item(), "margin": margin})
        if step % cfg.eval_every == 0 or step == cfg.steps or step in EARLY_EVALS:
            record(step)
    return pd.DataFrame(evals), pd.DataFrame(curve)
