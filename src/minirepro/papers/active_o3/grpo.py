"""GRPO, written by hand: group-normalised advantages, the PPO-clipped surrogate, the KL penalty.

A sensing answer is a sequence of ``k`` box choices (the "tokens"), drawn without
replacement from the policy's categorical distribution over the action set. The
objective of the paper (§3.3) is

    J = E[ 1/G sum_n 1/k sum_t min(w_nt A_n, clip(w_nt, 1 - eps, 1 + eps) A_n) - beta KL_nt ],

with ``w_nt = pi_theta / pi_old`` per token, ``A_n = (r_n - mean(r)) / std(r)`` within the
group of ``G`` answers to the same canvas, and ``KL_nt`` the unbiased k3 estimate of
``KL(pi_theta || pi_ref)``.
"""

from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (active-o3-eq-advantage): ``A = (r - mean) / (std + eps)`` within each group.

    Args:
        rewards: [B, G] rewards, one row per prompt (canvas), ``G >= 2`` answers each.
    Returns:
        ``(advantages [B, G], zero_variance [B] bool)``. A group whose rewards are all equal
        has no signal: its advantages are exactly 0 and it is flagged (to be logged).
    """
    if rewards.ndim != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [B, G] with G >= 2, got {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards hold a non-finite value")
    mean = rewards.mean(1, keepdim=True)
    std = rewards.std(1, keepdim=True)  # the sample standard deviation, as in GRPO's reference code
    zero = (rewards.max(1).values - rewards.min(1).values) <= 1e-12
    adv = (rewards - mean) / (std + eps)
    return torch.where(zero[:, None], torch.zeros_like(adv), adv), zero


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                      clip: float = 0.2) -> torch.Tensor:
    """Eq. (active-o3-eq-grpo), the clipped term: per token ``min(w A, clip(w, 1 - clip, 1 + clip) A)``, ``w = exp(logp - old_logp)``.

    Args:
        logp, old_logp: [N, k] log-probabilities of the chosen tokens under pi_theta and pi_old.
        adv: [N] one advantage per answer (broadcast over its tokens).
    Returns:
        [N, k] the surrogate per token (to be maximised).
    """
    if logp.shape != old_logp.shape or logp.ndim != 2 or adv.shape != logp.shape[:1]:
        raise ValueError(f"shapes must be logp [N, k], old_logp [N, k], adv [N]; got "
                         f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(adv.shape)}")
    if not clip > 0:
        raise ValueError(f"clip range must be positive, got {clip}")
    w = torch.exp(logp - old_logp)
    a = adv[:, None]
    return torch.minimum(w * a, torch.clamp(w, 1 - clip, 1 + clip) * a)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Eq. (active-o3-eq-kl): the k3 estimate ``exp(ref - logp) - (ref - logp) - 1`` per token.

    It is >= 0 for every sample, 0 where the two policies agree, and its expectation under
    pi_theta is exactly ``KL(pi_theta || pi_ref)``.
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(f"logp and ref_logp must have the same shape, got {tuple(logp.shape)}, {tuple(ref_logp.shape)}")
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor, adv: torch.Tensor,
              clip: float = 0.2, beta: float = 0.01) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. (active-o3-eq-grpo), negated for a minimiser: ``-(1/N) sum_n (1/k) sum_t [surrogate - beta KL]``.

    Returns the loss and a dict with the mean KL and the share of clipped tokens.
    """
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    surr = clipped_surrogate(logp, old_logp, adv, clip)
    kl = kl_k3(logp, ref_logp)
    loss = -(surr - beta * kl).mean(1).mean()
    w = torch.exp(logp - old_logp).detach()
    clipped = ((w < 1 - clip) | (w > 1 + clip)).float().mean()
    return loss, {"kl": float(kl.detach().mean()), "clipped": float(clipped)}


def sample_without_replacement(logits: torch.Tensor, k: int, generator: torch.Generator | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """[reconstruction] Draw ``k`` distinct actions in sequence from ``softmax(logits)`` (the answer's
    ``k`` boxes as ``k`` tokens). ``logits`` [N, A] -> ``(actions [N, k], logp [N, k])``.

    Uses the Gumbel top-k trick: the ``k`` largest of ``logits + Gumbel noise``, in order, have
    the law of ``k`` draws without replacement (Plackett-Luce); a unit test checks the frequencies."""
    if k < 1:
        raise ValueError(f"k (boxes per answer) must be at least 1, got {k}")
    if logits.ndim != 2 or k > logits.shape[1]:
        raise ValueError(f"logits must be [N, A] with A >= k={k}, got {tuple(logits.shape)}")
    u = torch.rand(logits.shape, generator=generator).clamp(1e-12, 1 - 1e-7)
    acts = (logits - torch.log(-torch.log(u))).topk(k, dim=1).indices  # Gumbel top-k = sequential draws
    return acts, sequence_logprobs(logits, acts)

def sequence_logprobs(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Eq. (active-o3-eq-grpo), the ratio's parts: log-probability of each token of given answers, [N, A] x [N, k] -> [N, k]: token ``t`` is
    drawn from the softmax over the actions not chosen before it."""
    if actions.ndim != 2 or actions.shape[0] != logits.shape[0]:
        raise ValueError(f"actions must be [N, k] for logits [N, A]; got {tuple(actions.shape)}, {tuple(logits.shape)}")
    n, k = actions.shape
    prev = torch.zeros(n, k, logits.shape[1], dtype=torch.bool)
    for t in range(1, k):
        prev[:, t] = prev[:, t - 1].scatter(1, actions[:, t - 1:t], True)
    lp = torch.log_softmax(logits[:, None, :].masked_fill(prev, float("-inf")), dim=2)
    return lp.gather(2, actions[:, :, None])[:, :, 0]


def greedy(logits: torch.Tensor, k: int) -> torch.Tensor:
    """[reconstruction] Greedy decoding at evaluation: the ``k`` most likely distinct actions, [N, A] -> [N, k]."""
    if k < 1:
        raise ValueError(f"k (boxes per answer) must be at least 1, got {k}")
    return logits.topk(k, dim=1).indices
