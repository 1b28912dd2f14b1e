"""The pretrained tiny MLLM's checked artifact (``artifacts/model-dowser-mllm/``): its name, files
and model.

Kept apart from the recipe module (:mod:`minirepro.papers.model_dowser.artifact`), whose
code is hashed into the artifact's manifest: loading code can change without a rebuild. The
loading itself is :class:`minirepro.core.artifacts.ModelArtifact`: ``load_model(folder=None)``
is the pretrained model (float32, eval mode, every parameter frozen), ``load_curve(folder=None)``
the pretraining curve (loss every ``every`` steps), ``artifact_folder()`` the verified folder.
"""

from __future__ import annotations

from functools import partial

from minirepro.core import artifacts
from minirepro.papers.model_dowser.model import TinyMLLM

ARCH = {"d": 64, "heads": 4, "layers": 4, "mlp": 128, "vis": 32}
MLLM = artifacts.ModelArtifact("model-dowser-mllm", "mllm.safetensors", partial(TinyMLLM, **ARCH))
NAME, WEIGHTS, CURVE = MLLM.name, MLLM.weights, MLLM.curve
artifact_folder, load_model, load_curve = MLLM.artifact_folder, MLLM.load_model, MLLM.load_curve
