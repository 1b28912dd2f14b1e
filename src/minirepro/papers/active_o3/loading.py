"""Loading the task model M_A from its checked artifact (``artifacts/active-o3-task-cnn/``).

Kept apart from the recipe module (:mod:`minirepro.papers.active_o3.artifact`), whose code is
hashed into the artifact's manifest: loading code can change without a rebuild.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file

from minirepro.core import artifacts
from minirepro.papers.active_o3.taskmodel import TaskCNN

NAME = "active-o3-task-cnn"
WEIGHTS = "task_cnn.safetensors"
CURVE = "train_curve.json"


def artifact_folder() -> Path:
    """The verified artifact folder. When the committed files match their manifest's checksums
    they are used directly (this skips the registry, which imports every recipe module,
    language models included); otherwise :func:`minirepro.core.artifacts.load` warns and rebuilds."""
    return artifacts.verified_folder(NAME)


def load_model(folder: Path | None = None) -> TaskCNN:
    """M_A from the artifact (checksums verified), float32, frozen."""
    folder = Path(folder) if folder is not None else artifact_folder()
    model = TaskCNN()
    model.load_state_dict({k: v.float() for k, v in load_file(str(folder / WEIGHTS)).items()})
    return model.eval().requires_grad_(False)


def load_curve(folder: Path | None = None) -> dict:
    """The artifact's training-loss curve (one value every 50 steps)."""
    folder = Path(folder) if folder is not None else artifact_folder()
    return json.loads((folder / CURVE).read_text(encoding="utf-8"))
