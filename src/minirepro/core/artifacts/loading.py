"""Reading a trained artifact's files: its weights into a frozen float32 model, its JSON files.

The one loader of every chapter's artifact (a chapter's ``loading`` module names only its
artifact, files and model). Kept apart from the recipe modules, whose code is hashed into the
manifests: loading code can change without a rebuild. torch and safetensors are imported on
first use, so ``minirepro.core.artifacts`` stays light.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from minirepro.core.artifacts.store import verified_folder

if TYPE_CHECKING:
    import torch

M = TypeVar("M", bound="torch.nn.Module")


def folder_of(name: str, folder: str | Path | None = None) -> Path:
    """``folder`` when given, else the verified folder of artifact ``name``: the committed files
    when their checksums match the manifest (without importing the recipe, which pulls in the
    training code), otherwise :func:`minirepro.core.artifacts.load`, which warns and rebuilds."""
    return Path(folder) if folder is not None else verified_folder(name)


def read_json(name: str, filename: str, folder: str | Path | None = None) -> Any:
    """The JSON file ``filename`` of artifact ``name`` (a curve, the variants' metadata)."""
    return json.loads((folder_of(name, folder) / filename).read_text(encoding="utf-8"))


def read_weights(name: str, filename: str, folder: str | Path | None = None) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``filename`` of artifact ``name``, as stored."""
    from safetensors.torch import load_file

    return load_file(str(folder_of(name, folder) / filename))


def frozen(model: M, state: Mapping[str, torch.Tensor], prefix: str = "") -> M:
    """``model`` with the tensors of ``state`` named ``prefix + key`` loaded as float32 (the
    prefix dropped), in eval mode, every parameter frozen."""
    model.load_state_dict({k[len(prefix):]: v.float() for k, v in state.items() if k.startswith(prefix)})
    return model.eval().requires_grad_(False)


def load_weights(name: str, model: M, filename: str, folder: str | Path | None = None) -> M:
    """``model`` with the weights file ``filename`` of artifact ``name`` loaded (:func:`frozen`)."""
    return frozen(model, read_weights(name, filename, folder))


@dataclass(frozen=True)
class ModelArtifact(Generic[M]):
    """A checked artifact that holds one trained model: its name, weights file, a maker of a fresh
    model of the stored shape, and its training-curve file. A chapter declares one and loads
    through it::

        TASK_CNN = artifacts.ModelArtifact("active-o3-task-cnn", "task_cnn.safetensors", TaskCNN)
        model = TASK_CNN.load_model()   # float32, eval mode, frozen
    """

    name: str
    weights: str
    make: Callable[[], M]
    curve: str = "train_curve.json"

    def artifact_folder(self) -> Path:
        """The verified artifact folder (:func:`folder_of`)."""
        return folder_of(self.name)

    def load_model(self, folder: str | Path | None = None) -> M:
        """The trained model from the artifact (checksums verified): float32, eval mode, frozen."""
        return load_weights(self.name, self.make(), self.weights, folder)

    def load_curve(self, folder: str | Path | None = None) -> dict:
        """The training curve the recipe recorded (loss, and more, every ``every`` steps)."""
        return read_json(self.name, self.curve, folder)
