"""The frozen task model M_A: a small CNN reading 24x24 crops (10 digits + "none").

``crop_resize`` is ResizeCrop(I, box) of the paper: each box of each image is cut out and
resized to 24x24 by bilinear sampling.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from minirepro.papers.active_o3.boxes import check_boxes

CROP = 24  # crop side seen by the task model, pixels
NONE = 10  # the "no digit" class
N_CLASSES = 11


def crop_resize(images: torch.Tensor, index: torch.Tensor, boxes: torch.Tensor, out: int = CROP) -> torch.Tensor:
    """Eq. (active-o3-eq-objective), o_k = ResizeCrop(I, b_k): crops of ``images[index[j]]`` at ``boxes[j]``, resized to ``out`` x ``out``.

    Args:
        images: [N, H, W] float images.
        index: [J] long, which image each box is cut from.
        boxes: [J, 4] (x1, y1, x2, y2) pixels, exclusive ends, inside the image.
    Returns:
        [J, out, out] crops (bilinear, pixel centres mapped exactly).
    """
    if images.ndim != 3:
        raise ValueError(f"images must be [N, H, W], got {tuple(images.shape)}")
    n, h, w = images.shape
    b = check_boxes(boxes, size=max(h, w)).reshape(-1, 4).to(images.dtype)
    index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
    if index.numel() != b.shape[0]:
        raise ValueError(f"index has {index.numel()} entries for {b.shape[0]} boxes")
    if index.numel() and (index.min() < 0 or index.max() >= n):
        raise IndexError(f"index out of range for {n} images")
    t = (torch.arange(out, dtype=images.dtype) + 0.5) / out  # sample points inside [0, 1]
    xs = b[:, 0:1] + t[None] * (b[:, 2:3] - b[:, 0:1])  # [J, out] pixel coordinates
    ys = b[:, 1:2] + t[None] * (b[:, 3:4] - b[:, 1:2])
    gx = xs / w * 2 - 1  # align_corners=False normalisation
    gy = ys / h * 2 - 1
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)  # [J, out, out, 2]
    res = torch.empty(index.numel(), out, out, dtype=images.dtype)
    for i in torch.unique(index).tolist():  # one call per image: its boxes stacked along the height
        sel = (index == i).nonzero().reshape(-1)
        g = grid[sel].reshape(1, -1, out, 2)
        res[sel] = F.grid_sample(images[i][None, None], g, mode="bilinear", padding_mode="border",
                                 align_corners=False)[0, 0].reshape(-1, out, out)
    return res

class TaskCNN(nn.Module):
    """[reconstruction] M_A: conv(8)-pool-conv(16)-pool-linear(64)-linear, 24x24 crops -> 11 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 36, 64), nn.ReLU(), nn.Linear(64, N_CLASSES))

    def forward(self, crops: torch.Tensor) -> torch.Tensor:
        """[J, 24, 24] crops -> [J, 11] logits (classes 0-9 are digits, 10 is "none")."""
        return self.net(crops[:, None])


@torch.no_grad()
def predict(model: nn.Module, crops: torch.Tensor, batch: int = 1024, digits_only: bool = False) -> torch.Tensor:
    """Eq. (active-o3-eq-objective), M_A(o_k): the task model's answer per crop, [J, 24, 24] -> [J] long (argmax; over 0-9 only if ``digits_only``)."""
    outs = []
    for i in range(0, crops.shape[0], batch):
        logits = model(crops[i:i + batch])
        outs.append((logits[:, :NONE] if digits_only else logits).argmax(1))
    return torch.cat(outs) if outs else torch.zeros(0, dtype=torch.long)


def crop_targets(gt_boxes: np.ndarray, gt_labels: np.ndarray, boxes: np.ndarray,
                 pos: float = 0.5, neg: float = 0.2) -> np.ndarray:
    """[reconstruction] Training label of each box of one canvas: the digit it covers best when
    that coverage is >= ``pos``, "none" when every digit's coverage is < ``neg``, -1 (unused) otherwise."""
    from minirepro.papers.active_o3.boxes import coverage

    if len(gt_boxes) == 0:
        return np.full(len(boxes), NONE)
    cov = coverage(gt_boxes, boxes).numpy()  # [g, k]
    best = cov.max(0)
    out = np.where(best >= pos, gt_labels[cov.argmax(0)], -1)
    return np.where(best < neg, NONE, out)
