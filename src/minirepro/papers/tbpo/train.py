"""The tiny causal-LM policy, its fit to pi_ref, one training loop for every loss, metrics.

The policy is a ``transformers`` GPT-2 causal LM built from a config (one layer, a few
thousand weights; never downloaded). It reads ``[x, y_0, ..., y_{T-2}]`` and its logits at
position ``t`` give ``pi_theta(. | s_t)`` over the ``V + 1`` actions. It conditions on the
whole prefix; the true optimum only needs ``(t, y_{t-1})``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from minirepro.core import ScaledConfig, progress, set_seed
from minirepro.papers.tbpo import losses as L
from minirepro.papers.tbpo.mdp import (
    TokenMDP,
    exact_metrics,
    make_mdp,
    make_preferences,
    make_token_preferences,
    sample_responses,
    sequence_reward,
    soft_bellman,
)

# extra evaluations early in training, where the policy moves fastest (a finer frontier)
EARLY_EVALS = (1, 2, 3, 5, 10)

# name on the plots -> (loss kind, Bregman member, lam)
METHODS: dict[str, tuple[str, str, float]] = {
    "DPO": ("dpo", "logistic", 1.0),
    "TDPO": ("tdpo", "logistic", 1.0),
    "Bregman (logistic)": ("bregman", "logistic", 1.0),
    "Bregman (KLIEP)": ("bregman", "kliep", 1.0),
    "Bregman (LSIF)": ("bregman", "lsif", 1.0),
    "Bregman (BA -0.5)": ("bregman", "ba", -0.5),
    "TBPO-Q": ("tbpo-q", "logistic", 1.0),
    "TBPO-A": ("tbpo-a", "logistic", 1.0),
    "IPO": ("ipo", "logistic", 1.0),
    "SimPO": ("simpo", "logistic", 1.0),
}
LABELS: tuple[str, ...] = ("sequence", "token")
TOKEN_METHODS: tuple[str, ...] = ("DPO", "IPO", "SimPO", "TBPO-Q", "TBPO-A")  # the token-level testbed


@dataclass
class Config(ScaledConfig):
    """Sizes of the testbed, the policy and the shared training protocol."""

    n_tokens: int = 6            # V ordinary tokens (+ EOS)
    horizon: int = 6             # T, maximum response length
    beta: float = 1.0            # KL strength of pi* and of every loss
    reward_scale: float = 0.7    # std of the token rewards (BT logit units)
    eos_prob: float = 0.12       # mean pi_ref(EOS | p)
    mdp_seed: int = 0            # the testbed (fixed across training seeds)
    n_pairs: int = 4000          # preference pairs per seed
    hidden: int = 32             # policy width
    layers: int = 1              # transformer blocks
    heads: int = 2               # attention heads
    fit_steps: int = 300         # steps fitting the policy to pi_ref (once)
    steps: int = 150             # preference-optimisation steps per run
    batch_size: int = 64         # pairs per step
    lr: float = 3e-3             # Adam learning rate (all methods)
    tdpo_alpha: float = 0.5      # TDPO's KL weight
    tbpo_member: str = "logistic"  # Bregman member inside TBPO-Q / TBPO-A
    tbpo_lam: float = 1.0        # lam of the BA member (if used)
    eval_every: int = 30         # steps between evaluations (15 before; 30 for the time budget)
    n_eval: int = 256            # rollouts / pi* prefixes per evaluation
    n_seeds: int = 5             # training seeds
    methods: tuple[str, ...] = ("DPO", "TDPO", "TBPO-Q", "TBPO-A")  # KLIEP dropped for time (issue 26)
    labels: str = "sequence"     # preference labels: sequence-level BT on R, or token-level BT on Q*
    simpo_beta: float = 2.0      # SimPO's reward scale (its paper's typical value; not tuned)
    simpo_gamma: float = 1.0     # SimPO's target margin (gamma / beta = 0.5, as in its paper)
    model_name: str | None = None  # LM setting only: a local checkpoint folder used instead of the shipped model

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "smoke": {"n_pairs": 600, "fit_steps": 30, "steps": 10, "eval_every": 5,
                  "n_eval": 64, "n_seeds": 1},
        "book": {},
        "full": {"n_pairs": 16000, "fit_steps": 600, "steps": 600, "eval_every": 30,
                 "n_eval": 1024, "n_seeds": 5, "hidden": 64, "layers": 2},
    }

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; expected names from {list(METHODS)}")
        if self.tbpo_member not in L.MEMBERS:
            raise ValueError(f"tbpo_member must be one of {L.MEMBERS}, got {self.tbpo_member!r}")
        if self.labels not in LABELS:
            raise ValueError(f"labels must be one of {LABELS}, got {self.labels!r}")
        for name in ("n_pairs", "steps", "batch_size", "eval_every", "n_eval", "n_seeds", "fit_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def token_testbed(self) -> Config:
        """The config of the token-level testbed: the same sizes, token-level Bradley-Terry labels
        (on Q*), the methods :data:`TOKEN_METHODS` (IPO and SimPO added, TDPO left out), and an
        evaluation every ``2 * eval_every`` steps (for the time budget)."""
        return dataclasses.replace(self, labels="token", methods=TOKEN_METHODS, eval_every=2 * self.eval_every)

    def make_mdp(self) -> TokenMDP:
        """The testbed this config describes."""
        return make_mdp(self.n_tokens, self.horizon, self.beta, self.reward_scale,
                        self.eos_prob, seed=self.mdp_seed)


class Policy(nn.Module):
    """GPT-2 causal LM policy over ``V + 1`` actions plus a light state-baseline head.

    ``forward(prompts (B,), tokens (B, T))`` returns ``logp`` ``(B, T, V + 1)``
    (log pi_theta(. | s_t)) and ``v`` ``(B, T)``, the TBPO-Q baseline ``V_phi(s_t)``: a linear
    head on the *detached* last hidden state (it cannot reshape the policy's features).
    """

    def __init__(self, n_tokens: int, horizon: int, hidden: int = 32, layers: int = 1, heads: int = 2):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(vocab_size=n_tokens + 1, n_positions=horizon, n_embd=hidden,
                            n_layer=layers, n_head=heads, n_inner=2 * hidden, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=n_tokens,
                            eos_token_id=n_tokens, pad_token_id=None)
        self.lm = GPT2LMHeadModel(config)
        self.value = nn.Linear(hidden, 1)
        nn.init.zeros_(self.value.weight)
        nn.init.zeros_(self.value.bias)
        self.n_tokens, self.horizon = n_tokens, horizon

    def forward(self, prompts: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.cat([prompts[:, None], tokens[:, :-1]], dim=1)
        out = self.lm(input_ids=ids, output_hidden_states=True)
        logp = torch.log_softmax(out.logits, dim=-1)
        v = self.value(out.hidden_states[-1].detach()).squeeze(-1)
        return logp, v

    @torch.no_grad()
    def next_logp(self, ids: torch.Tensor) -> torch.Tensor:
        """``(B, V + 1)`` log pi(. | prefix) for prefixes ``ids`` ``(B, t + 1)``."""
        return torch.log_softmax(self.lm(input_ids=ids).logits[:, -1], dim=-1)


class TablePolicy(nn.Module):
    """A table policy ``(T, V, V + 1)`` with ``Policy``'s interface (tests, exact rows)."""

    def __init__(self, table: np.ndarray):
        super().__init__()
        self.register_buffer("logt", torch.log(torch.as_tensor(table, dtype=torch.float32).clamp_min(1e-30)))
        self.horizon, self.n_tokens = table.shape[0], table.shape[1]

    def forward(self, prompts: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        prev = _prev(prompts, tokens, self.n_tokens)
        logp = self.logt[torch.arange(self.horizon)[None, :], prev]
        return logp, torch.zeros(prev.shape)

    @torch.no_grad()
    def next_logp(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1] - 1
        return self.logt[t, ids[:, -1].clamp_max(self.n_tokens - 1)]


def _prev(prompts: torch.Tensor, tokens: torch.Tensor, n_tokens: int) -> torch.Tensor:
    prev = torch.cat([prompts[:, None], tokens[:, :-1]], dim=1)
    return torch.where(prev >= n_tokens, torch.zeros_like(prev), prev)


def token_stats(policy: nn.Module, log_ref: torch.Tensor, prompts: torch.Tensor, tokens: torch.Tensor,
                lengths: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-token quantities of responses ``(B, T)`` under ``policy``.

    Returns ``lr`` (log pi/pi_ref of the emitted token), ``mask`` (float, 1 where emitted),
    ``kl_pi_ref`` = KL(pi || pi_ref)(s_t), ``kl_ref_pi`` = KL(pi_ref || pi)(s_t),
    ``entropy`` = H(pi(.|s_t)), ``v`` (the baseline head), ``lp`` (log pi of the emitted token)
    and ``logp`` ``(B, T, V + 1)``.
    ``log_ref`` is ``(V, V + 1)`` log pi_ref.
    """
    if tokens.ndim != 2 or prompts.shape != tokens.shape[:1] or lengths.shape != prompts.shape:
        raise ValueError(f"expected prompts (B,), tokens (B, T), lengths (B,); got "
                         f"{tuple(prompts.shape)}, {tuple(tokens.shape)}, {tuple(lengths.shape)}")
    logp, v = policy(prompts, tokens)
    V = log_ref.shape[0]
    lref = log_ref[_prev(prompts, tokens, V)]
    T = tokens.shape[1]
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(logp.dtype)
    p = logp.exp()
    lr = (logp - lref).gather(-1, tokens[..., None]).squeeze(-1) * mask
    lp = logp.gather(-1, tokens[..., None]).squeeze(-1) * mask
    return {"lr": lr, "mask": mask, "v": v * mask, "logp": logp, "lp": lp,
            "kl_pi_ref": (p * (logp - lref)).sum(-1) * mask,
            "kl_ref_pi": (lref.exp() * (lref - logp)).sum(-1) * mask,
            "entropy": -(p * logp).sum(-1) * mask}


def method_loss(method: str, chosen: dict[str, torch.Tensor], rejected: dict[str, torch.Tensor],
                cfg: Config) -> torch.Tensor:
    """Eqs. (tbpo-eq-dpo, tbpo-eq-tdpo, tbpo-eq-bregman, tbpo-eq-token): ``method``'s loss.

    ``method`` is a name in ``METHODS``; ``chosen`` and ``rejected`` are the
    :func:`token_stats` of the preferred and the dispreferred responses; ``chosen["win"]``
    (optional, ``(B, T)``) holds token-level labels, read by TBPO-Q and TBPO-A only.
    IPO and SimPO: Eqs. (tbpo-eq-ipo, tbpo-eq-simpo).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {list(METHODS)}")
    kind, member, lam = METHODS[method]
    b = cfg.beta
    args = (chosen["lr"], chosen["mask"], rejected["lr"], rejected["mask"])
    if kind == "dpo":
        return L.dpo_loss(*args, beta=b)
    if kind == "tdpo":
        return L.tdpo_loss(*args, kl_w=chosen["kl_ref_pi"], kl_l=rejected["kl_ref_pi"], beta=b, alpha=cfg.tdpo_alpha)
    if kind == "bregman":
        return L.bregman_sequence_loss(*args, beta=b, member=member, lam=lam)
    if kind == "ipo":
        return L.ipo_loss(*args, tau=b)
    if kind == "simpo":
        return L.simpo_loss(chosen["lp"], chosen["mask"], rejected["lp"], rejected["mask"],
                            beta=cfg.simpo_beta, gamma=cfg.simpo_gamma)
    if kind == "tbpo-q":
        qw = L.tbpo_q_values(chosen["lr"], chosen["mask"], chosen["v"], b)
        ql = L.tbpo_q_values(rejected["lr"], rejected["mask"], rejected["v"], b)
    else:
        qw = L.tbpo_a_values(chosen["lr"], chosen["mask"], chosen["kl_pi_ref"], b)
        ql = L.tbpo_a_values(rejected["lr"], rejected["mask"], rejected["kl_pi_ref"], b)
    return L.tbpo_token_loss(qw, chosen["mask"], ql, rejected["mask"], member=cfg.tbpo_member, lam=cfg.tbpo_lam,
                             win=chosen.get("win"))


def fit_reference(policy: Policy, mdp: TokenMDP, steps: int, batch_size: int = 256, lr: float = 3e-3,
                  seed: int = 0) -> list[float]:
    """Fit ``policy`` to ``pi_ref`` by minimising ``E_s KL(pi_ref(.|s) || pi_theta(.|s))`` on
    prefixes sampled from ``pi_ref`` (full-distribution cross-entropy). Returns the losses."""
    rng = np.random.default_rng(seed)
    log_ref = torch.log(torch.as_tensor(mdp.pi_ref, dtype=torch.float32))
    opt = torch.optim.Adam(policy.lm.parameters(), lr=lr)
    ref = mdp.ref_table()
    out = []
    for _ in progress(range(steps), desc="fit pi_ref"):
        x, y, n = (torch.as_tensor(a) for a in sample_responses(mdp, ref, batch_size, rng))
        s = token_stats(policy, log_ref, x, y, n)
        loss = s["kl_ref_pi"].sum() / s["mask"].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


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


def make_eval_set(mdp: TokenMDP, n: int, seed: int = 12345) -> EvalSet:
    """Draw ``n`` responses from pi* (their prefixes are pi*'s state distribution) and ``n``
    rollout prompts, once, so every method is scored on the same inputs."""
    _, _, pi_star = soft_bellman(mdp)
    rng = np.random.default_rng(seed)
    x, y, ln = sample_responses(mdp, pi_star, n, rng)
    px = rng.choice(mdp.n_tokens, size=n, p=mdp.prompt_probs)
    return EvalSet(torch.as_tensor(x), torch.as_tensor(y), torch.as_tensor(ln),
                   torch.log(torch.as_tensor(pi_star, dtype=torch.float32).clamp_min(1e-30)),
                   torch.as_tensor(px), seed, torch.log(torch.as_tensor(mdp.pi_ref, dtype=torch.float32)))


@torch.no_grad()
def evaluate(policy: nn.Module, mdp: TokenMDP, ev: EvalSet) -> dict[str, float]:
    """Metrics of a policy on the fixed evaluation set.

    ``state_kl``: mean over pi*'s sampled states of KL(pi(.|s) || pi*(.|s)); on rollouts of the
    policy itself: ``reward`` (mean true R), ``kl_ref`` (mean sequence KL(pi || pi_ref), summed
    per-state KLs), ``entropy`` (mean summed per-state entropy, nats), ``distinct3``, ``length``.
    """
    T = mdp.horizon
    logp, _ = policy(ev.star_prompts, ev.star_tokens)
    prev = _prev(ev.star_prompts, ev.star_tokens, mdp.n_tokens)
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


def prefs_to_tensors(prefs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """The preference arrays as torch tensors."""
    return {k: torch.as_tensor(v) for k, v in prefs.items()}


def train_method(method: str, init_state: dict[str, torch.Tensor], mdp: TokenMDP,
                 prefs: dict[str, torch.Tensor], ev: EvalSet, cfg: Config,
                 seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One run: start from the fitted reference policy, optimise ``method``'s loss with Adam.

    Every method gets the same data, minibatch order (from ``seed``), beta, steps and lr.
    Returns ``evals`` (one row per evaluation, step 0 included) and ``curve`` (loss and
    mean margin ``beta m`` at every step).
    """
    set_seed(seed)
    policy = Policy(mdp.n_tokens, mdp.horizon, cfg.hidden, cfg.layers, cfg.heads)
    policy.load_state_dict(init_state)
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
        margin = (cfg.beta * L.sequence_margin(chosen["lr"], chosen["mask"], rejected["lr"], rejected["mask"])).mean().item()
        curve.append({"method": method, "seed": seed, "step": step, "loss": loss.item(), "margin": margin})
        if step % cfg.eval_every == 0 or step == cfg.steps or step in EARLY_EVALS:
            record(step)
    return pd.DataFrame(evals), pd.DataFrame(curve)


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


TBPOConfig = Config  # the name this package used before issue 28's convention


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


def run_experiment(cfg: Config, methods: tuple[str, ...] | None = None,
                   start: Experiment | None = None) -> Experiment:
    """[reconstruction] the comparison: fit the policy to pi_ref once, then train every method.

    Every method trains for the seeds ``cfg.seeds`` (``seed .. seed + n_seeds - 1``).

    ``start``: an experiment on the same testbed whose fitted starting policy is reused (the fit is
    deterministic given ``mdp_seed``, so this only saves its time).

    Seeds change the preference data (4k noisy BT pairs by default; ``cfg.labels`` chooses
    sequence-level or token-level Bradley-Terry labels) and the minibatch order;
    the testbed (``mdp_seed``) and the fitted starting policy are shared.
    """
    methods = tuple(methods or cfg.methods)
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; expected one of {list(METHODS)}")
    mdp = cfg.make_mdp()
    ev = make_eval_set(mdp, cfg.n_eval)
    set_seed(cfg.mdp_seed)
    base = Policy(mdp.n_tokens, mdp.horizon, cfg.hidden, cfg.layers, cfg.heads)
    if start is not None:
        keys = ("n_tokens", "horizon", "beta", "reward_scale", "eos_prob", "mdp_seed", "hidden", "layers",
                "heads", "fit_steps")
        if any(getattr(start.cfg, k) != getattr(cfg, k) for k in keys):
            raise ValueError("start was run on a different testbed or policy; its fit cannot be reused")
        base.load_state_dict(start.init_state)
        fit = list(start.fit_losses)
    else:
        fit = fit_reference(base, mdp, cfg.fit_steps, seed=cfg.mdp_seed)
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
                      exact_rows(mdp, ev), fit, init, init_state, first)


def logistic_vs_dpo(ex: Experiment, n: int = 256) -> dict[str, float]:
    """Eqs. (tbpo-eq-bregman, tbpo-eq-dpo): check that the logistic member is DPO, on n pairs.

    On ``n`` real pairs and the fitted policy, the largest
    absolute difference between DPO's per-pair loss ``-log sigmoid(beta m)`` and the generic
    Bregman objective ``c_h [h'(R) R - h(R) - h'(1/R)]`` of the logistic ``h``, computed from
    ``h`` by autograd (:func:`losses.generic_bregman_ell`, no closed form), and between their
    slopes in the margin ``m`` (finite differences of the generic form against DPO's
    ``-beta sigmoid(-beta m)``)."""
    mdp, cfg = ex.mdp, ex.cfg
    policy = Policy(mdp.n_tokens, mdp.horizon, cfg.hidden, cfg.layers, cfg.heads)
    policy.load_state_dict(ex.init_state)
    log_ref = torch.log(torch.as_tensor(mdp.pi_ref, dtype=torch.float32))
    k = min(n, ex.prefs["prompt"].shape[0])
    x = ex.prefs["prompt"][:k]
    with torch.no_grad():
        s = token_stats(policy, log_ref, torch.cat([x, x]),
                        torch.cat([ex.prefs["chosen"][:k], ex.prefs["rejected"][:k]]),
                        torch.cat([ex.prefs["len_chosen"][:k], ex.prefs["len_rejected"][:k]]))
    m = L.sequence_margin(s["lr"][:k], s["mask"][:k], s["lr"][k:], s["mask"][k:]).to(torch.float64)
    b = cfg.beta
    dpo = -torch.nn.functional.logsigmoid(b * m)
    generic = L.generic_bregman_ell(-b * m, "logistic")
    eps = 1e-5
    slope = (L.generic_bregman_ell(-b * (m + eps), "logistic") - L.generic_bregman_ell(-b * (m - eps), "logistic")) / (2 * eps)
    return {"loss": float((generic - dpo).abs().max()),
            "grad": float((slope + b * torch.sigmoid(-b * m)).abs().max()),
            "dpo_loss": float(dpo.mean()), "n_pairs": int(k)}
