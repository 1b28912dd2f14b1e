"""The frozen visual priors of matched capacity, and the linear probe that ranks them.

[reconstruction] The paper fuses large pretrained encoders (CLIP, DINOv2/v3, MAE,
RADIO). Here both priors share one small conv trunk (:class:`PriorEncoder`) and the
same number of steps on the same scenes; they differ only in their objective:

* *semantic*: classify the scene's shape class under photometric augmentation
  (random per-channel gain and gamma), so light is a nuisance it learns to ignore;
* *dense*: a masked autoencoder that reconstructs hidden 4x4 patches, so every pixel's
  colour and shading must stay in its features.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from minirepro.core import progress
from minirepro.papers.ali.models import PriorEncoder
from minirepro.papers.ali.render import SHAPES

PRIORS: tuple[str, ...] = ("semantic", "dense")


def photometric_augment(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """[reconstruction] Random per-channel gain in [0.5, 1.5] and gamma in [0.6, 1.6], clipped to [0, 1]."""
    n = x.shape[0]
    gain = 0.5 + torch.rand((n, 3, 1, 1), generator=generator)
    gamma = 0.6 + torch.rand((n, 1, 1, 1), generator=generator)
    return (x.clamp_min(1e-6) ** gamma * gain).clamp(0.0, 1.0)


def patch_mask(n: int, size: int, patch: int = 4, ratio: float = 0.6,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """[reconstruction] MAE mask (n, 1, size, size): 1 on hidden ``patch`` x ``patch`` blocks (a ``ratio`` of them)."""
    if size % patch:
        raise ValueError(f"image size {size} must be a multiple of the patch size {patch}")
    k = size // patch
    hidden = (torch.rand((n, 1, k, k), generator=generator) < ratio).float()
    return F.interpolate(hidden, scale_factor=patch, mode="nearest")


def train_prior(kind: str, images: torch.Tensor, labels: torch.Tensor, steps: int, width: int = 16,
                batch: int = 32, lr: float = 3e-3, seed: int = 0) -> tuple[PriorEncoder, list[float]]:
    """§4 [reconstruction]: train a prior of ``kind`` (:data:`PRIORS`) on ``images`` (N, 3, H, W).

    Returns the trunk (frozen afterwards by the relighter) and the loss curve.
    ``labels`` (N,) are the shape classes (used by the semantic prior only).
    """
    if kind not in PRIORS:
        raise ValueError(f"unknown prior {kind!r}; expected one of {', '.join(PRIORS)}")
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    trunk = PriorEncoder(width)
    head: nn.Module = nn.Linear(trunk.channels, len(SHAPES)) if kind == "semantic" else nn.Conv2d(trunk.channels, 3, 1)
    opt = torch.optim.Adam([*trunk.parameters(), *head.parameters()], lr=lr)
    losses = []
    for _ in progress(range(steps), desc=f"{kind} prior"):
        idx = torch.randint(0, images.shape[0], (batch,), generator=gen)
        x = images[idx]
        if kind == "semantic":
            loss = F.cross_entropy(head(trunk.pooled(photometric_augment(x, gen))), labels[idx])
        else:
            m = patch_mask(batch, x.shape[-1], generator=gen)
            rec = torch.sigmoid(head(trunk.hypercolumn(x * (1 - m))))
            loss = (((rec - x) ** 2) * m).sum() / (3 * m.sum()).clamp_min(1.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    trunk.eval()
    for p in trunk.parameters():
        p.requires_grad_(False)
    return trunk, losses


@torch.no_grad()
def linear_probe(trunk: PriorEncoder, train_x: torch.Tensor, train_y: np.ndarray,
                 test_x: torch.Tensor, test_y: np.ndarray) -> float:
    """§4 (Fig. 1's x-axis): accuracy of a logistic-regression probe on the frozen, pooled features.

    The probe's task is the scene's shape class (the miniature's "ImageNet"), trained on
    ``train_x`` and scored on held-out ``test_x``.
    """
    scaler = StandardScaler()
    f_train = scaler.fit_transform(trunk.pooled(train_x).numpy())
    f_test = scaler.transform(trunk.pooled(test_x).numpy())
    clf = LogisticRegression(max_iter=2000, C=1.0).fit(f_train, np.asarray(train_y))
    return float((clf.predict(f_test) == np.asarray(test_y)).mean())
