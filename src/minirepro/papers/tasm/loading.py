"""The in-context learners' checked artifacts (``artifacts/tasm-icl-transformer/`` and
``artifacts/tasm-icl-spread/``): their names, files and models.

Kept apart from the recipe modules (:mod:`minirepro.papers.tasm.artifact`,
:mod:`minirepro.papers.tasm.spread_artifact`), whose code is hashed into the artifacts'
manifests: loading code can change without a rebuild. The loading itself is
:class:`minirepro.core.artifacts.ModelArtifact`: ``load_model(folder=None)`` is the trained
in-context learner (float32, frozen), ``load_curve(folder=None)`` its training curve (loss and
query accuracy per format, every ``every`` steps), ``artifact_folder()`` the verified folder.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from minirepro.core import artifacts
from minirepro.papers.tasm.model import ICLTransformer

ARCH = {"n_way": 5, "d": 64, "heads": 4, "layers": 3, "mlp": 128}
LEARNER = artifacts.ModelArtifact("tasm-icl-transformer", "icl_transformer.safetensors",
                                  partial(ICLTransformer, **ARCH))
NAME, WEIGHTS, CURVE = LEARNER.name, LEARNER.weights, LEARNER.curve
artifact_folder, load_model, load_curve = LEARNER.artifact_folder, LEARNER.load_model, LEARNER.load_curve


# --- the spread variant's learner (artifacts/tasm-icl-spread/) ---------------------------

SPREAD_NAME = "tasm-icl-spread"
SPREAD_WEIGHTS = "spread_transformer.safetensors"


def spread_folder() -> Path:
    """The verified folder of the spread variant's learner (as :func:`artifact_folder`)."""
    return artifacts.folder_of(SPREAD_NAME)


def load_spread_model(folder: Path | None = None):  # -> SpreadICLTransformer
    """The spread variant's trained learner (float32, frozen), shaped as its manifest's config."""
    from minirepro.papers.tasm.spread import SPREAD_ARCH, SpreadICLTransformer

    folder = artifacts.folder_of(SPREAD_NAME, folder)
    has_manifest = (folder / artifacts.MANIFEST).exists()
    spec = artifacts.read_json(SPREAD_NAME, artifacts.MANIFEST, folder)["config"] if has_manifest else {}
    arch = {**SPREAD_ARCH, **{k: int(spec[k]) for k in ("layers", "local") if k in spec}}
    model = SpreadICLTransformer(radius=int(spec.get("radius", 1)), **arch)
    return artifacts.load_weights(SPREAD_NAME, model, SPREAD_WEIGHTS, folder)
