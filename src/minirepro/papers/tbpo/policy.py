"""The tiny causal-LM policy, its per-token statistics and its fit to pi_ref.

The policy is a ``transformers`` GPT-2 causal LM built from a config (one layer, a few
thousand weights; never downloaded). It reads ``[x, y_0, ..., y_{T-2}]`` and its logits at
position ``t`` give ``pi_theta(. | s_t)`` over the ``V + 1`` actions. It conditions on the
whole prefix; the true optimum only needs ``(t, y_{t-1})``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from minirepro.core import progress
from minirepro.papers.tbpo.mdp import TokenMDP, sample_responses


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
        prev = previous_tokens(prompts, tokens, self.n_tokens)
        logp = self.logt[torch.arange(self.horizon)[None, :], prev]
        return logp, torch.zeros(prev.shape)

    @torch.no_grad()
    def next_logp(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1] - 1
        return self.logt[t, ids[:, -1].clamp_max(self.n_tokens - 1)]


def previous_tokens(prompts: torch.Tensor, tokens: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """``(B, T)`` the state's previous token at every position: the prompt, then the response
    shifted by one (an end token, ``>= n_tokens``, read as token 0: no state follows it)."""
    prev = torch.cat([prompts[:, None], tokens[:, :-1]], dim=1)
    return torch.where(prev >= n_tokens, torch.zeros_like(prev), prev)


def log_reference(mdp: TokenMDP) -> torch.Tensor:
    """``(V, V + 1)`` log pi_ref(a | prev) of the testbed, as float32 (computed once per run
    and passed to every step that reads it)."""
    return torch.log(torch.as_tensor(mdp.pi_ref, dtype=torch.float32))


def token_stats(policy: nn.Module, log_ref: torch.Tensor, prompts: torch.Tensor, tokens: torch.Tensor,
                lengths: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-token quantities of responses ``(B, T)`` under ``policy``.

    Returns ``lr`` (log pi/pi_ref of the emitted token), ``mask`` (float, 1 where emitted),
    ``kl_pi_ref`` = KL(pi || pi_ref)(s_t), ``kl_ref_pi`` = KL(pi_ref || pi)(s_t),
    ``entropy`` = H(pi(.|s_t)), ``v`` (the baseline head), ``lp`` (log pi of the emitted token)
    and ``logp`` ``(B, T, V + 1)``.
    ``log_ref`` is ``(V, V + 1)`` log pi_ref (:func:`log_reference`).
    """
    if tokens.ndim != 2 or prompts.shape != tokens.shape[:1] or lengths.shape != prompts.shape:
        raise ValueError(f"expected prompts (B,), tokens (B, T), lengths (B,); got "
                         f"{tuple(prompts.shape)}, {tuple(tokens.shape)}, {tuple(lengths.shape)}")
    logp, v = policy(prompts, tokens)
    V = log_ref.shape[0]
    lref = log_ref[previous_tokens(prompts, tokens, V)]
    T = tokens.shape[1]
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(logp.dtype)
    p = logp.exp()
    lr = (logp - lref).gather(-1, tokens[..., None]).squeeze(-1) * mask
    lp = logp.gather(-1, tokens[..., None]).squeeze(-1) * mask
    return {"lr": lr, "mask": mask, "v": v * mask, "logp": logp, "lp": lp,
            "kl_pi_ref": (p * (logp - lref)).sum(-1) * mask,
            "kl_ref_pi": (lref.exp() * (lref - logp)).sum(-1) * mask,
            "entropy": -(p * logp).sum(-1) * mask}


def fit_reference(policy: Policy, mdp: TokenMDP, steps: int, batch_size: int = 256, lr: float = 3e-3,
                  seed: int = 0, log_ref: torch.Tensor | None = None) -> list[float]:
    """Fit ``policy`` to ``pi_ref`` by minimising ``E_s KL(pi_ref(.|s) || pi_theta(.|s))`` on
    prefixes sampled from ``pi_ref`` (full-distribution cross-entropy). Returns the losses.

    ``log_ref``: the run's :func:`log_reference` of ``mdp`` (computed here when ``None``)."""
    rng = np.random.default_rng(seed)
    log_ref = log_reference(mdp) if log_ref is None else log_ref
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
