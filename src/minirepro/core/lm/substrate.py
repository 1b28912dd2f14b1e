"""Loading the v2 substrate: the shipped artifacts, or any checkpoint through the same path.

::

    from minirepro.core.lm import load_substrate
    sub = load_substrate("book")            # lm-v2-book: weights, tokenizer, corpus; no training
    sub.model, sub.tokenizer, sub.corpus     # LlamaForCausalLM, fast tokenizer, CorpusV2
    sub.curve, sub.eval                      # the loss curve and the figures recorded at build time

    sub = load_substrate("book", model_name="/path/to/checkpoint")   # a local folder
    sub = load_substrate("book", model_name="some-org/some-model")   # a hub id (needs network)

``model_name`` replaces the shipped model and tokenizer with a checkpoint loaded
by ``from_pretrained`` (``AutoModelForCausalLM``, ``AutoTokenizer``); a local
folder and a hub id go through the same code. The corpus stays the preset's,
so the chapter evaluates the checkpoint on the same tasks. Offline, a hub id
fails fast with :class:`~minirepro.core.lm.models.HubUnavailable`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from minirepro.core.lm.bpe import load_bpe
from minirepro.core.lm.corpus_v2 import CorpusV2, CorpusV2Config, build_corpus_v2
from minirepro.core.lm.models import HubUnavailable, _hub_reachable

PRESETS_V2: dict[str, str] = {"book": "lm-v2-book", "smoke": "lm-v2-smoke",
                              "book-opt": "lm-v2-book-opt", "smoke-opt": "lm-v2-smoke-opt"}


@dataclass
class Substrate:
    """A loaded substrate.

    Attributes:
        model: the causal LM (eval mode, float32).
        tokenizer: its fast tokenizer.
        corpus: the corpus the shipped model was trained on (splits generated lazily).
        preset: ``"book"``, ``"smoke"``, ``"book-opt"`` or ``"smoke-opt"``.
        path: the artifact folder (or the checkpoint folder / hub id given as ``model_name``).
        curve: the training curve recorded at build time (empty for a ``model_name``).
        eval: the evaluation recorded at build time (empty for a ``model_name``).
        model_name: the checkpoint given, if any.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    corpus: CorpusV2
    preset: str
    path: Path | str
    curve: dict = field(default_factory=dict)
    eval: dict = field(default_factory=dict)
    model_name: str | None = None


def corpus_config_from(folder: Path) -> CorpusV2Config:
    """The corpus config recorded in an artifact's ``substrate.json``."""
    raw = json.loads((folder / "substrate.json").read_text())["corpus"]
    return CorpusV2Config(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})


def load_checkpoint(model_name: str, timeout: float = 10.0
                    ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``from_pretrained`` of a local folder or a hub id (the one code path for both).

    Raises:
        HubUnavailable: a hub id while the hub is unreachable or ``HF_HUB_OFFLINE=1``
            (checked within ``timeout`` seconds; it never hangs), or a checkpoint
            that cannot be loaded.
    """
    if not isinstance(model_name, str) or not model_name.strip():
        raise ValueError(f"model_name must be a hub id or a folder, got {model_name!r}")
    if not os.path.isdir(model_name) and not _hub_reachable(timeout):
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


def load_substrate(preset: str = "book", model_name: str | None = None) -> Substrate:
    """The substrate ``preset`` (``"book"``, ``"smoke"``, ``"book-opt"`` or ``"smoke-opt"``), from its artifact.

    Args:
        preset: which shipped model (and corpus) to load.
        model_name: a hub id or a local checkpoint folder to use instead of the
            shipped model and tokenizer (the corpus stays the preset's).

    Raises:
        ValueError: an unknown preset.
        HubUnavailable: ``model_name`` is a hub id and the hub is unreachable.
    """
    if preset not in PRESETS_V2:
        raise ValueError(f"unknown substrate preset {preset!r}; presets: {', '.join(PRESETS_V2)}")
    import minirepro.core.lm.recipes  # noqa: F401  (registers the recipes)
    from minirepro.core import artifacts

    folder = artifacts.load(PRESETS_V2[preset])
    corpus = build_corpus_v2(corpus_config_from(folder))
    if model_name is not None:
        model, tok = load_checkpoint(model_name)
        return Substrate(model, tok, corpus, preset, model_name, model_name=model_name)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    tok = load_bpe(folder)
    curve = json.loads((folder / "curve.json").read_text())
    ev = json.loads((folder / "eval.json").read_text())
    return Substrate(model, tok, corpus, preset, folder, curve, ev)
