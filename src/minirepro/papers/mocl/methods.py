"""The continual-learning update rules: MoCL (reconstructed), GPM, SGP, EWC, fine-tuning.

Each method sees, per layer ``l``, the plain gradient ``dW_l`` (out, in) of the current
task's loss and returns the direction actually stepped along; after a task it
updates its memory from ``n_memory`` of the task's training inputs.

MoCL here is a **reconstruction** (no code or method section of the paper was
available): a Kronecker-factored Fisher ``F_l ~ A_l (x) G_l`` per layer, decayed and
accumulated over tasks ("metabolism"), eigendecomposed (never inverted), and a
Tsallis q-exponential gate on the gradient's coordinates in that eigenbasis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from minirepro.papers.mocl.benchmarks import Task
from minirepro.papers.mocl.network import class_mask, forward
from minirepro.papers.mocl.qstats import effective_rank, exp_q

# --------------------------------------------------------------------------- statistics


def layer_statistics(weights: list[torch.Tensor], X: torch.Tensor, classes: tuple[int, ...],
                     generator: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Eqs. (mocl-eq-kfac, mocl-eq-ewc, mocl-eq-gpm): per layer, the inputs and output gradients.

    The inputs ``a_l`` are (n, in_l), the output gradients ``g_l`` (n, out_l).

    ``g_l[n] = d loss_n / d s_l[n]`` with the label of sample ``n`` drawn from the
    model's own predictive distribution (the "true" Fisher, not the empirical
    one), so that ``g_l[n] a_l[n]^T`` is sample ``n``'s weight gradient.
    """
    if X.ndim != 2 or X.shape[0] < 1:
        raise ValueError(f"X must be a non-empty (n, d) batch, got shape {tuple(X.shape)}")
    w = [W.detach().clone().requires_grad_(True) for W in weights]
    logits, inputs, pre = forward(w, X)
    masked = logits + class_mask(classes, logits.shape[1])
    with torch.no_grad():
        y = torch.multinomial(torch.softmax(masked, dim=1), 1, generator=generator).squeeze(1)
    loss = torch.nn.functional.cross_entropy(masked, y, reduction="sum")
    grads = torch.autograd.grad(loss, pre)
    return [(a.detach(), g.detach()) for a, g in zip(inputs, grads)]


def kfac_factors(a: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Eq. (mocl-eq-kfac): Kronecker factors ``A = E[a a^T]`` (in, in) and ``G = E[g g^T]`` (out, out).

    For one sample, :math:`A \otimes G` is exactly the outer product of the
    vectorised gradient :math:`\mathrm{vec}(g a^\top) = a \otimes g`; for many it is
    K-FAC's approximation of the Fisher block of this layer.
    """
    if a.ndim != 2 or g.ndim != 2 or a.shape[0] != g.shape[0] or a.shape[0] == 0:
        raise ValueError(f"a (n, in) and g (n, out) need the same n >= 1; got {tuple(a.shape)}, "
                         f"{tuple(g.shape)}")
    n = a.shape[0]
    return a.T @ a / n, g.T @ g / n


def diagonal_fisher(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    r"""Eq. (mocl-eq-ewc): EWC's diagonal Fisher (out, in) of one task, exact.

    :math:`E[(g a^\top)^{\odot 2}] = E[g^{\odot 2} (a^{\odot 2})^\top]`.
    """
    if a.ndim != 2 or g.ndim != 2 or a.shape[0] != g.shape[0] or a.shape[0] == 0:
        raise ValueError(f"a (n, in) and g (n, out) need the same n >= 1; got {tuple(a.shape)}, "
                         f"{tuple(g.shape)}")
    return (g ** 2).T @ (a ** 2) / a.shape[0]


# --------------------------------------------------------------------------- MoCL (recon)


def accumulate_factor(old: torch.Tensor | None, new: torch.Tensor, gamma: float) -> torch.Tensor:
    r"""Eq. (mocl-eq-metabolism): ``Lambda <- gamma Lambda + Lambda_new``, the new factor at unit trace.

    :math:`\Lambda \leftarrow \gamma \Lambda + \hat\Lambda_{new}`.

    Each task enters with unit mass, so ``gamma`` alone sets how fast old tasks
    fade (``gamma = 1``: no decay; a task's weight halves after ``ln 2 / -ln gamma`` tasks).
    """
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"the decay gamma must be in (0, 1], got {gamma}")
    trace = float(torch.trace(new))
    unit = new / trace if trace > 0 else new
    return unit if old is None else gamma * old + unit


def factor_eigen(F: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (mocl-eq-kfac): eigenvalues (clipped at 0, descending) and eigenvectors of a PSD factor."""
    if F.ndim != 2 or F.shape[0] != F.shape[1]:
        raise ValueError(f"a Kronecker factor must be square, got shape {tuple(F.shape)}")
    lam, U = torch.linalg.eigh(F.double())
    lam, U = lam.flip(0).clamp_min(0.0), U.flip(1)
    return lam.to(F.dtype), U.to(F.dtype)


def metabolic_gate(lam_G: np.ndarray, lam_A: np.ndarray, q: float, beta: float,
                   hard: bool = False) -> np.ndarray:
    r"""Eqs. (mocl-eq-gate, mocl-eq-tsallis): the gate ``M`` (out, in) from the two factor spectra.

    :math:`M_{ij} = e_q(-\beta\, \lambda^G_i \lambda^A_j / \tau)` with
    :math:`\tau = \sum\lambda / r_q`; ``r_q = r_q(p_G) r_q(p_A)`` is the Tsallis
    effective rank (Hill number) of the Kronecker spectrum, computed from the factors
    (it is multiplicative). ``tau`` is
    then the mean eigenvalue over the effective support. With ``hard=True`` the
    smooth gate is rounded to a projection at the same scale: directions with
    :math:`\beta\lambda/\tau \ge 1` are closed (M = 0), all others left open (M = 1).

    Args:
        lam_G: (out,) non-negative eigenvalues of G.
        lam_A: (in,) non-negative eigenvalues of A.
        q: entropic index (``q = 1`` is the Shannon/exponential limit).
        beta: gate strength, ``> 0``.

    Returns:
        ``M`` in [0, 1], shape (out, in); all ones if the spectrum is zero (empty memory).
    """
    lam_G = np.asarray(lam_G, dtype=np.float64)
    lam_A = np.asarray(lam_A, dtype=np.float64)
    if lam_G.ndim != 1 or lam_A.ndim != 1 or lam_G.size == 0 or lam_A.size == 0:
        raise ValueError("lam_G and lam_A must be non-empty 1-d spectra")
    if np.any(lam_G < 0) or np.any(lam_A < 0):
        raise ValueError("Kronecker-factor eigenvalues must be non-negative (PSD factors)")
    if beta <= 0:
        raise ValueError(f"the gate strength beta must be positive, got {beta}")
    lam = np.outer(lam_G, lam_A)
    total = lam.sum()
    if total <= 0.0:
        return np.ones_like(lam)
    r = effective_rank(lam_G / lam_G.sum(), q) * effective_rank(lam_A / lam_A.sum(), q)
    tau = total / r
    if hard:
        return (beta * lam / tau < 1.0).astype(np.float64)
    return np.clip(exp_q(-beta * lam / tau, q), 0.0, 1.0)


def gated_gradient(grad: torch.Tensor, U_G: torch.Tensor, M: torch.Tensor,
                   U_A: torch.Tensor) -> torch.Tensor:
    r"""Eq. (mocl-eq-gate): the gated update ``U_G (M * (U_G^T dW U_A)) U_A^T``, (out, in).

    :math:`U_G\,(M \odot U_G^\top\, dW\, U_A)\,U_A^\top`.

    The gradient is rotated into the Kronecker eigenbasis, where coordinate
    ``(i, j)`` is the direction :math:`u^G_i (u^A_j)^\top` of Fisher eigenvalue
    :math:`\lambda^G_i\lambda^A_j`, scaled by the gate, and rotated back.
    """
    if grad.shape != (U_G.shape[0], U_A.shape[0]) or M.shape != grad.shape:
        raise ValueError(f"shapes disagree: grad {tuple(grad.shape)}, U_G {tuple(U_G.shape)}, "
                         f"M {tuple(M.shape)}, U_A {tuple(U_A.shape)}")
    return U_G @ (M * (U_G.T @ grad @ U_A)) @ U_A.T


@dataclass
class MoCLLayer:
    """Eqs. (mocl-eq-kfac, mocl-eq-metabolism, mocl-eq-gate): one layer's factors, eigenbases, gate."""

    A: torch.Tensor | None = None
    G: torch.Tensor | None = None
    U_A: torch.Tensor | None = None
    U_G: torch.Tensor | None = None
    lam_A: torch.Tensor | None = None
    lam_G: torch.Tensor | None = None
    M: torch.Tensor | None = None


# --------------------------------------------------------------------------- GPM and SGP


def gpm_update_bases(M: torch.Tensor | None, R: torch.Tensor, threshold: float) -> torch.Tensor:
    r"""Eq. (mocl-eq-gpm): GPM's memory update of one layer, bases until ``threshold`` of the energy.

    ``R`` (d, n) holds the layer's inputs for ``n`` samples of the finished task.
    With the stored orthonormal bases ``M`` (d, k), the energy already explained
    is :math:`\|M M^\top R\|_F^2`; bases are added from the SVD of the residual
    :math:`R - M M^\top R` until the explained fraction reaches ``threshold``
    (Saha et al., 2021). Returns the new (d, k') orthonormal bases (k' <= d).
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"the GPM energy threshold must be in (0, 1], got {threshold}")
    if R.ndim != 2 or R.shape[1] == 0:
        raise ValueError(f"R must be a (d, n) matrix with n >= 1, got shape {tuple(R.shape)}")
    R = R.double()
    total = float((R ** 2).sum())
    if M is None or M.shape[1] == 0:
        M0 = R.new_zeros((R.shape[0], 0))
    else:
        M0 = M.double()
    residual = R - M0 @ (M0.T @ R)
    explained = total - float((residual ** 2).sum())
    if total <= 0 or explained >= threshold * total - 1e-12:
        return M0.to(torch.float32)
    U, S, _ = torch.linalg.svd(residual, full_matrices=False)
    cum = explained + torch.cumsum(S ** 2, 0)
    k = int(torch.searchsorted(cum, torch.tensor(threshold * total - 1e-12, dtype=cum.dtype))) + 1
    k = min(k, R.shape[0] - M0.shape[1], U.shape[1])
    return torch.cat([M0, U[:, :k]], dim=1).to(torch.float32)


def gpm_project(grad: torch.Tensor, M: torch.Tensor | None, scale: torch.Tensor | None = None
                ) -> torch.Tensor:
    r"""Eqs. (mocl-eq-gpm, mocl-eq-sgp): the gradient without the stored subspace, (out, in).

    Removed from the gradient's input side: :math:`dW - dW M \Lambda M^\top`.

    ``Lambda = I`` is GPM's orthogonal projection; SGP passes importances in [0, 1].
    """
    if M is None or M.shape[1] == 0:
        return grad
    if M.shape[0] != grad.shape[1]:
        raise ValueError(f"bases (d={M.shape[0]}) do not match the gradient's inputs ({grad.shape[1]})")
    coeff = grad @ M
    if scale is not None:
        coeff = coeff * scale
    return grad - coeff @ M.T


def sgp_importance(sigma: torch.Tensor, alpha: float) -> torch.Tensor:
    r"""Eq. (mocl-eq-sgp): SGP's basis importance, in (0, 1], shape of ``sigma``.

    :math:`\lambda_i = (\alpha + 1)\sigma_i / (\alpha\sigma_i + \sigma_{max})`.
    """
    if alpha <= 0:
        raise ValueError(f"SGP's scale alpha must be positive, got {alpha}")
    if sigma.numel() == 0:
        return sigma
    return (alpha + 1) * sigma / (alpha * sigma + sigma.max())


# --------------------------------------------------------------------------- method objects


@dataclass
class Method:
    """Eq. (mocl-eq-step): a continual-learning rule; ``transform`` is ``T_l``, ``remember`` a task."""

    name: str
    layers: int = 3
    protect_last: bool = True  # protect the output layer (False when heads are masked per task)
    wall_memory: float = 0.0

    def transform(self, grads: list[torch.Tensor], weights: list[torch.Tensor]) -> list[torch.Tensor]:
        return grads

    def remember(self, weights: list[torch.Tensor], task: Task, stats) -> None:
        """Update the memory from ``stats = layer_statistics(...)`` of the finished task."""

    def protected(self, li: int) -> bool:
        return self.protect_last or li < self.layers - 1

    def fill(self) -> list[float] | None:
        """Fraction of each layer's input space held in memory (GPM-family only)."""
        return None


@dataclass
class FineTuning(Method):
    """Eq. (mocl-eq-step) with ``T_l`` the identity: plain SGD on each new task, the lower bound."""


@dataclass
class EWC(Method):
    r"""Eq. (mocl-eq-ewc): online EWC, a proximal step on the penalty with the summed diagonal Fisher.

    The penalty is :math:`\frac{\lambda}{2}\sum F (W - W^*)^2`.
    """

    lam: float = 100.0
    lr: float = 0.05
    F: list[torch.Tensor] = field(default_factory=list)
    anchor: list[torch.Tensor] = field(default_factory=list)

    def transform(self, grads, weights):
        """The proximal (implicit) step on the penalty, as a direction for ``W -= lr d``.

        ``W' = (W - lr g + lr lam F W*) / (1 + lr lam F)``, i.e.
        ``d = (g + lam F (W - W*)) / (1 + lr lam F)``: the explicit step diverges once
        ``lr lam F > 2``; this one is stable for every ``lam``.
        """
        if not self.F:
            return grads
        out = []
        for li, (g, W, F, W0) in enumerate(zip(grads, weights, self.F, self.anchor)):
            if self.protected(li):
                g = (g + self.lam * F * (W.detach() - W0)) / (1.0 + self.lr * self.lam * F)
            out.append(g)
        return out

    def remember(self, weights, task, stats):
        new = [diagonal_fisher(a, g) for a, g in stats]
        self.F = new if not self.F else [F + Fn for F, Fn in zip(self.F, new)]
        self.anchor = [W.detach().clone() for W in weights]


@dataclass
class GPM(Method):
    """Eq. (mocl-eq-gpm): Gradient Projection Memory, projection off the stored input subspaces."""

    threshold: tuple[float, ...] = (0.95, 0.99, 0.99)
    bases: list[torch.Tensor | None] = field(default_factory=list)

    def transform(self, grads, weights):
        if not self.bases:
            return grads
        return [gpm_project(g, M) if self.protected(li) else g
                for li, (g, M) in enumerate(zip(grads, self.bases))]

    def remember(self, weights, task, stats):
        if not self.bases:
            self.bases = [None] * len(stats)
        self.bases = [gpm_update_bases(M, a.T, self.threshold[li])
                      for li, (M, (a, _)) in enumerate(zip(self.bases, stats))]

    def fill(self):
        if not self.bases:
            return [0.0] * self.layers
        return [M.shape[1] / M.shape[0] for M in self.bases]


@dataclass
class SGP(GPM):
    """Eq. (mocl-eq-sgp): Scaled Gradient Projection, each GPM basis projected out by its importance."""

    alpha: float = 10.0
    sigma: list[torch.Tensor] = field(default_factory=list)

    def transform(self, grads, weights):
        if not self.bases:
            return grads
        return [gpm_project(g, M, sgp_importance(s, self.alpha)) if self.protected(li) else g
                for li, (g, M, s) in enumerate(zip(grads, self.bases, self.sigma))]

    def remember(self, weights, task, stats):
        if not self.bases:
            self.bases = [None] * len(stats)
            self.sigma = [torch.zeros(0)] * len(stats)
        for li, (a, _) in enumerate(stats):
            R, M = a.T, self.bases[li]
            k_old = 0 if M is None else M.shape[1]
            old = (M.T @ R).norm(dim=1) if k_old else torch.zeros(0)  # energy on old bases
            M_new = gpm_update_bases(M, R, self.threshold[li])
            added = (M_new[:, k_old:].T @ R).norm(dim=1)
            self.bases[li] = M_new
            self.sigma[li] = torch.cat([torch.maximum(self.sigma[li], old), added])


@dataclass
class MoCL(Method):
    """Eqs. (mocl-eq-kfac, mocl-eq-metabolism, mocl-eq-gate) [reconstruction]: MoCL's gated update.

    Tsallis-gated updates in a decayed Kronecker-factored Fisher eigenbasis.

    Switches for ablations: ``gate=False`` (plain SGD), ``q=1`` (Shannon limit),
    ``hard=True`` (the gate rounded to 0/1 at the same temperature), ``gamma=1``
    (no decay of old tasks).
    """

    q: float = 1.5
    beta: float = 1.0
    gamma: float = 0.9
    gate: bool = True
    hard: bool = False
    state: list[MoCLLayer] = field(default_factory=list)

    def transform(self, grads, weights):
        if not self.gate or not self.state:
            return grads
        return [gated_gradient(g, s.U_G, s.M, s.U_A) if self.protected(li) else g
                for li, (g, s) in enumerate(zip(grads, self.state))]

    def remember(self, weights, task, stats):
        if not self.gate:
            return
        if not self.state:
            self.state = [MoCLLayer() for _ in stats]
        for s, (a, g) in zip(self.state, stats):
            A_new, G_new = kfac_factors(a, g)
            s.A = accumulate_factor(s.A, A_new, self.gamma)
            s.G = accumulate_factor(s.G, G_new, self.gamma)
            s.lam_A, s.U_A = factor_eigen(s.A)
            s.lam_G, s.U_G = factor_eigen(s.G)
            M = metabolic_gate(s.lam_G.numpy(), s.lam_A.numpy(), self.q, self.beta, self.hard)
            s.M = torch.as_tensor(M, dtype=torch.float32)

    def openness(self) -> list[float] | None:
        """Mean gate value per layer (1: fully plastic, 0: fully frozen)."""
        if not self.state:
            return None
        return [float(s.M.mean()) for s in self.state]


# --------------------------------------------------------------------------- online K-FAC Laplace


def kfac_proximal_direction(grad: torch.Tensor, W: torch.Tensor, W_star: torch.Tensor,
                            U_G: torch.Tensor, lam_G: torch.Tensor, U_A: torch.Tensor,
                            lam_A: torch.Tensor, lam: float, lr: float) -> torch.Tensor:
    r"""Eq. (mocl-eq-kfac): the proximal step on the Kronecker Laplace penalty, as a direction (out, in).

    The penalty :math:`\frac{\lambda}{2}\,\mathrm{vec}(W - W^*)^\top (A \otimes G)\,\mathrm{vec}(W - W^*)`
    has the gradient :math:`\lambda\, G (W - W^*) A`, diagonal in the Kronecker eigenbasis
    with eigenvalues :math:`\lambda^G_i \lambda^A_j`. There the implicit step is per coordinate,
    ``d = (g + lam L (W - W*)) / (1 + lr lam L)`` (``L = lam_G lam_A^T``), stable for every
    ``lam``; it is rotated back with ``U_G . U_A^T``.
    """
    if grad.shape != W.shape or W.shape != W_star.shape or grad.shape != (U_G.shape[0], U_A.shape[0]):
        raise ValueError(f"shapes disagree: grad {tuple(grad.shape)}, W {tuple(W.shape)}, "
                         f"U_G {tuple(U_G.shape)}, U_A {tuple(U_A.shape)}")
    L = torch.outer(lam_G, lam_A)
    g = U_G.T @ grad @ U_A
    dw = U_G.T @ (W - W_star) @ U_A
    return U_G @ ((g + lam * L * dw) / (1.0 + lr * lam * L)) @ U_A.T


@dataclass
class KFACLaplace(Method):
    r"""[reconstruction] Online K-FAC Laplace (Ritter et al., 2018): a Kronecker-factored quadratic penalty.

    The prior art closest to MoCL: it works in the same Kronecker eigenbasis, but pulls
    the weights back to the last task's solution with the curvature as a spring
    instead of gating the gradient. Tasks are summed into the factors,
    :math:`\sum_t A_t \otimes \sum_t G_t / T` (exact when every task has the same
    factors; Ritter et al. also sum), and the anchor is the last task's weights (online).
    """

    lam: float = 10.0
    lr: float = 0.05
    tasks: int = 0
    A: list[torch.Tensor] = field(default_factory=list)
    G: list[torch.Tensor] = field(default_factory=list)
    eig: list[tuple[torch.Tensor, ...]] = field(default_factory=list)
    anchor: list[torch.Tensor] = field(default_factory=list)

    def transform(self, grads, weights):
        if not self.eig:
            return grads
        return [kfac_proximal_direction(g, W.detach(), W0, *e, self.lam, self.lr)
                if self.protected(li) else g
                for li, (g, W, W0, e) in enumerate(zip(grads, weights, self.anchor, self.eig))]

    def remember(self, weights, task, stats):
        new = [kfac_factors(a, g) for a, g in stats]
        self.tasks += 1
        self.A = [An for An, _ in new] if not self.A else [A + An for A, (An, _) in zip(self.A, new)]
        self.G = [Gn for _, Gn in new] if not self.G else [G + Gn for G, (_, Gn) in zip(self.G, new)]
        self.eig = []
        for A, G in zip(self.A, self.G):
            lam_G, U_G = factor_eigen(G / self.tasks)
            lam_A, U_A = factor_eigen(A)
            self.eig.append((U_G, lam_G, U_A, lam_A))
        self.anchor = [W.detach().clone() for W in weights]
