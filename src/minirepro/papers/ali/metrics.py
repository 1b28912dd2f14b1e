"""Image metrics in torch: RMSE, PSNR and SSIM, whole-image and per material region.

SSIM follows scikit-image's default ``structural_similarity`` (7x7 uniform window,
sample covariance, ``K1 = 0.01``, ``K2 = 0.03``, the border of 3 pixels left out,
channels averaged); the unit tests compare both with scikit-image.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

WIN = 7


def check_images(x: torch.Tensor, name: str = "images") -> torch.Tensor:
    """``x`` if it is a finite float batch ``(N, 3, H, W)`` in [0, 1]; a clear error otherwise."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"{name} must be an RGB batch (N, 3, H, W), got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a float tensor in [0, 1], got {x.dtype}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    lo, hi = float(x.min()), float(x.max())
    if lo < -1e-6 or hi > 1 + 1e-6:
        raise ValueError(f"{name} must lie in [0, 1] (data range 1), got values in [{lo:.3g}, {hi:.3g}]")
    return x


def _pair(pred: torch.Tensor, target: torch.Tensor) -> None:
    check_images(pred, "prediction")
    check_images(target, "target")
    if pred.shape != target.shape:
        raise ValueError(f"prediction {tuple(pred.shape)} and target {tuple(target.shape)} differ in shape")


def ssim_map(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """§5 metric: the SSIM map ``(N, H - 6, W - 6)`` (channels averaged), scikit-image's default form."""
    _pair(pred, target)
    if min(pred.shape[-2:]) < WIN:
        raise ValueError(f"SSIM needs images of at least {WIN}x{WIN} pixels, got {tuple(pred.shape[-2:])}")
    x, y = pred.double(), target.double()
    c1, c2 = (0.01 * 1.0) ** 2, (0.03 * 1.0) ** 2
    pool = lambda t: F.avg_pool2d(t, WIN, stride=1)  # noqa: E731
    ux, uy = pool(x), pool(y)
    norm = WIN * WIN / (WIN * WIN - 1.0)
    vx = norm * (pool(x * x) - ux * ux)
    vy = norm * (pool(y * y) - uy * uy)
    vxy = norm * (pool(x * y) - ux * uy)
    s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))
    return s.mean(1).float()


def ssim(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """§5 metric: SSIM per image ``(N,)``, equal to ``skimage.metrics.structural_similarity(...,
    channel_axis=0, data_range=1)``."""
    return ssim_map(pred, target).mean((1, 2))


def mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error per image ``(N,)`` over pixels and channels."""
    _pair(pred, target)
    return ((pred.double() - target.double()) ** 2).mean((1, 2, 3)).float()


def psnr(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    """§5 metric: PSNR per image ``(N,)`` in dB for data range 1, ``10 log10(1 / MSE)``."""
    return 10 * torch.log10(1.0 / (mse(pred, target) + eps))


def region_metrics(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
                   ssim_full: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """§5 metrics inside a region: RMSE, PSNR (dB) and SSIM per image ``(N,)``.

    ``mask`` (N, H, W) boolean selects the region's pixels; SSIM averages the SSIM map
    over the region's pixels away from the 3-pixel border. An image without a pixel of
    the region gets NaN. ``ssim_full``: ``ssim_map(pred, target)`` when the caller has it
    already (several regions of one prediction share it).
    """
    _pair(pred, target)
    if mask.shape != (pred.shape[0], *pred.shape[-2:]):
        raise ValueError(f"mask must be (N, H, W) = {(pred.shape[0], *pred.shape[-2:])}, got {tuple(mask.shape)}")
    m = mask.to(torch.float64)
    sq = ((pred.double() - target.double()) ** 2).mean(1)
    count = m.sum((1, 2))
    err = (sq * m).sum((1, 2)) / count
    r = (WIN - 1) // 2
    inner = m[:, r:-r, r:-r]
    full = ssim_map(pred, target) if ssim_full is None else ssim_full
    s = (full.double() * inner).sum((1, 2)) / inner.sum((1, 2))
    nan = torch.full_like(err, float("nan"))
    err = torch.where(count > 0, err, nan)
    return {"rmse": err.sqrt().float(), "psnr": (10 * torch.log10(1.0 / (err + 1e-10))).float(),
            "ssim": torch.where(inner.sum((1, 2)) > 0, s, nan).float()}
