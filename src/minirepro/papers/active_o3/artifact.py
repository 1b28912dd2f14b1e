"""The frozen task model M_A as a checked artifact (``artifacts/active-o3-task-cnn/``).

The recipe trains :class:`~minirepro.papers.active_o3.taskmodel.TaskCNN` once on crops of
training canvases (the ``"train"`` half of the digits) and stores it as fp16 safetensors.
Re-make with ``minirepro artifacts build active-o3-task-cnn``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from minirepro.core import artifacts, set_seed
from minirepro.papers.active_o3.boxes import grid_actions
from minirepro.papers.active_o3.canvas import DIGIT, digit_images, make_canvases
from minirepro.papers.active_o3.loading import CURVE, NAME, WEIGHTS, load_model
from minirepro.papers.active_o3.taskmodel import (
    CROP,
    NONE,
    TaskCNN,
    crop_resize,
    crop_targets,
    predict,
)

DATA_SEED = 10_000  # canvases of the task model; the chapter's seeds are far below it


@dataclass
class TaskModelRecipe:
    """How M_A is trained: canvases, crops per canvas, Adam steps."""

    n_canvases: int = 1000
    boxes_per_canvas: int = 16
    steps: int = 3000
    batch: int = 256
    lr: float = 2e-3
    seed: int = 0


def training_crops(spec: TaskModelRecipe) -> tuple[torch.Tensor, torch.Tensor]:
    """[reconstruction] Crops (grid boxes and jittered boxes around digits) and their labels."""
    cv = make_canvases(spec.n_canvases, DATA_SEED, "train")
    grid = grid_actions()
    rng = np.random.default_rng(DATA_SEED)
    idx, bxs, ys = [], [], []
    for i in range(len(cv)):
        jit = []
        for g in cv.boxes[i]:  # boxes around each digit, of random size and offset
            for _ in range(4):
                s = int(rng.integers(DIGIT + 2, DIGIT * 7 // 2))  # 1.25 to 3.4 digit sides
                cx, cy = (g[0] + g[2]) / 2 + rng.normal(0, DIGIT / 4), (g[1] + g[3]) / 2 + rng.normal(0, DIGIT / 4)
                x1 = int(np.clip(round(cx - s / 2), 0, 96 - s))
                y1 = int(np.clip(round(cy - s / 2), 0, 96 - s))
                jit.append((x1, y1, x1 + s, y1 + s))
        pick = grid[rng.choice(len(grid), spec.boxes_per_canvas, replace=False)]
        b = np.concatenate([pick, np.array(jit, dtype=np.int64).reshape(-1, 4)])
        y = crop_targets(cv.boxes[i], cv.labels[i], b)
        keep = y >= 0
        idx += [i] * int(keep.sum())
        bxs.append(b[keep])
        ys.append(y[keep])
    crops = crop_resize(cv.images, torch.tensor(idx), torch.from_numpy(np.concatenate(bxs)))
    return crops, torch.from_numpy(np.concatenate(ys))


def digit_test_crops() -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out digits (``"test"`` half) alone, centred in a box 2 pixels wider on each side
    (as a digit's tight box on a canvas), as 24x24 crops: the task model's general ability,
    measured without any canvas."""
    imgs, labels = digit_images("test")
    pad = np.zeros((len(imgs), DIGIT + 4, DIGIT + 4), dtype=np.float32)
    pad[:, 2:DIGIT + 2, 2:DIGIT + 2] = imgs
    crops = F.interpolate(torch.from_numpy(pad)[:, None], size=(CROP, CROP), mode="bilinear",
                          align_corners=False)[:, 0]
    return crops, torch.from_numpy(labels)


@artifacts.recipe(NAME, config=TaskModelRecipe(),
                  sources=("minirepro.papers.active_o3.canvas", "minirepro.papers.active_o3.boxes",
                           "minirepro.papers.active_o3.taskmodel"),
                  description="Active-o3 chapter: the frozen task CNN M_A on 24x24 crops (fp16)")
def build_task_cnn(spec: TaskModelRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] Train M_A with Adam on labelled crops; store fp16 weights and the loss curve."""
    set_seed(spec.seed)
    crops, y = training_crops(spec)
    model = TaskCNN()
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr)
    gen = torch.Generator().manual_seed(spec.seed)
    curve = []
    for step in range(spec.steps):
        j = torch.randint(len(y), (spec.batch,), generator=gen)
        loss = F.cross_entropy(model(crops[j]), y[j])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            curve.append(round(loss.item(), 4))
    model.eval()
    artifacts.write_files(out, WEIGHTS, artifacts.float16_state(model), {CURVE: {"every": 50, "loss": curve}})
    loaded = load_model(out)  # quality of the stored (fp16) weights
    tc, tl = digit_test_crops()
    acc = float((predict(loaded, tc, digits_only=True) == tl).float().mean())
    digest = artifacts.sha256_hex(crops.numpy().tobytes(), y.numpy().tobytes())
    return artifacts.BuildResult(quality={"held-out digit accuracy": round(acc, 4),
                                          "train crops": int(len(y)),
                                          "share none": round(float((y == NONE).float().mean()), 3)},
                                 data_hash=digest)
