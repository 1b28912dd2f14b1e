"""Two encoders per run, many runs at once: an ensemble of MLPs with rank bottlenecks.

Each *member* is one training run (a seed, a collapse level, an arm). Its encoder
maps an input to ``rank`` numbers and then into R^d through a fixed basis of its
modality's subspace (``(d, rank)``): the controlled dimension collapse. Members
share nothing but the batched matrix products, and a member's initial weights
depend only on its seed, so arms of one seed start from the same weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from minirepro.core import progress
from minirepro.papers.ssa.geometry import shared_space
from minirepro.papers.ssa.losses import gap_penalty, info_nce, ssa_loss

ARMS_TRAINED: tuple[str, ...] = ("CLIP", "gap penalty", "SSA")
MAX_LOGIT_SCALE = math.log(100.0)  # CLIP clamps the inverse temperature at 100
INIT_LOGIT_SCALE = math.log(1 / 0.07)  # CLIP's initial temperature 0.07


def _uniform(gen: torch.Generator, shape: tuple[int, ...], fan_in: int) -> torch.Tensor:
    bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation
    return (torch.rand(shape, generator=gen) * 2 - 1) * bound


class EnsembleEncoder(torch.nn.Module):
    """[reconstruction] ``M`` independent MLP encoders D -> hidden -> rank -> R^d (via a fixed
    basis), ReLU, unit-norm output. ``forward``: ``(M, n, D)`` -> ``(M, n, d)``."""

    def __init__(self, seeds: list[int], d_in: int, hidden: int, bases: np.ndarray) -> None:
        super().__init__()
        bases = np.asarray(bases, dtype=np.float32)
        if bases.ndim != 3 or bases.shape[0] != len(seeds):
            raise ValueError(f"bases must be (members, d, rank) for {len(seeds)} members, got {bases.shape}")
        rank = bases.shape[2]
        w1, b1, w2, b2 = [], [], [], []
        for s in seeds:
            g = torch.Generator().manual_seed(int(s))
            w1.append(_uniform(g, (d_in, hidden), d_in))
            b1.append(_uniform(g, (1, hidden), d_in))
            w2.append(_uniform(g, (hidden, rank), hidden))
            b2.append(_uniform(g, (1, rank), hidden))
        self.w1, self.b1 = torch.nn.Parameter(torch.stack(w1)), torch.nn.Parameter(torch.stack(b1))
        self.w2, self.b2 = torch.nn.Parameter(torch.stack(w2)), torch.nn.Parameter(torch.stack(b2))
        self.register_buffer("basis", torch.as_tensor(bases).transpose(1, 2).contiguous())  # (M, rank, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x @ self.w1 + self.b1)
        return F.normalize((h @ self.w2 + self.b2) @ self.basis, dim=-1, eps=1e-8)


@dataclass(frozen=True)
class Member:
    """[reconstruction] One run of the miniature: its seed, collapse angle (degrees) and arm."""

    seed: int
    phi: float
    arm: str


@dataclass
class TrainedEnsemble:
    """[reconstruction] The trained ensemble: encoders, inverse temperatures, and the InfoNCE curve."""

    members: list[Member]
    enc_x: EnsembleEncoder
    enc_y: EnsembleEncoder
    logit_scale: torch.Tensor
    steps: list[int] = field(default_factory=list)
    curve: list[np.ndarray] = field(default_factory=list)  # CLIP loss per member at each logged step

    def embed(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Unit embeddings of per-member inputs ``(M, n, D)``: two float64 arrays ``(M, n, d)``."""
        with torch.no_grad():
            ex = self.enc_x(torch.as_tensor(x, dtype=torch.float32))
            ey = self.enc_y(torch.as_tensor(y, dtype=torch.float32))
        return ex.double().numpy(), ey.double().numpy()

    def embed_y(self, y: np.ndarray) -> np.ndarray:
        """Unit embeddings of second-modality inputs ``(M, n, D_y)`` (e.g. class prompts)."""
        with torch.no_grad():
            return self.enc_y(torch.as_tensor(y, dtype=torch.float32)).double().numpy()


def shared_bases(ex: np.ndarray, ey: np.ndarray) -> np.ndarray:
    """Eq. (ssa-eq-ssp)'s B_S per member (SSP), zero-padded to ``(M, d, d)`` for batched projections."""
    m, _, d = ex.shape
    out = np.zeros((m, d, d))
    for i in range(m):
        b = shared_space(ex[i], ey[i]).basis
        out[i, :, : b.shape[1]] = b
    return out


def build_ensemble(members: list[Member], x: dict[int, tuple[np.ndarray, ...]], bases: dict[float, tuple],
                   hidden: int) -> TrainedEnsemble:
    """[reconstruction] The untrained ensemble for ``members``: ``x[seed]`` holds the seed's inputs (first
    ``x_train``, ``y_train``); ``bases[phi] = (basis_x, basis_y)``, each ``(d, rank)``."""
    if not members:
        raise ValueError("no members to train")
    unknown = {m.arm for m in members} - set(ARMS_TRAINED)
    if unknown:
        raise ValueError(f"unknown arm(s) {sorted(unknown)}; trained arms are {ARMS_TRAINED}")
    seeds = [m.seed for m in members]
    enc_x = EnsembleEncoder([1000 * s + 1 for s in seeds], x[seeds[0]][0].shape[1], hidden,
                            np.stack([bases[m.phi][0] for m in members]))
    enc_y = EnsembleEncoder([1000 * s + 2 for s in seeds], x[seeds[0]][1].shape[1], hidden,
                            np.stack([bases[m.phi][1] for m in members]))
    ls = torch.nn.Parameter(torch.full((len(members),), INIT_LOGIT_SCALE))
    return TrainedEnsemble(members, enc_x, enc_y, ls)


def train_ensemble(model: TrainedEnsemble, x: dict[int, tuple[np.ndarray, ...]], steps: int, lr: float,
                   lambda_gap: float, lambda_ssa: float, ssa_every: int, batch_size: int | None,
                   log_every: int = 10, batch_seed: int = 0, desc: str = "train") -> TrainedEnsemble:
    """[reconstruction] Train every member with its arm's loss (§5, SSA as reconstructed):

    CLIP: InfoNCE; gap penalty: InfoNCE + ``lambda_gap`` ||μ_x - μ_y||²; SSA: InfoNCE +
    ``lambda_ssa`` InfoNCE(P̂_S x, P̂_S y), with S re-estimated by SSP every ``ssa_every``
    steps on the member's held-out ``est`` split. Adam on all weights and the
    inverse temperature (clamped to [1, 100]); minibatches of ``batch_size`` pairs
    (``None``: full batch), the same batch indices for every member (drawn from
    ``batch_seed``), so a member trains exactly as it would alone.
    ``x[seed] = (x_train, y_train, x_est, y_est)``.
    Returns ``model``, trained in place, with the InfoNCE curve.
    """
    if steps < 1 or ssa_every < 1 or log_every < 1:
        raise ValueError("steps, ssa_every and log_every must be >= 1")
    members, enc_x, enc_y, ls = model.members, model.enc_x, model.enc_y, model.logit_scale
    t = lambda a: torch.as_tensor(np.stack(a), dtype=torch.float32)  # noqa: E731
    xt, yt = t([x[m.seed][0] for m in members]), t([x[m.seed][1] for m in members])
    xe, ye = t([x[m.seed][2] for m in members]), t([x[m.seed][3] for m in members])
    w_gap = torch.tensor([lambda_gap if m.arm == "gap penalty" else 0.0 for m in members])
    w_ssa = torch.tensor([lambda_ssa if m.arm == "SSA" else 0.0 for m in members])
    use_ssa = bool(w_ssa.any())
    opt = torch.optim.Adam([*enc_x.parameters(), *enc_y.parameters(), ls], lr=lr)
    gen = torch.Generator().manual_seed(int(batch_seed))
    n = xt.shape[1]
    basis = None
    for step in progress(range(steps), desc=desc):
        if use_ssa and step % ssa_every == 0:
            with torch.no_grad():
                bx, by = enc_x(xe), enc_y(ye)
            basis = torch.as_tensor(shared_bases(bx.double().numpy(), by.double().numpy()), dtype=torch.float32)
        idx = torch.randperm(n, generator=gen)[:batch_size] if batch_size and batch_size < n else slice(None)
        ex, ey = enc_x(xt[:, idx]), enc_y(yt[:, idx])
        clip = info_nce(ex, ey, ls)
        loss = clip + w_gap * gap_penalty(ex, ey)
        if use_ssa:
            loss = loss + w_ssa * ssa_loss(ex, ey, ls, basis)
        if not torch.isfinite(loss).all():
            raise FloatingPointError(f"{desc}: a loss became non-finite at step {step}")
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
        with torch.no_grad():
            ls.clamp_(0.0, MAX_LOGIT_SCALE)
        if step % log_every == 0 or step == steps - 1:
            model.steps.append(step)
            model.curve.append(clip.detach().numpy().copy())
    return model
