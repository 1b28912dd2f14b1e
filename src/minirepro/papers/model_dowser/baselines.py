"""The baselines, each at the same update fraction ``rho`` as Model-Dowser where it has one.

Masks (lowest score trainable within each layer, {eq}`model-dowser-eq-mask`): magnitude
``|W|``, Wanda-style ``|W| * ||h||`` and random. Training-time: LoRA (via ``peft``) with
per-layer ranks matched to ``rho``, and SPIDER's soft mask rebuilt every step. Post hoc,
on the full fine-tuning delta: Grafting, DARE and Model Tailor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import nn

from minirepro.papers.model_dowser.dowser import check_fraction


def magnitude_scores(layers: Mapping[str, nn.Linear]) -> dict[str, torch.Tensor]:
    """[reconstruction] The |W| ablation named in the paper: score ``|W_ij|``."""
    if not layers:
        raise ValueError("no layers to score: the model has no parameters to mask")
    return {n: lin.weight.detach().abs().clone() for n, lin in layers.items()}


@torch.no_grad()
def wanda_scores(forward: Callable[[], torch.Tensor], layers: Mapping[str, nn.Linear]) -> dict[str, torch.Tensor]:
    """[reconstruction] Wanda's importance ``|W_ij| * ||h_j||_2`` (the input norm over every
    prompt and position that ``forward()`` runs), the paper's |W|*||x|| ablation."""
    if not layers:
        raise ValueError("no layers to score: the model has no parameters to mask")
    sq: dict[str, torch.Tensor] = {}
    hooks = []
    for name, lin in layers.items():
        def hook(mod, inp, out, name=name):
            h = inp[0].reshape(-1, inp[0].shape[-1])
            sq[name] = sq.get(name, 0) + (h * h).sum(0)
        hooks.append(lin.register_forward_hook(hook))
    try:
        forward()
    finally:
        for h in hooks:
            h.remove()
    return {n: lin.weight.abs() * sq[n].sqrt()[None, :] for n, lin in layers.items()}


def random_scores(layers: Mapping[str, nn.Linear], gen: torch.Generator) -> dict[str, torch.Tensor]:
    """[reconstruction] Uniform random scores: a random mask of the same size per layer."""
    if not layers:
        raise ValueError("no layers to score: the model has no parameters to mask")
    return {n: torch.rand(lin.weight.shape, generator=gen) for n, lin in layers.items()}


def lora_ranks(layers: Mapping[str, nn.Linear], rho: float) -> dict[str, int]:
    """[reconstruction] LoRA rank per layer so that ``r * (in + out)``, the adapter's size,
    is as close as possible to ``rho * in * out`` (at least 1)."""
    rho = check_fraction(rho)
    if not layers:
        raise ValueError("no layers for LoRA: the model has no parameters to adapt")
    out = {}
    for n, lin in layers.items():
        o, i = lin.weight.shape
        out[n] = max(1, min(min(o, i), round(rho * o * i / (o + i))))
    return out


def lora_model(model: nn.Module, layers: Mapping[str, nn.Linear], rho: float, seed: int) -> nn.Module:
    """§2 (LoRA baseline): wrap ``model`` with ``peft`` LoRA adapters on ``layers`` at the
    ranks of :func:`lora_ranks` (alpha = 2 r, no dropout); only the adapters train."""
    from peft import LoraConfig, get_peft_model

    ranks = lora_ranks(layers, rho)
    names = list(layers)
    torch.manual_seed(seed)
    cfg = LoraConfig(r=ranks[names[0]], lora_alpha=2 * ranks[names[0]], lora_dropout=0.0,
                     target_modules=names, rank_pattern=ranks,
                     alpha_pattern={n: 2 * r for n, r in ranks.items()}, bias="none")
    return get_peft_model(model, cfg)


@torch.no_grad()
def spider_blend(pre: torch.Tensor, new: torch.Tensor, grad_sum: torch.Tensor) -> torch.Tensor:
    """§3 (SPIDER): per tensor, ``I_pre = sigmoid(z(|theta_pre|))`` and ``I_ft = sigmoid(z(|sum_t g_t|))``
    (z: the z-score over the tensor); ``c = I_ft / (I_pre + I_ft)`` where ``I_ft > I_pre``,
    else 0; ``c`` divided by the mean of its nonzero entries and clipped at 1; returns
    ``theta_pre * (1 - c) + theta_new * c``."""
    def z(x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean()) / x.std().clamp_min(1e-12)

    i_pre, i_ft = torch.sigmoid(z(pre.abs())), torch.sigmoid(z(grad_sum.abs()))
    c = torch.where(i_ft > i_pre, i_ft / (i_pre + i_ft), torch.zeros_like(i_ft))
    nz = c > 0
    if nz.any():
        c = (c / c[nz].mean()).clamp(max=1.0)
    return pre * (1 - c) + new * c


def top_delta_mask(delta: torch.Tensor, rho: float) -> torch.Tensor:
    """[reconstruction] The ``round(rho * n)`` entries of largest ``|delta|`` (at least one)."""
    rho = check_fraction(rho)
    k = max(1, round(rho * delta.numel()))
    m = torch.zeros(delta.numel(), dtype=torch.bool)
    m[torch.argsort(delta.abs().flatten(), descending=True, stable=True)[:k]] = True
    return m.view_as(delta)


def graft(pre: torch.Tensor, ft: torch.Tensor, rho: float) -> torch.Tensor:
    """§3 (Grafting) [reconstruction]: ``theta_pre + gamma * (theta_ft - theta_pre)`` with the binary
    mask ``gamma`` keeping the fraction ``rho`` of largest ``|delta|`` in the tensor. This is
    Grafting's initial mask; its mask-learning stage on task data is not run here."""
    delta = ft - pre
    return pre + top_delta_mask(delta, rho) * delta


def dare(pre: torch.Tensor, ft: torch.Tensor, rho: float, gen: torch.Generator) -> torch.Tensor:
    """§4 (DARE): drop each delta entry with probability ``1 - rho`` and rescale the rest by ``1 / rho``."""
    rho = check_fraction(rho)
    keep = torch.rand(pre.shape, generator=gen) < rho
    return pre + keep * (ft - pre) / rho


def model_tailor(pre: torch.Tensor, ft: torch.Tensor, grad: torch.Tensor, fisher: torch.Tensor,
                 rho: float) -> torch.Tensor:
    """§3 (Model Tailor) [reconstruction]: keep the fraction ``rho`` of delta entries with the
    highest fused score, salience ``|delta|`` plus sensitivity ``|g * delta| + fisher * delta^2 / 2``
    (the downstream loss's second-order change if the entry were reset; each part divided by
    its mean over the tensor). The paper's inverse-Hessian compensation of the dropped
    entries is omitted: with a diagonal Hessian it moves no other weight."""
    delta = ft - pre
    sal = delta.abs()
    sens = (grad * delta).abs() + 0.5 * fisher * delta * delta
    fused = sal / sal.mean().clamp_min(1e-12) + sens / sens.mean().clamp_min(1e-12)
    return pre + top_delta_mask(fused, rho) * delta
