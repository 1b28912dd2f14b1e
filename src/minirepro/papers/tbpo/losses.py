"""Preference losses on per-token log-ratios: DPO, TDPO, the Bregman family, TBPO-Q/-A.

Every loss takes, for the chosen (``w``) and rejected (``l``) responses of ``B`` pairs,

- ``lr_w``, ``lr_l``: ``(B, T)`` per-token log-ratios ``log pi_theta(a_t|s_t) - log pi_ref(a_t|s_t)``,
- ``mask_w``, ``mask_l``: ``(B, T)`` 1 where a token was emitted, 0 on padding,

and returns the batch-mean loss (a scalar tensor). Padding never contributes: every
quantity is multiplied by its mask before it is summed.

Bregman density-ratio matching (BPO, sequence level). With the model ratio
``R_theta = exp(-beta m)``, ``m = sum_t lr_w - sum_t lr_l``, and a convex ``h``, matching
``R_theta`` to ``R_data = p(y_l > y_w) / p(y_w > y_l)`` in Bregman divergence gives the
per-pair loss (constants dropped)

    l_h(R) = c_h [ h'(R) R - h(R) - h'(1/R) ],     c_h = 1 / (4 h''(1)),

minimised at ``R_theta = R_data`` for every ``h``. ``c_h`` makes every member's slope at
``m = 0`` equal DPO's; with the logistic ``h`` the loss *is* DPO's ``-log sigmoid(beta m)``.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F

MEMBERS: tuple[str, ...] = ("logistic", "kliep", "lsif", "ba")

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


def _check_member(member: str, lam: float) -> None:
    if member not in MEMBERS:
        raise ValueError(f"unknown Bregman member {member!r}; expected one of {', '.join(MEMBERS)}")
    if member == "ba" and (lam <= -1 or lam == 0):
        raise ValueError(f"the BA member needs lam > -1 and lam != 0, got {lam}")


def bregman_h(R: torch.Tensor, member: str, lam: float = 1.0) -> torch.Tensor:
    """Eq. (tbpo-eq-members): the convex generator ``h(R)`` of a member (``R > 0``, any shape).

    logistic ``R log R - (1 + R) log(1 + R)``; kliep ``R log R - R``; lsif ``(R - 1)^2``;
    ba (basu power) ``(R^(lam + 1) - R) / lam``.
    """
    _check_member(member, lam)
    if member == "logistic":
        return R * torch.log(R) - (1 + R) * torch.log1p(R)
    if member == "kliep":
        return R * torch.log(R) - R
    if member == "lsif":
        return (R - 1) ** 2
    return (R ** (lam + 1) - R) / lam


def bregman_scale(member: str, lam: float = 1.0) -> float:
    """Eq. (tbpo-eq-members): ``c_h = 1 / (4 h''(1))``, giving every member DPO's slope at m = 0."""
    _check_member(member, lam)
    h2 = {"logistic": 0.5, "kliep": 1.0, "lsif": 2.0}.get(member, lam + 1.0)
    return 1.0 / (4.0 * h2)


def bregman_ell(log_R: torch.Tensor, member: str, lam: float = 1.0) -> torch.Tensor:
    """Eq. (tbpo-eq-bregman) in closed form: per-pair loss, elementwise in ``log R``.

    The tractable loss ``c_h [h'(R) R - h(R) - h'(1/R)]`` with constants dropped, computed
    from ``log R`` for stability.

    logistic: ``log(1 + R)`` (= DPO's ``-log sigmoid(beta m)`` when ``log R = -beta m``);
    kliep: ``(R + log R) / 4``; lsif: ``(R^2 - 2 / R) / 8``;
    ba: ``(R^(lam + 1) - (lam + 1) / lam R^(-lam)) / (4 (lam + 1))``.
    """
    _check_member(member, lam)
    if member == "logistic":  # log(1 + R), written as DPO writes it, so the two agree bit for bit
        return -F.logsigmoid(-log_R)
    if member == "kliep":
        return (torch.exp(log_R) + log_R) / 4.0
    if member == "lsif":
        return (torch.exp(2 * log_R) - 2 * torch.exp(-log_R)) / 8.0
    return (torch.exp((lam + 1) * log_R) - (lam + 1) / lam * torch.exp(-lam * log_R)) / (4 * (lam + 1))


def generic_bregman_ell(log_R: torch.Tensor, member: str, lam: float = 1.0) -> torch.Tensor:
    """Eq. (tbpo-eq-bregman) computed from ``h`` alone (autograd, float64), elementwise in log R.

    ``c_h [h'(R) R - h(R) - h'(1/R)]`` with ``h'`` by autograd (no closed form used).

    An independent check of :func:`bregman_ell`: the two agree up to an additive constant
    (zero for the logistic member, which is DPO's loss)."""
    R = torch.exp(log_R.detach().to(torch.float64)).requires_grad_(True)
    hp = torch.autograd.grad(bregman_h(R, member, lam).sum(), R)[0]
    Rinv = (1 / R).detach().requires_grad_(True)
    hp_inv = torch.autograd.grad(bregman_h(Rinv, member, lam).sum(), Rinv)[0]
    return (bregman_scale(member, lam) * (hp * R - bregman_h(R, member, lam) - hp_inv)).detach()


def _check_pair(lr_w: torch.Tensor, mask_w: torch.Tensor, lr_l: torch.Tensor,
                mask_l: torch.Tensor, beta: float | None = None) -> None:
    if lr_w.ndim != 2:
        raise ValueError(f"log-ratios must be (B, T), got shape {tuple(lr_w.shape)}")
    for name, x in (("mask_w", mask_w), ("lr_l", lr_l), ("mask_l", mask_l)):
        if x.shape != lr_w.shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(lr_w.shape)} like lr_w")
    if lr_w.shape[0] == 0:
        raise ValueError("empty batch: need at least one pair")
    if beta is not None and not beta > 0:
        raise ValueError(f"beta must be positive, got {beta}")


def sequence_margin(lr_w: torch.Tensor, mask_w: torch.Tensor, lr_l: torch.Tensor,
                    mask_l: torch.Tensor) -> torch.Tensor:
    """Eq. (tbpo-eq-dpo), the margin: ``m = log pi/pi_ref (y_w) - log pi/pi_ref (y_l)``; (B,).

    The per-token log-ratios are summed over emitted tokens.
    """
    _check_pair(lr_w, mask_w, lr_l, mask_l)
    return (lr_w * mask_w).sum(1) - (lr_l * mask_l).sum(1)


def dpo_loss(lr_w: torch.Tensor, mask_w: torch.Tensor, lr_l: torch.Tensor, mask_l: torch.Tensor,
             beta: float) -> torch.Tensor:
    """Eq. (tbpo-eq-dpo): DPO, ``mean_B -log sigmoid(beta m)``; a scalar."""
    _check_pair(lr_w, mask_w, lr_l, mask_l, beta)
    return -F.logsigmoid(beta * sequence_margin(lr_w, mask_w, lr_l, mask_l)).mean()


def bregman_sequence_loss(lr_w: torch.Tensor, mask_w: torch.Tensor, lr_l: torch.Tensor,
                          mask_l: torch.Tensor, beta: float, member: str = "logistic",
                          lam: float = 1.0) -> torch.Tensor:
    """Eq. (tbpo-eq-bregman), sequence level (BPO): mean_B l_h(R_theta), log R_theta = -beta m."""
    _check_pair(lr_w, mask_w, lr_l, mask_l, beta)
    log_R = -beta * sequence_margin(lr_w, mask_w, lr_l, mask_l)
    return bregman_ell(log_R, member, lam).mean()


def tdpo_loss(lr_w: torch.Tensor, mask_w: torch.Tensor, lr_l: torch.Tensor, mask_l: torch.Tensor,
              kl_w: torch.Tensor, kl_l: torch.Tensor, beta: float, alpha: float = 0.5) -> torch.Tensor:
    """Eq. (tbpo-eq-tdpo): TDPO2, ``-log sigmoid(beta m - alpha (beta D_l - sg(beta D_w)))``.

    ``kl_w``, ``kl_l``: ``(B, T)`` per-state ``KL(pi_ref(.|s_t) || pi_theta(.|s_t))``;
    ``D = sum_t mask_t kl_t`` is the sequential KL; ``sg`` stops the gradient.
    """
    _check_pair(lr_w, mask_w, lr_l, mask_l, beta)
    if kl_w.shape != lr_w.shape or kl_l.shape != lr_w.shape:
        raise ValueError("kl_w and kl_l must have the shape of lr_w")
    D_w = (kl_w * mask_w).sum(1)
    D_l = (kl_l * mask_l).sum(1)
    delta = beta * D_l - (beta * D_w).detach()
    u = beta * sequence_margin(lr_w, mask_w, lr_l, mask_l)
    return -F.logsigmoid(u - alpha * delta).mean()


def ipo_loss(lr_w: torch.Tensor, mask_w: torch.Tensor, lr_l: torch.Tensor, mask_l: torch.Tensor,
             tau: float) -> torch.Tensor:
    """Eq. (tbpo-eq-ipo): IPO (Azar et al. 2024), ``mean_B (m - 1 / (2 tau))^2``; a scalar.

    ``m`` is the log-ratio margin of :func:`sequence_margin`. [reconstruction] in this book
    ``tau`` is the chapter's ``beta`` (IPO's regulariser plays the role of DPO's KL strength)."""
    _check_pair(lr_w, mask_w, lr_l, mask_l, tau)
    return ((sequence_margin(lr_w, mask_w, lr_l, mask_l) - 1.0 / (2.0 * tau)) ** 2).mean()


def simpo_loss(lp_w: torch.Tensor, mask_w: torch.Tensor, lp_l: torch.Tensor, mask_l: torch.Tensor,
               beta: float, gamma: float) -> torch.Tensor:
    """Eq. (tbpo-eq-simpo): SimPO (Meng et al. 2024), reference-free and length-normalised; a scalar.

    ``-log sigmoid(beta/|y_w| log pi(y_w) - beta/|y_l| log pi(y_l) - gamma)`` with ``lp``
    ``(B, T)`` the policy's log-probabilities of the emitted tokens (not ratios). [reconstruction]
    ``beta`` and ``gamma`` for this miniature are the paper's typical values, not tuned here.
    """
    _check_pair(lp_w, mask_w, lp_l, mask_l, beta)
    avg_w = (lp_w * mask_w).sum(1) / mask_w.sum(1).clamp_min(1.0)
    avg_l = (lp_l * mask_l).sum(1) / mask_l.sum(1).clamp_min(1.0)
    return -F.logsigmoid(beta * (avg_w - avg_l) - gamma).mean()


def tbpo_q_values(lr: torch.Tensor, mask: torch.Tensor, v: torch.Tensor, beta: float) -> torch.Tensor:
    """Eq. (tbpo-eq-token-values), TBPO-Q: ``q_t = beta log pi/pi_ref + V_phi(s_t)``; (B, T).

    Zero on padding.

    ``beta log pi/pi_ref`` plays ``Q - V`` (an advantage); adding the learned state baseline
    ``V_phi`` gives a Q estimate, so tokens on *different* prefixes can be compared.
    """
    if lr.shape != mask.shape or v.shape != lr.shape:
        raise ValueError(f"lr, mask and v must share a (B, T) shape, got {tuple(lr.shape)}, "
                         f"{tuple(mask.shape)}, {tuple(v.shape)}")
    return (beta * lr + v) * mask


def tbpo_a_values(lr: torch.Tensor, mask: torch.Tensor, kl_pi_ref: torch.Tensor, beta: float) -> torch.Tensor:
    """Eq. (tbpo-eq-token-values), TBPO-A [reconstruction]: mean-zero implicit advantage; (B, T).

    The implicit advantage normalised to mean zero under the policy,

        q_t = beta log pi/pi_ref (a_t|s_t) - sg(beta KL(pi(.|s_t) || pi_ref(.|s_t))),

    since ``E_{a ~ pi}[beta log pi/pi_ref (a|s)] = beta KL(pi || pi_ref)(s)``. No learned baseline.
    ``kl_pi_ref``: ``(B, T)``. (The paper's exact normalisation is not public: a reconstruction.)
    """
    if lr.shape != mask.shape or kl_pi_ref.shape != lr.shape:
        raise ValueError("lr, mask and kl_pi_ref must share a (B, T) shape")
    return (beta * lr - beta * kl_pi_ref.detach()) * mask


def tbpo_token_loss(q_w: torch.Tensor, mask_w: torch.Tensor, q_l: torch.Tensor, mask_l: torch.Tensor,
                    member: str = "logistic", lam: float = 1.0, win: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. (tbpo-eq-token): token-level Bregman matching of chosen and rejected; a scalar.

    Position ``t`` of the chosen response is compared with
    position ``t`` of the rejected one, ``log R_t = -(q_w_t - q_l_t)``, and

        loss = mean_B  sum_t c_t l_h(R_t) / sum_t c_t,     c_t = mask_w_t OR mask_l_t.

    A response that has ended contributes ``q = 0`` (terminal value) at later positions,
    so responses of unequal length are compared up to the longer one's end.

    ``win`` ``(B, T)`` (optional; token-level labels): the probability, or the 0/1 label, that
    the ``w`` response wins position ``t``; the position's loss is then
    ``win l_h(R_t) + (1 - win) l_h(1 / R_t)``. ``None``: ``w`` wins every position (the
    sequence label given to every token).
    """
    _check_pair(q_w, mask_w, q_l, mask_l)
    cover = torch.maximum(mask_w, mask_l).to(q_w.dtype)
    log_R = -(q_w * mask_w - q_l * mask_l)
    ell = bregman_ell(log_R, member, lam)
    if win is not None:
        if win.shape != q_w.shape:
            raise ValueError(f"win must have shape {tuple(q_w.shape)}, got {tuple(win.shape)}")
        win = win.to(q_w.dtype)
        ell = torch.where(win > 0, win * ell, 0.0) + torch.where(
            win < 1, (1 - win) * bregman_ell(-log_R, member, lam), 0.0)
    per_pair = (ell * cover).sum(1) / cover.sum(1).clamp_min(1.0)
    return per_pair.mean()


class LossSettings(Protocol):
    """Eqs. (tbpo-eq-dpo, tbpo-eq-tdpo, tbpo-eq-simpo, tbpo-eq-token): the settings the losses read.

    The chapter's ``Config`` has them all; the LM setting's config has all but SimPO's.
    """

    beta: float
    tdpo_alpha: float
    simpo_beta: float
    simpo_gamma: float
    tbpo_member: str
    tbpo_lam: float


def method_loss(method: str, chosen: dict[str, torch.Tensor], rejected: dict[str, torch.Tensor],
                cfg: LossSettings) -> torch.Tensor:
    """Eqs. (tbpo-eq-dpo, tbpo-eq-tdpo, tbpo-eq-bregman, tbpo-eq-token): ``method``'s loss.

    ``method`` is a name in ``METHODS``; ``chosen`` and ``rejected`` are the
    :func:`~minirepro.papers.tbpo.policy.token_stats` of the preferred and the dispreferred
    responses; ``chosen["win"]`` (optional, ``(B, T)``) holds token-level labels, read by
    TBPO-Q and TBPO-A only.
    IPO and SimPO: Eqs. (tbpo-eq-ipo, tbpo-eq-simpo).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {list(METHODS)}")
    kind, member, lam = METHODS[method]
    b = cfg.beta
    args = (chosen["lr"], chosen["mask"], rejected["lr"], rejected["mask"])
    if kind == "dpo":
        return dpo_loss(*args, beta=b)
    if kind == "tdpo":
        return tdpo_loss(*args, kl_w=chosen["kl_ref_pi"], kl_l=rejected["kl_ref_pi"], beta=b, alpha=cfg.tdpo_alpha)
    if kind == "bregman":
        return bregman_sequence_loss(*args, beta=b, member=member, lam=lam)
    if kind == "ipo":
        return ipo_loss(*args, tau=b)
    if kind == "simpo":
        return simpo_loss(chosen["lp"], chosen["mask"], rejected["lp"], rejected["mask"],
                          beta=cfg.simpo_beta, gamma=cfg.simpo_gamma)
    if kind == "tbpo-q":
        qw = tbpo_q_values(chosen["lr"], chosen["mask"], chosen["v"], b)
        ql = tbpo_q_values(rejected["lr"], rejected["mask"], rejected["v"], b)
    else:
        qw = tbpo_a_values(chosen["lr"], chosen["mask"], chosen["kl_pi_ref"], b)
        ql = tbpo_a_values(rejected["lr"], rejected["mask"], rejected["kl_pi_ref"], b)
    return tbpo_token_loss(qw, chosen["mask"], ql, rejected["mask"], member=cfg.tbpo_member, lam=cfg.tbpo_lam,
                           win=chosen.get("win"))


def population_minimiser(member: str, p: float, lam: float = 1.0) -> float:
    """Eq. (tbpo-eq-bregman), its population minimiser: the ``R`` minimising the risk, numerically.

    Minimises the population loss ``p l_h(R) + (1 - p) l_h(1/R)`` over ``R``
    (a pair labelled one way with probability ``p``).

    Theory says ``R = R_data = (1 - p) / p`` for every member.
    """
    from scipy.optimize import minimize_scalar

    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    _check_member(member, lam)

    def risk(log_R: float) -> float:
        z = torch.tensor([log_R, -log_R], dtype=torch.float64)
        ell = bregman_ell(z, member, lam)
        return float(p * ell[0] + (1 - p) * ell[1])

    bound = 4.0 + abs(math.log((1 - p) / p))
    res = minimize_scalar(risk, bounds=(-bound, bound), method="bounded",
                          options={"xatol": 1e-10, "maxiter": 500})
    return float(math.exp(res.x))
