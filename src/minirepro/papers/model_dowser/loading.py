"""Loading the pretrained tiny MLLM from its checked artifact (``artifacts/model-dowser-mllm/``).

Kept apart from the recipe module (:mod:`minirepro.papers.model_dowser.artifact`), whose
code is hashed into the artifact's manifest: loading code can change without a rebuild.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file

from minirepro.core import artifacts
from minirepro.papers.model_dowser.model import TinyMLLM

NAME = "model-dowser-mllm"
WEIGHTS = "mllm.safetensors"
CURVE = "train_curve.json"
ARCH = {"d": 64, "heads": 4, "layers": 4, "mlp": 128, "vis": 32}


def artifact_folder() -> Path:
    """The verified artifact folder: the committed files when their checksums match the
    manifest, otherwise :func:`minirepro.core.artifacts.load` (which warns and rebuilds)."""
    return artifacts.verified_folder(NAME)


def load_model(folder: Path | None = None) -> TinyMLLM:
    """The pretrained model (float32, eval mode, every parameter frozen)."""
    folder = Path(folder) if folder is not None else artifact_folder()
    model = TinyMLLM(**ARCH)
    model.load_state_dict({k: v.float() for k, v in load_file(str(folder / WEIGHTS)).items()})
    return model.eval().requires_grad_(False)


def load_curve(folder: Path | None = None) -> dict:
    """The pretraining curve: loss and upstream training accuracy every ``every`` steps."""
    folder = Path(folder) if folder is not None else artifact_folder()
    return json.loads((folder / CURVE).read_text(encoding="utf-8"))
