"""Metrics of a policy on fixed evaluation inputs, and the exact rows of pi_ref and pi*."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from minirepro.papers.tbpo.mdp import (
    TokenMDP,
    exact_metrics,
    sample_responses,
    sequence_reward,
    soft_bellman,
)
from minirepro.papers.tbpo.policy import TablePolicy, log_reference, previous_tokens, token_stats


@torch.no_grad()
def rollout(policy: nn.Module, mdp: TokenMDP, prompts: torch.Tensor,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample responses from ``policy`` for ``prompts`` ``(n,)``: ``tokens`` ``(n, T)`` (EOS-padded)
    and ``lengths`` ``(n,)``."""
    n, T, eos = prompts.shape[0], mdp.horizon, mdp.eos
    ids = prompts[:, None]
    alive = torch.ones(n, dtype=torch.bool)
    lengths = torch.zeros(n, dtype=torch.long)
    for _ in range(T):
        a = torch.multinomial(policy.next_logp(ids).exp(), 1, generator=generator).squeeze(1)
        a = torch.where(alive, a, torch.full_like(a, eos))
        lengths += alive.long()
        alive &= a != eos
        ids = torch.cat([ids, a[:, None]], dim=1)
    return ids[:, 1:], lengths


def distinct_n(tokens: np.ndarray, lengths: np.ndarray, n: int = 3, eos: int | None = None) -> float:
    """Distinct-n: unique n-grams / all n-grams over a set of responses (EOS excluded)."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    grams: list[tuple[int, ...]] = []
    for row, ln in zip(np.asarray(tokens), np.asarray(lengths)):
        body = [int(a) for a in row[:ln] if eos is None or a != eos]
        grams.extend(tuple(body[i:i + n]) for i in range(len(body) - n + 1))
    return len(set(grams)) / len(grams) if grams else 0.0


@dataclass
class EvalSet:
    """Fixed evaluation inputs: prefixes from pi* (for the per-state KL) and rollout prompts."""

    star_prompts: torch.Tensor
    star_tokens: torch.Tensor
    star_lengths: torch.Tensor
    log_star: torch.Tensor      # (T, V, V + 1)
    rollout_prompts: torch.Tensor
    seed: int = 0
    log_ref: torch.Tensor = field(default=None)  # type: ignore[assignment]


def make_eval_set(mdp: TokenMDP, n: int, seed: int = 12345, log_ref: torch.Tensor | None = None) -> EvalSet:
    """Draw ``n`` responses from pi* (their prefixes are pi*'s state distribution) and ``n``
    rollout prompts, once, so every method is scored on the same inputs.

    ``log_ref``: the run's :func:`~minirepro.papers.tbpo.policy.log_reference` of ``mdp``
    (computed here when ``None``)."""
    _, _, pi_star = soft_bellman(mdp)
    rng = np.random.default_rng(seed)
    x, y, ln = sample_responses(mdp, pi_star, n, rng)
    px = rng.choice(mdp.n_tokens, size=n, p=mdp.prompt_probs)
    return EvalSet(torch.as_tensor(x), torch.as_tensor(y), torch.as_tensor(ln),
                   torch.log(torch.as_tensor(pi_star, dtype=torch.float32).clamp_min(1e-30)),
                   torch.as_tensor(px), seed, log_reference(mdp) if log_ref is None else log_ref)


@torch.no_grad()
def evaluate(policy: nn.Module, mdp: TokenMDP, ev: EvalSet) -> dict[str, float]:
    """Metrics of a policy on the fixed evaluation set.

    ``state_kl``: mean over pi*'s sampled states of KL(pi(.|s) || pi*(.|s)); on rollouts of the
    policy itself: ``reward`` (mean true R), ``kl_ref`` (mean sequence KL(pi || pi_ref), summed
    per-state KLs), ``entropy`` (mean summed per-state entropy, nats), ``distinct3``, ``length``.
    """
    T = mdp.horizon
    logp, _ = policy(ev.star_prompts, ev.star_tokens)
    prev = previous_tokens(ev.star_prompts, ev.star_tokens, mdp.n_tokens)
    lstar = ev.log_star[torch.arange(T)[None, :], prev]
    mask = (torch.arange(T)[None, :] < ev.star_lengths[:, None]).float()
    kl = (logp.exp() * (logp - lstar)).sum(-1)
    state_kl = float((kl * mask).sum() / mask.sum())
    gen = torch.Generator().manual_seed(ev.seed)
    toks, lens = rollout(policy, mdp, ev.rollout_prompts, gen)
    s = token_stats(policy, ev.log_ref, ev.rollout_prompts, toks, lens)
    reward = sequence_reward(mdp, ev.rollout_prompts.numpy(), toks.numpy(), lens.numpy())
    return {"state_kl": state_kl, "reward": float(reward.mean()),
            "kl_ref": float(s["kl_pi_ref"].sum(1).mean()), "entropy": float(s["entropy"].sum(1).mean()),
            "distinct3": distinct_n(toks.numpy(), lens.numpy(), 3, eos=mdp.eos),
            "length": float(lens.float().mean())}


def exact_rows(mdp: TokenMDP, ev: EvalSet) -> pd.DataFrame:
    """Exact metrics (DP) of the reference policy and of pi*, plus their distinct-3 from
    rollouts on the evaluation prompts (names ``"reference"`` and ``"optimum"``)."""
    _, _, pi_star = soft_bellman(mdp)
    rows = []
    for name, table in (("reference", mdp.ref_table()), ("optimum", pi_star)):
        m = exact_metrics(mdp, table, target=pi_star)
        gen = torch.Generator().manual_seed(ev.seed)
        toks, lens = rollout(TablePolicy(table), mdp, ev.rollout_prompts, gen)
        rows.append({"method": name, "state_kl": m["state_kl"], "reward": m["reward"],
                     "kl_ref": m["kl_ref"], "entropy": m["entropy"],
                     "distinct3": distinct_n(toks.numpy(), lens.numpy(), 3, eos=mdp.eos),
                     "length": m["mean_length"]})
    return pd.DataFrame(rows)
