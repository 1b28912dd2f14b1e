"""Latent Intrinsics (LI) and ALI's fusion of a frozen visual prior, at miniature size.

* :class:`Encoder`: image -> spatial intrinsic code ``S`` (N, c_s, H, W) and global
  extrinsic (light) code ``L`` (N, c_l).
* :class:`Decoder`: renders an intrinsic map under a light code, per pixel, the light
  entering by feature-wise modulation (FiLM). [reconstruction: the paper's decoder is
  LumiNet's diffusion model; ours is deterministic.]
* :class:`PriorEncoder`: the frozen prior's convolutional trunk and its hypercolumn ``H``.
* :class:`Relighter`: ``A = Proj(H) + S`` (Eq. (ali-eq-fusion)) and ``D(A(x_content), L(x_reference))``.
* :func:`coding_rate`, :func:`rate_regulariser`: the regulariser ``L_reg`` (Eq. (ali-eq-reg)).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from minirepro.papers.ali.metrics import check_images


def coding_rate(a: torch.Tensor, lam: float = 1.0) -> torch.Tensor:
    """Eq. (ali-eq-reg): the coding rate ``R(A) = logdet(I + d / (n lam^2) A^T A)`` for ``A`` (n, d)."""
    if a.ndim != 2 or a.shape[0] < 1:
        raise ValueError(f"coding_rate needs a 2-D (n, d) matrix, got shape {tuple(a.shape)}")
    if not lam > 0:
        raise ValueError(f"temperature lam must be positive, got {lam}")
    n, d = a.shape
    gram = torch.eye(d, dtype=a.dtype) + (d / (n * lam * lam)) * a.T @ a
    return torch.linalg.slogdet(gram)[1]


def rate_regulariser(a: torch.Tensor, lam: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Eq. (ali-eq-reg): ``L_reg(A) = (R(A) - R(A_hat))^2`` with the rows of ``A`` (n, d) put on the unit
    sphere and ``A_hat`` (n, d) drawn uniformly on it: keeps the codes spread out, not collapsed."""
    a = F.normalize(a, dim=1)
    ref = F.normalize(torch.randn(a.shape, generator=generator, dtype=a.dtype), dim=1)
    return (coding_rate(a, lam) - coding_rate(ref, lam)) ** 2


class Encoder(nn.Module):
    """§3 (LI): a small conv encoder -> intrinsic map ``S`` (N, c_s, H, W) and light code ``L`` (N, c_l)."""

    def __init__(self, width: int = 16, c_s: int = 8, c_l: int = 8) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, width, 3, padding=1)
        self.c2 = nn.Conv2d(width, width, 3, padding=1)
        self.s = nn.Conv2d(width, c_s, 1)
        self.light = nn.Sequential(nn.Linear(2 * width, 32), nn.ReLU(), nn.Linear(32, c_l))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.relu(self.c2(F.relu(self.c1(x))))
        pooled = torch.cat([h.mean((2, 3)), h.amax((2, 3))], 1)
        return self.s(h), self.light(pooled)


class Decoder(nn.Module):
    """§3 (LI) [reconstruction]: per-pixel renderer of an intrinsic map under a light code (FiLM)."""

    def __init__(self, c_s: int = 8, c_l: int = 8, hidden: int = 32) -> None:
        super().__init__()
        self.d1, self.d2 = nn.Conv2d(c_s, hidden, 1), nn.Conv2d(hidden, hidden, 1)
        self.f1, self.f2 = nn.Linear(c_l, 2 * hidden), nn.Linear(c_l, 2 * hidden)
        self.out = nn.Conv2d(hidden, 3, 1)

    @staticmethod
    def _film(h: torch.Tensor, gb: torch.Tensor) -> torch.Tensor:
        g, b = gb.chunk(2, 1)
        return h * (1 + g[:, :, None, None]) + b[:, :, None, None]

    def forward(self, a: torch.Tensor, light: torch.Tensor) -> torch.Tensor:
        if a.shape[0] != light.shape[0]:
            raise ValueError(f"intrinsic codes ({a.shape[0]}) and light codes ({light.shape[0]}) differ in batch size")
        h = F.relu(self._film(self.d1(a), self.f1(light)))
        h = F.relu(self._film(self.d2(h), self.f2(light)))
        return torch.sigmoid(self.out(h))


class PriorEncoder(nn.Module):
    """§4 [reconstruction]: a prior's conv trunk; :meth:`hypercolumn` gives ``H`` (N, 5 width, H, W),
    every layer upsampled to the input size and concatenated per pixel. Both priors use it,
    so their capacity is matched by construction."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, width, 3, padding=1)
        self.c2 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(2 * width, 2 * width, 3, padding=1)
        self.channels = 5 * width

    def hypercolumn(self, x: torch.Tensor) -> torch.Tensor:
        h1 = F.relu(self.c1(x))
        h2 = F.relu(self.c2(h1))
        h3 = F.relu(self.c3(h2))
        up = lambda t: F.interpolate(t, size=x.shape[-2:], mode="bilinear", align_corners=False)  # noqa: E731
        return torch.cat([h1, up(h2), up(h3)], 1)

    def pooled(self, x: torch.Tensor) -> torch.Tensor:
        """Global-average-pooled hypercolumn (N, 5 width): the linear probe's features."""
        return self.hypercolumn(x).mean((2, 3))


class Relighter(nn.Module):
    """Eqs. (ali-eq-fusion, ali-eq-relight), §3-4: LI, or ALI when a frozen ``prior`` gives ``A = Proj(H) + S``.

    ``Proj`` is a 1x1 convolution initialised to zero, so fusion starts from LI exactly.
    """

    def __init__(self, width: int = 16, c_s: int = 8, c_l: int = 8, hidden: int = 32) -> None:
        super().__init__()
        self.encoder, self.decoder = Encoder(width, c_s, c_l), Decoder(c_s, c_l, hidden)
        self.prior: PriorEncoder | None = None
        self.proj: nn.Conv2d | None = None
        self.c_s = c_s

    def attach_prior(self, prior: PriorEncoder) -> None:
        """Fuse a frozen prior: its weights stop training; a zero-initialised ``Proj`` is added."""
        self.prior = prior
        for p in prior.parameters():
            p.requires_grad_(False)
        self.proj = nn.Conv2d(prior.channels, self.c_s, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def codes(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. (ali-eq-fusion): the (augmented) intrinsic code ``A`` (N, c_s, H, W) and the light code ``L`` (N, c_l)."""
        s, light = self.encoder(x)
        if self.prior is not None:
            with torch.no_grad():
                h = self.prior.hypercolumn(x)
            s = s + self.proj(h)
        return s, light

    def relight(self, content: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        """Eq. (ali-eq-relight): ``D(A(content), L(reference))``: the content's scene under the reference's light.

        Both are (N, 3, H, W) in [0, 1]; the reference enters only through its light code.
        """
        check_images(content, "content")
        check_images(reference, "reference")
        if content.shape != reference.shape:
            raise ValueError(f"content {tuple(content.shape)} and reference {tuple(reference.shape)} differ in shape")
        a, _ = self.codes(content)
        _, light = self.codes(reference)
        return self.decoder(a, light)

    def n_params(self, trainable_only: bool = False) -> int:
        """The number of parameters (only those that train, if asked)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)


def n_params(module: nn.Module) -> int:
    """[reconstruction] Capacity check: the number of parameters of ``module`` (the priors' trunks match by it)."""
    return sum(p.numel() for p in module.parameters())

