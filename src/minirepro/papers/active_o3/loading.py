"""The task model M_A's checked artifact (``artifacts/active-o3-task-cnn/``): its name, files and model.

Kept apart from the recipe module (:mod:`minirepro.papers.active_o3.artifact`), whose code is
hashed into the artifact's manifest: loading code can change without a rebuild. The loading
itself is :class:`minirepro.core.artifacts.ModelArtifact`: ``load_model(folder=None)`` is M_A
(checksums verified, float32, frozen), ``load_curve(folder=None)`` its training-loss curve (one
value every 50 steps), ``artifact_folder()`` the verified folder.
"""

from __future__ import annotations

from minirepro.core import artifacts
from minirepro.papers.active_o3.taskmodel import TaskCNN

TASK_CNN = artifacts.ModelArtifact("active-o3-task-cnn", "task_cnn.safetensors", TaskCNN)
NAME, WEIGHTS, CURVE = TASK_CNN.name, TASK_CNN.weights, TASK_CNN.curve
artifact_folder, load_model, load_curve = TASK_CNN.artifact_folder, TASK_CNN.load_model, TASK_CNN.load_curve
