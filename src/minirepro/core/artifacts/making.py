"""What the recipes of trained artifacts share: the optimiser, the step, storing, the data hash.

A chapter's recipe (``artifact.py``) sets its seed, builds its data and model, trains, and
then stores what it made through :func:`write_files` (weights as safetensors, JSON files beside
them), reloads the stored weights to measure their quality, and returns a
:class:`~minirepro.core.artifacts.BuildResult` whose ``data_hash`` is :func:`sha256_hex` of
its training data. torch and safetensors are imported on first use.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch



def one_cycle_adamw(model: torch.nn.Module, lr: float, steps: int, weight_decay: float = 0.01
                    ) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.OneCycleLR]:
    """AdamW (decoupled weight decay) under a one-cycle schedule peaking at ``lr`` after 10 %
    of ``steps`` (Loshchilov & Hutter 2019; Smith & Topin 2019)."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    return opt, torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps, pct_start=0.1)


def clipped_step(model: torch.nn.Module, opt: torch.optim.Optimizer,
                 sched: torch.optim.lr_scheduler.LRScheduler, loss: torch.Tensor) -> float:
    """One gradient step on ``loss``, the gradient's global norm clipped to 1 (Pascanu et al.
    2013), then one step of the schedule; returns the loss as a float."""
    import torch

    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss.item()


def float16_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors as contiguous float16 copies (how most recipes store weights)."""
    import torch

    return {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}


def write_files(out: Path, weights: str, tensors: Mapping[str, torch.Tensor],
          json_files: Mapping[str, object] | None = None, indent: int | None = None) -> None:
    """Write ``tensors`` into ``out/weights`` (safetensors), then each of ``json_files``
    (name: data) as JSON ending in a newline (one line, or indented by ``indent``)."""
    from safetensors.torch import save_file

    save_file(dict(tensors), str(Path(out) / weights))
    for name, data in (json_files or {}).items():
        (Path(out) / name).write_text(json.dumps(data, indent=indent) + "\n", encoding="utf-8")


def sha256_hex(*chunks: bytes) -> str:
    """SHA-256 (hex) of the chunks one after the other: a recipe's ``data_hash``."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()
