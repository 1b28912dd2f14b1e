"""Checkpoints from outside the book: one loader for a local folder or a hub id, and ``n_params``.

Every LM chapter takes ``model_name`` (a Hugging Face hub id or a local
checkpoint folder). :func:`load_checkpoint` is the one code path for both:
``AutoTokenizer`` / ``AutoModelForCausalLM.from_pretrained``. It never hangs: a
hub id while ``HF_HUB_OFFLINE=1`` is set, or while the hub does not answer within
``timeout`` seconds, raises :class:`HubUnavailable` with a message saying what
to do instead. Tests never call it with a hub id.
"""

from __future__ import annotations

import os
import socket

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)


class HubUnavailable(RuntimeError):
    """A checkpoint was asked for but cannot be loaded (offline, unknown id, no network, bad folder)."""


def n_params(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def hub_reachable(timeout: float = 10.0) -> bool:
    """False when offline mode is set or the hub (``HF_ENDPOINT``) does not answer within ``timeout`` s."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = endpoint.split("://", 1)[-1].split("/", 1)[0].split(":")[0]
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def load_checkpoint(model_name: str, timeout: float = 10.0
                    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``from_pretrained`` of a local folder or a hub id (the one code path for both); eval mode, float32.

    A tokenizer without a pad token gets its ``<eos>`` as pad.

    Raises:
        ValueError: ``model_name`` is not a non-empty string.
        HubUnavailable: a hub id while the hub is unreachable or ``HF_HUB_OFFLINE=1``
            (checked within ``timeout`` seconds), or a checkpoint that cannot be loaded.
    """
    if not isinstance(model_name, str) or not model_name.strip():
        raise ValueError(f"model_name must be a hub id or a folder, got {model_name!r}")
    if not os.path.isdir(model_name) and not hub_reachable(timeout):
        raise HubUnavailable(
            f"cannot load {model_name!r}: it is not a local folder and the Hugging Face hub is "
            "not reachable (offline or HF_HUB_OFFLINE=1). Use model_name=None for the book's "
            "own model, or download the checkpoint and pass its folder.")
    try:
        tok = AutoTokenizer.from_pretrained(model_name)
        model = AutoModelForCausalLM.from_pretrained(model_name, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise HubUnavailable(f"cannot load {model_name!r}: {exc}") from exc
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model.eval(), tok


__all__ = ["HubUnavailable", "hub_reachable", "load_checkpoint", "n_params"]
