"""Training RQ-MoE and QINCo: initialise from plain RQ, then minimise the normalised loss."""

from __future__ import annotations

import numpy as np
import torch

from minirepro.core import train_loop
from minirepro.papers.rq_moe.quantizers import _NeuralRQ, normalized_loss
from minirepro.papers.rq_moe.rq import check_vectors


def data_scale(x: np.ndarray) -> float:
    """[reconstruction] The scalar the networks divide the data by: the RMS of the coordinates."""
    check_vectors(x)
    return float(np.sqrt(np.mean(np.asarray(x, dtype=np.float64) ** 2)))


def train_quantizer(model: _NeuralRQ, x: np.ndarray, steps: int, batch_size: int = 256,
                    lr: float = 1e-3, seed: int = 0, desc: str = "train",
                    schedule: str = "constant") -> list[float]:
    """Eq. (rq-moe-eq-loss): Adam on ``normalized_loss`` for ``steps`` mini-batches of raw ``x``.

    Each step encodes the batch with the current network (no gradient: codes are
    discrete), decodes those codes with gradients, and takes one Adam step. Batches
    are drawn without replacement, epoch by epoch, from a generator seeded by ``seed``.
    ``schedule`` is ``"constant"`` (``lr`` throughout) or ``"cosine"`` ([reconstruction]:
    ``lr`` annealed to 0 over ``steps`` by a half cosine, so a long run settles).

    Returns:
        The loss of every step.
    """
    if not bool(model.initialised):
        raise RuntimeError("initialise the model from plain RQ (init_from_rq) before training")
    check_vectors(x, model.d)
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be positive, got {steps}, {batch_size}")
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"schedule must be 'constant' or 'cosine', got {schedule!r}")
    xs = torch.as_tensor(np.asarray(x, dtype=np.float32)) / model.scale
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps) \
        if schedule == "cosine" else None
    order: list[torch.Tensor] = []

    def step(_: int) -> float:
        if not order:
            order.extend(torch.randperm(len(xs), generator=g).split(batch_size))
        xb = xs[order.pop(0)]
        with torch.no_grad():
            codes = model.encode_scaled(xb)
        loss = normalized_loss(xb, model.partial_reconstructions(codes))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        return loss.item()

    model.train()
    losses = train_loop(step, steps, desc=desc)
    model.eval()
    return losses
