"""Models: ``transformers`` causal LMs from a config, a reward head, and inspection helpers.

Architectures (``ModelConfig.arch``):

``"llama"`` (the default)
    ``LlamaForCausalLM``: RMSNorm, rotary positions (RoPE: nothing positional
    enters the token embeddings), SwiGLU feed-forward
    ``down(silu(gate(x)) * up(x))``, grouped-query attention (``n_kv_heads``).
``"opt"``
    ``OPTForCausalLM`` with a ReLU feed-forward ``fc2(relu(fc1(x)))`` and learned
    positions: exact zeros, for activation-sparsity work.

Helpers, all plain forward passes with hooks on the MLP's own linear layers
(nothing is patched; the model is unchanged afterwards):

:func:`ffn_activations`
    per layer, the FFN pre-activations (``gate`` = ``gate_proj(x)`` for llama,
    ``fc1(x)`` for opt), ``up`` (llama only) and the hidden activation the down
    projection reads (``silu(gate) * up``, or ``relu(fc1(x))``), each ``(B, T, d_ff)``.
:func:`residual_stream`
    the residual stream per layer, ``(n_layers + 1)`` tensors ``(B, T, d_model)``
    (``[0]`` is the embeddings; the last one is after the final norm, as
    ``transformers`` returns it).
:func:`prefill` and :func:`layer_kv`
    the KV cache (``transformers.DynamicCache``) of a prompt, and one layer's keys
    and values ``(B, n_kv_heads, T, head_dim)``.
:func:`reward_model`
    ``AutoModelForSequenceClassification`` on the same backbone, loaded from a
    causal-LM checkpoint folder: the backbone weights are the LM's, the scalar
    ``score`` head is new (``num_labels=1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    DynamicCache,
    LlamaConfig,
    OPTConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from minirepro.core.scale import ScaledConfig

ARCHS: tuple[str, ...] = ("llama", "opt")


@dataclass
class ModelConfig(ScaledConfig):
    """Size and kind of a substrate causal LM.

    Attributes:
        arch: ``"llama"`` (RoPE, SwiGLU, RMSNorm, GQA) or ``"opt"`` (ReLU FFN).
        d_model: hidden width.
        n_layers: decoder blocks.
        n_heads: query heads (``d_model`` divisible by it).
        n_kv_heads: key-value heads (llama; grouped-query attention). OPT uses ``n_heads``.
        d_ff: feed-forward width.
        max_len: context length (positions).
        tie_embeddings: share input embedding and output projection.
    """

    arch: str = "llama"
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 640
    max_len: int = 256
    tie_embeddings: bool = True

    PRESETS: ClassVar = {
        "smoke": {"d_model": 64, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1, "d_ff": 128},
        "book": {},
        "full": {"d_model": 384, "n_layers": 6, "n_heads": 6, "n_kv_heads": 2, "d_ff": 1024},
    }

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        for name in ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_len"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}")


def hf_config(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
    """The ``transformers`` config of ``cfg`` with the tokenizer's vocabulary and special ids."""
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
                       num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
                       intermediate_size=cfg.d_ff, hidden_act="silu", rope_theta=10000.0,
                       attention_dropout=0.0, rms_norm_eps=1e-5, **common)


def build_lm(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> PreTrainedModel:
    """A freshly initialised causal LM of ``cfg`` (``AutoModelForCausalLM.from_config``), eval mode."""
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(hf_config(cfg, tokenizer)).eval()


def load_lm(folder: str | Path, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """A causal LM saved with ``save_pretrained`` in ``folder`` (any architecture), eval mode."""
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype).eval()


def reward_model(folder: str | Path, num_labels: int = 1,
                 dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """A sequence-classification model on the backbone saved in ``folder``.

    ``AutoModelForSequenceClassification.from_pretrained`` builds the
    ``...ForSequenceClassification`` class of the checkpoint's config, loads the
    backbone (``model.*``) weights from the causal-LM checkpoint, and initialises
    only the ``score`` head (``num_labels`` outputs, read at the last non-pad
    token; the config's ``pad_token_id`` marks padding). The causal LM's
    ``lm_head`` is not used.
    """
    config = AutoConfig.from_pretrained(str(folder), num_labels=num_labels)
    if config.pad_token_id is None:
        raise ValueError("the checkpoint's config has no pad_token_id; the reward head needs one")
    return AutoModelForSequenceClassification.from_pretrained(
        str(folder), config=config, dtype=dtype).eval()


def _decoder_layers(model: PreTrainedModel) -> list[torch.nn.Module]:
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
    layers = getattr(base, "layers", None)
    if layers is None:
        raise TypeError(f"cannot find the decoder layers of {type(model).__name__}")
    return list(layers)


def ffn_modules(model: PreTrainedModel) -> list[dict[str, torch.nn.Module]]:
    """Per layer, the FFN's linear maps: ``{"gate", "up", "down"}`` (llama) or ``{"fc1", "fc2"}`` (opt)."""
    out = []
    for layer in _decoder_layers(model):
        mlp = getattr(layer, "mlp", None)
        if mlp is not None and hasattr(mlp, "gate_proj"):
            out.append({"gate": mlp.gate_proj, "up": mlp.up_proj, "down": mlp.down_proj})
        elif hasattr(layer, "fc1"):
            out.append({"fc1": layer.fc1, "fc2": layer.fc2})
        else:
            raise TypeError(f"unsupported FFN in {type(layer).__name__}")
    return out


@dataclass
class FFNActivations:
    """One layer's FFN activations, each ``(B, T, d_ff)``.

    Attributes:
        pre: the pre-activation (``gate_proj(x)`` for SwiGLU, ``fc1(x)`` for ReLU).
        up: ``up_proj(x)`` (SwiGLU only, else ``None``).
        hidden: what the down projection reads (``silu(pre) * up`` or ``relu(pre)``).
    """

    pre: torch.Tensor
    up: torch.Tensor | None
    hidden: torch.Tensor


@torch.no_grad()
def ffn_activations(model: PreTrainedModel, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor | None = None) -> list[FFNActivations]:
    """FFN activations of every layer for one forward pass (hooks on the MLP's own linears).

    Args:
        input_ids: ``(B, T)`` token ids.
        attention_mask: ``(B, T)`` or ``None``.

    Returns:
        one :class:`FFNActivations` per layer, tensors ``(B, T, d_ff)``.
    """
    _check_ids(model, input_ids)
    b, t = input_ids.shape
    mods = ffn_modules(model)
    store: list[dict[str, torch.Tensor]] = [{} for _ in mods]
    handles = []

    def out_hook(i: int, key: str):
        def hook(_m, _inp, out):
            store[i][key] = out.detach().reshape(b, t, -1)
        return hook

    def in_hook(i: int, key: str):
        def hook(_m, inp):
            store[i][key] = inp[0].detach().reshape(b, t, -1)
        return hook

    try:
        for i, m in enumerate(mods):
            if "gate" in m:
                handles += [m["gate"].register_forward_hook(out_hook(i, "pre")),
                            m["up"].register_forward_hook(out_hook(i, "up")),
                            m["down"].register_forward_pre_hook(in_hook(i, "hidden"))]
            else:
                handles += [m["fc1"].register_forward_hook(out_hook(i, "pre")),
                            m["fc2"].register_forward_pre_hook(in_hook(i, "hidden"))]
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return [FFNActivations(s["pre"], s.get("up"), s["hidden"]) for s in store]


@torch.no_grad()
def residual_stream(model: PreTrainedModel, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """The residual stream: ``n_layers + 1`` tensors ``(B, T, d_model)`` (``hidden_states``).

    ``[0]`` is the token embeddings (plus learned positions for OPT), ``[i]`` the
    stream after block ``i``; ``transformers`` applies the final norm to the last one.
    """
    _check_ids(model, input_ids)
    out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                output_hidden_states=True)
    return tuple(h.detach() for h in out.hidden_states)


@torch.no_grad()
def prefill(model: PreTrainedModel, input_ids: torch.Tensor,
            attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, DynamicCache]:
    """One forward pass over a prompt: the logits ``(B, T, V)`` and its ``DynamicCache``."""
    _check_ids(model, input_ids)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True,
                cache=cache)
    return out.logits, cache


def layer_kv(cache: DynamicCache, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of ``layer``: ``(B, n_kv_heads, T, head_dim)`` each (RoPE already applied to keys)."""
    if not 0 <= layer < len(cache.layers):
        raise IndexError(f"layer {layer} out of range 0..{len(cache.layers) - 1}")
    return cache.layers[layer].keys, cache.layers[layer].values


def _check_ids(model: PreTrainedModel, input_ids: torch.Tensor) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must be a (B, T) tensor with T >= 1, got "
                         f"{getattr(input_ids, 'shape', type(input_ids))}")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and input_ids.shape[1] > limit:
        raise ValueError(f"sequence of {input_ids.shape[1]} tokens is longer than the model's "
                         f"context ({limit} = max_position_embeddings)")
