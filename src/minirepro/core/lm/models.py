"""Small Hugging Face causal LMs built from a config, and hub checkpoints on request.

Two architectures:

``"opt"``
    ``transformers.OPTForCausalLM`` with a ReLU feed-forward block
    (``fc1 -> ReLU -> fc2``), pre-layer-norm, learned positions. ReLU gives
    exact zeros, so activation sparsity is visible (SparseInfer, Model-Dowser).
``"llama"``
    ``transformers.LlamaForCausalLM``: RMSNorm, rotary positions (RoPE), SwiGLU
    feed-forward (``down(silu(gate(x)) * up(x))``), grouped-query attention.

Both use the KV cache of ``transformers`` in ``generate``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from minirepro.core.scale import ScaledConfig

ARCHS: tuple[str, ...] = ("opt", "llama")


@dataclass
class LMConfig(ScaledConfig):
    """Size and kind of a tiny causal LM.

    Attributes:
        arch: ``"opt"`` (ReLU FFN) or ``"llama"`` (RoPE, SwiGLU).
        d_model: hidden width.
        n_layers: decoder blocks.
        n_heads: attention heads (``d_model`` must be divisible by it).
        n_kv_heads: key-value heads for ``llama`` (grouped-query attention); ``None`` = ``n_heads``.
        d_ff: feed-forward width (the neurons SparseInfer selects among).
        max_len: longest sequence (positions) the model accepts.
        tie_embeddings: share the input embedding and output projection.
    """

    arch: str = "opt"
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_ff: int = 512
    max_len: int = 96
    tie_embeddings: bool = True

    PRESETS: ClassVar = {
        "smoke": {"d_model": 64, "n_layers": 2, "n_heads": 2, "d_ff": 256},
        "book": {},
        "full": {"d_model": 256, "n_layers": 6, "n_heads": 8, "d_ff": 1024, "max_len": 128},
    }

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        for name in ("d_model", "n_layers", "n_heads", "d_ff", "max_len"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        kv = self.n_kv_heads or self.n_heads
        if self.n_heads % kv:
            raise ValueError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={kv}")


def hf_config(cfg: LMConfig, tokenizer: PreTrainedTokenizerBase) -> OPTConfig | LlamaConfig:
    """The ``transformers`` config for ``cfg`` with the tokenizer's vocabulary and special ids."""
    common = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  tie_word_embeddings=cfg.tie_embeddings, max_position_embeddings=cfg.max_len)
    if cfg.arch == "opt":
        return OPTConfig(hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
                         num_attention_heads=cfg.n_heads, ffn_dim=cfg.d_ff,
                         word_embed_proj_dim=cfg.d_model, activation_function="relu",
                         do_layer_norm_before=True, dropout=0.0, attention_dropout=0.0,
                         activation_dropout=0.0, layerdrop=0.0, enable_bias=True, **common)
    return LlamaConfig(hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers,
                       num_attention_heads=cfg.n_heads,
                       num_key_value_heads=cfg.n_kv_heads or cfg.n_heads,
                       intermediate_size=cfg.d_ff, hidden_act="silu", rope_theta=10000.0,
                       attention_dropout=0.0, **common)


def build_model(cfg: LMConfig, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> PreTrainedModel:
    """A freshly initialised model of ``cfg`` (weights drawn with torch seed ``seed``), in eval mode."""
    torch.manual_seed(seed)
    hf = hf_config(cfg, tokenizer)
    model = OPTForCausalLM(hf) if cfg.arch == "opt" else LlamaForCausalLM(hf)
    return model.eval()


def n_params(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


class HubUnavailable(RuntimeError):
    """A hub id was asked for but cannot be loaded (offline, unknown id, no network)."""


def load_pretrained(model_name: str, timeout: float = 10.0) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a real checkpoint ``model_name`` (a hub id or a local folder) with ``from_pretrained``.

    Never hangs: with ``HF_HUB_OFFLINE=1`` set, or when the hub cannot be reached
    within ``timeout`` seconds, it raises :class:`HubUnavailable` saying so.
    Only called when a chapter's ``model_name`` is given; the tests never call it
    with a hub id.
    """
    if not isinstance(model_name, str) or not model_name.strip():
        raise ValueError(f"model_name must be a non-empty hub id or folder, got {model_name!r}")
    local = os.path.isdir(model_name)
    if not local and not _hub_reachable(timeout):
        raise HubUnavailable(
            f"cannot load {model_name!r}: the Hugging Face hub is not reachable (offline or "
            "HF_HUB_OFFLINE=1). Pass model_name=None to use the book's own tiny model, or "
            "download the checkpoint first and pass its local folder.")
    try:
        tok = AutoTokenizer.from_pretrained(model_name)
        model = AutoModelForCausalLM.from_pretrained(model_name, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise HubUnavailable(f"cannot load {model_name!r}: {exc}") from exc
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model.eval(), tok


def _hub_reachable(timeout: float) -> bool:
    """False when offline mode is set or huggingface.co does not answer within ``timeout`` s."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        return False
    import socket

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = endpoint.split("://", 1)[-1].split("/", 1)[0].split(":")[0]
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False
