"""Bradley-Terry reward heads on cached states (§2 of the paper: the RM's training loss)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


class RewardHead(torch.nn.Module):
    """Eq. (reward-shaping-eq-bt)'s r(h): linear (``hidden=0``) or one hidden ReLU layer [reconstruction]."""

    def __init__(self, d: int, hidden: int = 0) -> None:
        super().__init__()
        if d < 1 or hidden < 0:
            raise ValueError(f"need d >= 1 and hidden >= 0, got d={d}, hidden={hidden}")
        self.d = d
        self.net = (torch.nn.Linear(d, 1) if hidden == 0 else
                    torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.ReLU(),
                                        torch.nn.Linear(hidden, 1)))
        # a fixed affine map of h before the net (identity unless train_bt standardises):
        # a linear head on (h - center) / scale is still a linear function of h
        self.register_buffer("center", torch.zeros(d))
        self.register_buffer("scale", torch.ones(d))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net((h - self.center) / self.scale).squeeze(-1)

    def reward(self, h: np.ndarray) -> np.ndarray:
        """Rewards ``(n,)`` of states ``(n, d)`` (numpy in, numpy out)."""
        h = np.asarray(h)
        if h.ndim != 2 or h.shape[1] != self.d:
            raise ValueError(f"states must be (n, {self.d}), got shape {h.shape}")
        with torch.no_grad():
            return self(torch.as_tensor(h, dtype=torch.float32)).double().numpy()


@dataclass
class BTFit:
    """Eq. (reward-shaping-eq-bt), fitted: a head and its loss curve (mean BT loss per step, nats)."""

    head: RewardHead
    losses: list[float] = field(default_factory=list)


def bt_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> torch.Tensor:
    """Eq. (reward-shaping-eq-bt): Bradley-Terry negative log-likelihood, mean of -log sigmoid(r_c - r_r)."""
    return torch.nn.functional.softplus(-(r_chosen - r_rejected)).mean()


def train_bt(h_chosen: np.ndarray, h_rejected: np.ndarray, hidden: int = 0, steps: int = 300,
             lr: float = 3e-3, weight_decay: float = 1e-4, seed: int = 0,
             standardize: bool = False) -> BTFit:
    """Eq. (reward-shaping-eq-bt): fit a reward head by Bradley-Terry maximum likelihood (full batch, Adam).

    Args:
        h_chosen, h_rejected: ``(n, d)`` states of the chosen and rejected responses.
        hidden: 0 for a linear head, else the width of one hidden ReLU layer.
        standardize: read h through a fixed per-dimension standardisation (the training
            states' mean and standard deviation), so that one learning rate and weight decay
            suit any backbone's scale; the head stays a function of h.
    """
    a, b = np.asarray(h_chosen, np.float32), np.asarray(h_rejected, np.float32)
    if a.ndim != 2 or a.shape != b.shape or a.shape[0] == 0:
        raise ValueError(f"chosen and rejected must be non-empty (n, d) arrays of one shape, "
                         f"got {a.shape} and {b.shape}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    torch.manual_seed(seed)
    head = RewardHead(a.shape[1], hidden)
    if standardize:
        both = np.concatenate([a, b])
        head.center.copy_(torch.from_numpy(both.mean(0)))
        head.scale.copy_(torch.from_numpy(both.std(0) + 1e-6))
    opt = torch.optim.Adam(head.parameters(), lr=lr, weight_decay=weight_decay)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = bt_loss(head(ta), head(tb))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return BTFit(head.eval(), losses)
