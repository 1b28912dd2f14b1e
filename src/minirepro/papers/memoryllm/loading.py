"""Loading the trained variants from their checked artifact (``artifacts/memoryllm-variants/``).

Kept apart from the recipe (:mod:`minirepro.papers.memoryllm.artifact`), whose code is
hashed into the manifest: loading code can change without a rebuild.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file

from minirepro.core import artifacts
from minirepro.core.lm.bpe import load_bpe
from minirepro.papers.memoryllm.model import Arch, MemoryLM

NAME = "memoryllm-variants"
WEIGHTS = "variants.safetensors"
META = "variants.json"


def artifact_folder() -> Path:
    """The verified artifact folder (the committed copy, else a rebuilt one in the cache)."""
    return artifacts.verified_folder(NAME)


def load_meta(folder: Path | None = None) -> dict:
    """Architectures, seeds, corpus config and training curves of every variant."""
    folder = Path(folder) if folder is not None else artifact_folder()
    return json.loads((folder / META).read_text(encoding="utf-8"))


def load_variants(folder: Path | None = None) -> tuple[dict[str, dict[int, MemoryLM]], dict]:
    """``({variant: {seed: model}}, meta)``: float32, eval mode, frozen."""
    folder = Path(folder) if folder is not None else artifact_folder()
    meta = load_meta(folder)
    state = load_file(str(folder / WEIGHTS))
    out: dict[str, dict[int, MemoryLM]] = {}
    for name, arch in meta["archs"].items():
        for seed in meta["seeds"]:
            m = MemoryLM(Arch(**arch))
            prefix = f"{name}/{seed}/"
            m.load_state_dict({k[len(prefix):]: v.float() for k, v in state.items() if k.startswith(prefix)})
            out.setdefault(name, {})[int(seed)] = m.eval().requires_grad_(False)
    return out, meta


def load_tokenizer(folder: Path | None = None):
    """The BPE tokenizer the variants were trained with (``tokenizer.json``)."""
    return load_bpe(Path(folder) if folder is not None else artifact_folder())
