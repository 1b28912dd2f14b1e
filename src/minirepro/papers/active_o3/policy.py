"""The sensing policy M_O: a small CNN over the 24x24 global view, one logit per grid box."""

from __future__ import annotations

import torch
from torch import nn


class SensingPolicy(nn.Module):
    """[reconstruction] M_O: 24x24 global view -> logits over ``n_sizes`` x 8 x 8 grid boxes.

    Fully convolutional: conv(8)-conv(16)-maxpool(3)-conv(16)-conv1x1(n_sizes); the logit of
    action ``s * 64 + r * 8 + c`` is channel ``s`` at cell ``(r, c)`` (the order of
    :func:`~minirepro.papers.active_o3.boxes.grid_actions`). The last layer starts at zero,
    so the initial policy (the KL reference) is uniform over the actions.
    """

    def __init__(self, n_sizes: int = 4, width: int = 8) -> None:
        super().__init__()
        self.head = nn.Conv2d(2 * width, n_sizes, 1)
        self.net = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU(), self.head)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, view: torch.Tensor) -> torch.Tensor:
        """[N, 24, 24] global views -> [N, n_sizes * 64] logits."""
        if view.ndim != 3 or view.shape[1:] != (24, 24):
            raise ValueError(f"the global view must be [N, 24, 24], got {tuple(view.shape)}")
        return self.net(view[:, None]).flatten(1)
