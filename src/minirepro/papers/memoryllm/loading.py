"""The trained variants' checked artifact (``artifacts/memoryllm-variants/``): its name, files
and models.

Kept apart from the recipe (:mod:`minirepro.papers.memoryllm.artifact`), whose code is
hashed into the manifest: loading code can change without a rebuild. The loading itself is
:mod:`minirepro.core.artifacts.loading`.
"""

from __future__ import annotations

from pathlib import Path

from minirepro.core import artifacts
from minirepro.core.lm.bpe import load_bpe
from minirepro.papers.memoryllm.model import Arch, MemoryLM

NAME = "memoryllm-variants"
WEIGHTS = "variants.safetensors"
META = "variants.json"


def artifact_folder() -> Path:
    """The verified artifact folder (the committed copy, else a rebuilt one in the cache)."""
    return artifacts.folder_of(NAME)


def load_meta(folder: Path | None = None) -> dict:
    """Architectures, seeds, corpus config and training curves of every variant."""
    return artifacts.read_json(NAME, META, folder)


def load_variants(folder: Path | None = None) -> tuple[dict[str, dict[int, MemoryLM]], dict]:
    """``({variant: {seed: model}}, meta)``: float32, eval mode, frozen."""
    folder = artifacts.folder_of(NAME, folder)
    meta, state = load_meta(folder), artifacts.read_weights(NAME, WEIGHTS, folder)
    out: dict[str, dict[int, MemoryLM]] = {}
    for name, arch in meta["archs"].items():
        for seed in meta["seeds"]:
            model = artifacts.frozen(MemoryLM(Arch(**arch)), state, prefix=f"{name}/{seed}/")
            out.setdefault(name, {})[int(seed)] = model
    return out, meta


def load_tokenizer(folder: Path | None = None):
    """The BPE tokenizer the variants were trained with (``tokenizer.json``)."""
    return load_bpe(artifacts.folder_of(NAME, folder))
