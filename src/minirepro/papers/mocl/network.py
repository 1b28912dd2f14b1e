"""The shared substrate: a bias-free ReLU MLP as a list of torch weight matrices.

Every method trains the same network with the same plain-SGD budget. Weights are
kept as a list ``[W_1, ..., W_L]`` with ``W_l`` of shape (out_l, in_l) so that a
method can transform each layer's gradient before the step (projection, gating,
penalty). No biases: GPM's projection argument is about ``W_l a`` only.
"""

from __future__ import annotations

import math

import torch

from minirepro.papers.mocl.benchmarks import N_CLASSES, Task

MASK_VALUE = -1e9  # added to logits of classes a task does not use


def init_mlp(sizes: tuple[int, ...], generator: torch.Generator) -> list[torch.Tensor]:
    """He-uniform weights ``W_l`` (sizes[l+1], sizes[l]) for a ReLU MLP, float32.

    Raises:
        ValueError: fewer than two sizes, or a non-positive size.
    """
    if len(sizes) < 2 or any((not isinstance(s, int)) or s < 1 for s in sizes):
        raise ValueError(f"sizes must be >= 2 positive integers (in, hidden..., out), got {sizes}")
    weights = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = math.sqrt(6.0 / fan_in)
        W = (torch.rand(fan_out, fan_in, generator=generator) * 2 - 1) * bound
        weights.append(W.requires_grad_(True))
    return weights


def forward(weights: list[torch.Tensor], x: torch.Tensor
            ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """Logits (n, out) and, per layer, its input ``a_l`` (n, in_l) and pre-activation ``s_l = a_l W_l^T``."""
    if x.ndim != 2 or x.shape[1] != weights[0].shape[1]:
        raise ValueError(f"x must have shape (n, {weights[0].shape[1]}), got {tuple(x.shape)}")
    inputs, pre = [], []
    h = x
    for idx, W in enumerate(weights):
        inputs.append(h)
        s = h @ W.T
        pre.append(s)
        h = torch.relu(s) if idx < len(weights) - 1 else s
    return h, inputs, pre


def class_mask(classes: tuple[int, ...], n_out: int = N_CLASSES) -> torch.Tensor:
    """Additive logit mask (n_out,): 0 for the task's classes, ``MASK_VALUE`` for the rest."""
    mask = torch.full((n_out,), MASK_VALUE)
    mask[list(classes)] = 0.0
    return mask


def loss_fn(weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
            mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the masked logits (``mask`` of shape (out,) or (n, out))."""
    logits, _, _ = forward(weights, x)
    return torch.nn.functional.cross_entropy(logits + mask, y)


@torch.no_grad()
def accuracy(weights: list[torch.Tensor], task: Task) -> float:
    """Test accuracy in [0, 1] on ``task``, predicting among the task's classes only."""
    logits, _, _ = forward(weights, task.X_test)
    pred = (logits + class_mask(task.classes, logits.shape[1])).argmax(dim=1)
    return float((pred == task.y_test).float().mean())
