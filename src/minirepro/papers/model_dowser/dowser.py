"""Model-Dowser: data-free importance probing and update-masked fine-tuning.

The importance of weight ``W_ij`` of a Linear layer ``z = W h`` is
``S_ij = ||J_i|| * |W_ij| * |h_j|`` ({eq}`model-dowser-eq-score`), where ``J_i`` is the
Jacobian of the model's output logits with respect to the layer's output unit ``i``.
``||J_i||^2`` is estimated by Hutchinson's trick with Rademacher vectors over the output
logits ({eq}`model-dowser-eq-hutchinson`), on synthetic probe prompts (no downstream data).
Within each layer the lowest-scoring fraction ``rho`` of the weights is trainable and the
rest frozen ({eq}`model-dowser-eq-mask`); the optimiser's *update* is masked, so AdamW's
decoupled weight decay cannot move a frozen weight ({eq}`model-dowser-eq-update`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn

from minirepro.papers.model_dowser.data import (
    EQ,
    N_VIS,
    PAD,
    QUESTION,
    SEQ,
    UPSTREAM,
    Batch,
    text_prompts,
)


def check_fraction(rho: float) -> float:
    """[reconstruction] Validate an update fraction: a finite number in (0, 1]."""
    r = float(rho)
    if not (math.isfinite(r) and 0.0 < r <= 1.0):
        raise ValueError(f"update fraction rho must lie in (0, 1], got {rho!r}")
    return r


def rademacher(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Eq. (model-dowser-eq-hutchinson): i.i.d. +-1 entries with probability 1/2 each."""
    return torch.randint(0, 2, shape, generator=gen).float().mul_(2).sub_(1)


def hutchinson_sq_norms(fn: Callable[[torch.Tensor], torch.Tensor], z: torch.Tensor, n_probes: int,
                        gen: torch.Generator) -> torch.Tensor:
    """Eq. (model-dowser-eq-hutchinson): estimate ``||d f / d z_i||^2`` for every entry of ``z``.

    ``fn`` maps ``z`` (B, ...) to outputs (B, V), sample by sample. Each probe draws a
    Rademacher ``xi`` (B, V) and takes one backward pass of ``sum(xi * f)``; the mean of the
    squared gradients over ``n_probes`` probes is unbiased for the squared row norms
    (variance ``2 (||J_i||^4 - sum_k J_ki^4) / n_probes``). Returns a tensor shaped like ``z``.
    """
    if n_probes < 1:
        raise ValueError(f"n_probes must be at least 1, got {n_probes}")
    z = z.detach().requires_grad_(True)
    f = fn(z)
    acc = torch.zeros_like(z)
    for r in range(n_probes):
        xi = rademacher(tuple(f.shape), gen)
        (g,) = torch.autograd.grad((xi * f).sum(), z, retain_graph=r < n_probes - 1)
        acc += g * g
    return acc / n_probes


def dowser_scores(forward: Callable[[], torch.Tensor], layers: Mapping[str, nn.Linear], n_probes: int,
                  gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Eqs. (model-dowser-eq-score, model-dowser-eq-hutchinson): the importance ``S`` of every
    weight of ``layers``, averaged over every prompt that ``forward()`` runs.

    ``forward`` runs the model on N probe prompts, in one batch or several, and returns their
    output logits (N, V). Each call of a layer is kept (a later batch does not replace an
    earlier one): for a call with input ``h`` (B, T, in) and output ``z`` (B, T, out),
    ``||J_i||`` is the square root of the Hutchinson estimate at each prompt and position; the
    norms and ``|h_j|`` are averaged over positions [reconstruction: the pooling over
    positions is not stated], and ``S_ij = |W_ij| * mean_n(||J_i||_n * |h_j|_n)`` over the
    prompts that pass through the layer (the projector sees only the prompts with an image).
    Returns name -> (out, in).
    """
    if not layers:
        raise ValueError("no layers to score: the model has no parameters to mask")
    if n_probes < 1:
        raise ValueError(f"n_probes must be at least 1, got {n_probes}")
    saved: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {name: [] for name in layers}
    hooks = []
    flags = {name: lin.weight.requires_grad for name, lin in layers.items()}
    for name, lin in layers.items():
        def hook(mod, inp, out, name=name):
            saved[name].append((inp[0].detach(), out))  # every call: one per probe batch
        hooks.append(lin.register_forward_hook(hook))
    try:
        with torch.enable_grad():
            for lin in layers.values():  # the graph must reach every layer's output
                lin.weight.requires_grad_(True)
            f = forward()
            calls = [(name, k) for name in layers for k in range(len(saved[name]))]
            missing = [name for name in layers if not saved[name]]
            if missing:
                raise ValueError(f"forward() never ran layers {missing}: nothing to score them on")
            outs = [saved[name][k][1] for name, k in calls]
            sq = [torch.zeros_like(o) for o in outs]
            for r in range(n_probes):
                xi = rademacher(tuple(f.shape), gen)
                grads = torch.autograd.grad((xi * f).sum(), outs, retain_graph=r < n_probes - 1,
                                            allow_unused=True)
                for s, g in zip(sq, grads):
                    if g is not None:
                        s += g * g
    finally:
        for h in hooks:
            h.remove()
        for name, lin in layers.items():
            lin.weight.requires_grad_(flags[name])
    total = {name: torch.zeros_like(lin.weight) for name, lin in layers.items()}
    count = dict.fromkeys(layers, 0)
    for (name, k), s in zip(calls, sq):
        h = saved[name][k][0]
        jn = (s / n_probes).sqrt()
        j = jn.mean(dim=1) if jn.dim() == 3 else jn          # (B, out)
        a = h.abs().mean(dim=1) if h.dim() == 3 else h.abs()  # (B, in)
        total[name] += j.T @ a
        count[name] += len(j)
    return {name: layers[name].weight.detach().abs() * total[name] / count[name] for name in layers}


def layer_masks(scores: Mapping[str, torch.Tensor], rho: float) -> dict[str, torch.Tensor]:
    """Eq. (model-dowser-eq-mask): within each layer the ``round(rho * n)`` lowest-scoring
    weights (at least one) are trainable (True); the others are frozen. Ties go to the
    lower flat index. Returns name -> bool tensor shaped like the scores."""
    rho = check_fraction(rho)
    if not scores:
        raise ValueError("no layers to mask: the model has no parameters to mask")
    masks = {}
    for name, s in scores.items():
        if s.numel() == 0:
            raise ValueError(f"layer {name!r} has no weights to mask")
        if not torch.isfinite(s).all():
            raise ValueError(f"layer {name!r} has non-finite scores")
        k = max(1, round(rho * s.numel()))
        order = torch.argsort(s.flatten(), stable=True)
        m = torch.zeros(s.numel(), dtype=torch.bool)
        m[order[:k]] = True
        masks[name] = m.view_as(s)
    return masks


def probe_batches(n: int, gen: torch.Generator) -> list[Batch]:
    """[reconstruction] Synthetic probe prompts, no downstream data: uniform-noise 8x8 images
    asked the three upstream image questions, and random text-only sums (``n`` prompts in
    all). The paper lets the pretrained model write its own prompts from random token seeds;
    a digit CNN has no generator, so noise images stand in for them."""
    if n < 4:
        raise ValueError(f"need at least 4 probe prompts, got {n}")
    k = n // 4
    out = []
    for task in UPSTREAM[:3]:
        tokens = torch.full((k, SEQ), PAD, dtype=torch.long)
        tokens[:, N_VIS], tokens[:, N_VIS + 1] = QUESTION[task], EQ
        out.append(Batch(torch.rand(k, 1, 8, 8, generator=gen), tokens, torch.zeros(k, dtype=torch.long)))
    a, b = torch.randint(0, 10, (2, n - 3 * k), generator=gen)
    out.append(text_prompts(a, b))
    return out


class MaskedAdamW(torch.optim.Optimizer):
    """Eq. (model-dowser-eq-update): AdamW whose whole update, weight decay included, is
    multiplied by a fixed 0/1 mask, so a frozen weight is bit-identical after any number of
    steps. With an all-True mask (or ``None``) it is torch's AdamW.

    ``params``: the tensors; ``masks``: one bool tensor (True = trainable) or ``None`` per tensor.
    """

    def __init__(self, params: Iterable[torch.Tensor], masks: Iterable[torch.Tensor | None], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01):
        params, masks = list(params), list(masks)
        if len(params) != len(masks):
            raise ValueError(f"{len(params)} parameters but {len(masks)} masks")
        if not params:
            raise ValueError("no parameters to optimise")
        for p, m in zip(params, masks):
            if m is not None and m.shape != p.shape:
                raise ValueError(f"mask shape {tuple(m.shape)} does not match parameter {tuple(p.shape)}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.masks = {id(p): (None if m is None else m.to(torch.bool)) for p, m in zip(params, masks)}

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - the class docstring says what it does
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"], st["m"], st["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                st["step"] += 1
                t, g = st["step"], p.grad
                st["m"].mul_(b1).add_(g, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (st["v"] / (1 - b2 ** t)).sqrt_().add_(eps)
                upd = lr * wd * p + (lr / (1 - b1 ** t)) * st["m"] / denom
                m = self.masks[id(p)]
                if m is not None:
                    upd = torch.where(m, upd, torch.zeros_like(upd))
                p.sub_(upd)
        return None


def state_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """[reconstruction] Bytes held by ``tensors`` (optimiser state, masks, copies): the
    extra memory a method needs beyond the model itself."""
    return int(sum(t.numel() * t.element_size() for t in tensors))
