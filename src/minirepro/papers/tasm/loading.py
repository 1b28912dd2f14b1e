"""Loading the in-context learner from its checked artifact (``artifacts/tasm-icl-transformer/``).

Kept apart from the recipe module (:mod:`minirepro.papers.tasm.artifact`), whose code is
hashed into the artifact's manifest: loading code can change without a rebuild.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file

from minirepro.core import artifacts
from minirepro.papers.tasm.model import ICLTransformer

NAME = "tasm-icl-transformer"
WEIGHTS = "icl_transformer.safetensors"
CURVE = "train_curve.json"
ARCH = {"n_way": 5, "d": 64, "heads": 4, "layers": 3, "mlp": 128}


def artifact_folder() -> Path:
    """The verified artifact folder: the committed files when their checksums match the
    manifest, otherwise :func:`minirepro.core.artifacts.load` (which warns and rebuilds)."""
    return artifacts.verified_folder(NAME)


def load_model(folder: Path | None = None) -> ICLTransformer:
    """The trained in-context learner (float32, frozen)."""
    folder = Path(folder) if folder is not None else artifact_folder()
    model = ICLTransformer(**ARCH)
    model.load_state_dict({k: v.float() for k, v in load_file(str(folder / WEIGHTS)).items()})
    return model.eval().requires_grad_(False)


def load_curve(folder: Path | None = None) -> dict:
    """The artifact's training curve: loss and query accuracy per format, every ``every`` steps."""
    folder = Path(folder) if folder is not None else artifact_folder()
    return json.loads((folder / CURVE).read_text(encoding="utf-8"))


# --- the spread variant's learner (artifacts/tasm-icl-spread/) ---------------------------

SPREAD_NAME = "tasm-icl-spread"
SPREAD_WEIGHTS = "spread_transformer.safetensors"


def spread_folder() -> Path:
    """The verified folder of the spread variant's learner (as :func:`artifact_folder`)."""
    return artifacts.verified_folder(SPREAD_NAME)


def load_spread_model(folder: Path | None = None):  # -> SpreadICLTransformer
    """The spread variant's trained learner (float32, frozen)."""
    from minirepro.papers.tasm.spread import SPREAD_ARCH, SpreadICLTransformer

    folder = Path(folder) if folder is not None else spread_folder()
    manifest = folder / artifacts.MANIFEST
    spec = json.loads(manifest.read_text(encoding="utf-8"))["config"] if manifest.exists() else {}
    arch = {**SPREAD_ARCH, **{k: int(spec[k]) for k in ("layers", "local") if k in spec}}
    model = SpreadICLTransformer(radius=int(spec.get("radius", 1)), **arch)
    model.load_state_dict({k: v.float() for k, v in load_file(str(folder / SPREAD_WEIGHTS)).items()})
    return model.eval().requires_grad_(False)
