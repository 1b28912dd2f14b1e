"""Losses: CLIP's symmetric InfoNCE, Liang's gap penalty and the SSA term, batched over members.

Tensors carry a leading *member* axis (an ensemble of independent runs trained
together): embeddings ``(M, n, d)``, logit scales ``(M,)``; each loss returns ``(M,)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check(x: torch.Tensor, y: torch.Tensor) -> None:
    if x.ndim != 3 or y.ndim != 3:
        raise ValueError(f"embeddings must be (members, n, d), got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.shape != y.shape:
        raise ValueError(f"paired embeddings must have the same shape: {tuple(x.shape)} vs {tuple(y.shape)}")
    if x.shape[1] < 2:
        raise ValueError("InfoNCE needs at least two pairs (one positive and one negative)")


def info_nce(x: torch.Tensor, y: torch.Tensor, logit_scale: torch.Tensor) -> torch.Tensor:
    """Eq. (ssa-eq-infonce): CLIP's symmetric InfoNCE, the mean of the x->y and y->x
    cross-entropies of the logits ``exp(logit_scale) * x y^T`` with the diagonal as targets.

    ``x, y``: ``(M, n, d)`` unit embeddings (pair i is row i); ``logit_scale``: ``(M,)``, the
    log inverse temperature. Returns ``(M,)`` in nats.
    """
    _check(x, y)
    logits = torch.exp(logit_scale)[:, None, None] * (x @ y.transpose(1, 2))
    target = torch.arange(x.shape[1], device=x.device)
    m, n = logits.shape[:2]
    l_xy = F.cross_entropy(logits.reshape(m * n, n), target.repeat(m), reduction="none").view(m, n)
    l_yx = F.cross_entropy(logits.transpose(1, 2).reshape(m * n, n), target.repeat(m),
                           reduction="none").view(m, n)
    return 0.5 * (l_xy.mean(1) + l_yx.mean(1))


def gap_penalty(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Eq. (ssa-eq-penalty) [reconstruction]: the gap-penalty term ||μ_x - μ_y||², the squared
    distance between the batch means of the unit embeddings (Liang et al.'s gap). ``(M, n, d)`` -> ``(M,)``."""
    _check(x, y)
    return ((x.mean(1) - y.mean(1)) ** 2).sum(-1)


def project_normalize(x: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """Eq. (ssa-eq-ssp)'s P̂_S x: coordinates of ``x`` (``(M, n, d)``) in the shared basis (``(M, d, k)``,
    orthonormal columns, zero columns allowed as padding), renormalised: ``(M, n, k)``."""
    return F.normalize(x @ basis, dim=-1, eps=1e-8)


def ssa_loss(x: torch.Tensor, y: torch.Tensor, logit_scale: torch.Tensor,
             basis: torch.Tensor) -> torch.Tensor:
    """Eq. (ssa-eq-ssa) [reconstruction]: SSA's extra term, InfoNCE(P̂_S x, P̂_S y) on the
    projections onto the shared subspace S (``basis``, ``(M, d, k)``), with no term on the gap. ``(M,)``."""
    _check(x, y)
    return info_nce(project_normalize(x, basis), project_normalize(y, basis), logit_scale)
