"""The dual-form reward: task reward + heuristic reward + format reward (§3.2).

*Format*: 1 when the answer parses strictly (:func:`~minirepro.papers.active_o3.boxes.parse_boxes`).
*Heuristic* (task-agnostic): coverage of the ground-truth digits, minus penalties for
overlapping boxes (IoU above ``IOU_MAX``) and boxes outside the area range.
*Task*: the share of ground-truth digits that the frozen task model reads correctly on
some crop covering at least half of the digit (recall).
The weights are a reconstruction (the paper does not give them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from minirepro.papers.active_o3.boxes import BoxFormatError, area, box_iou, coverage, parse_boxes

IOU_MAX = 0.3  # boxes overlapping more than this are penalised
AREA_RANGE = (0.01, 0.5)  # allowed box area as a share of the canvas
COVERED = 0.5  # a digit counts as inside a crop when this share of it is
FORMS = ("task", "heuristic", "dual")


@dataclass(frozen=True)
class RewardWeights:
    """[reconstruction] Weights of the three parts; ``form`` picks which parts are on."""

    task: float = 1.0
    heuristic: float = 1.0
    format: float = 0.5

    def for_form(self, form: str) -> tuple[float, float, float]:
        if form not in FORMS:
            raise ValueError(f"reward form must be one of {FORMS}, got {form!r}")
        return (self.task if form != "heuristic" else 0.0, self.heuristic if form != "task" else 0.0,
                self.format)


def format_reward(text: str, size: int = 96, max_boxes: int = 3) -> float:
    """Eq. (active-o3-eq-reward), r_fmt: 1.0 if the answer parses strictly into 1..max_boxes in-canvas boxes, else 0.0."""
    try:
        parse_boxes(text, size, max_boxes)
    except BoxFormatError:
        return 0.0
    return 1.0


def heuristic_reward(boxes: np.ndarray, gt: np.ndarray, size: int = 96) -> float:
    """Eq. (active-o3-eq-reward), r_heur [reconstruction]: mean over GT digits of the best coverage by one box,
    minus 0.5 x (share of box pairs with IoU > 0.3) minus 0.5 x (share of boxes whose area
    is outside 1-50% of the canvas). ``boxes`` [k, 4], ``gt`` [g, 4]; range [-1, 1]."""
    b = np.asarray(boxes).reshape(-1, 4)
    if len(b) == 0:
        raise ValueError("an answer needs at least one box")
    cov = float(coverage(gt, b).max(1).values.mean()) if len(gt) else 0.0
    k = len(b)
    if k > 1:
        iou = box_iou(b, b)
        iu = torch.triu_indices(k, k, 1)
        overlap = float((iou[iu[0], iu[1]] > IOU_MAX).double().mean())
    else:
        overlap = 0.0
    share = area(b) / size**2
    bad_area = float(((share < AREA_RANGE[0]) | (share > AREA_RANGE[1])).double().mean())
    return cov - 0.5 * overlap - 0.5 * bad_area


def found_digits(boxes: np.ndarray, preds: np.ndarray, gt: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Eq. (active-o3-eq-reward), inside r_task: which GT digits are read correctly: digit ``d`` is found when some box covers at least half
    of it and the task model's answer on that box's crop is ``labels[d]``. Returns [g] bool."""
    b = np.asarray(boxes).reshape(-1, 4)
    if len(gt) == 0:
        return np.zeros(0, dtype=bool)
    inside = coverage(gt, b).numpy() >= COVERED  # [g, k]
    hit = np.asarray(preds)[None, :] == np.asarray(labels)[:, None]
    return (inside & hit).any(1)


def task_reward(boxes: np.ndarray, preds: np.ndarray, gt: np.ndarray, labels: np.ndarray) -> float:
    """Eq. (active-o3-eq-reward), r_task: the share of GT digits the frozen task model reads correctly (recall)."""
    f = found_digits(boxes, preds, gt, labels)
    return float(f.mean()) if f.size else 0.0


class RewardTable:
    """[reconstruction] Every part of the reward for every action of the grid on a fixed set of
    training canvases, computed once (the task model is frozen), so that a GRPO step is a lookup.

    ``cov`` [C, A, 3] coverage of each (padded) digit, ``correct`` [C, A, 3] bool (covered >= 0.5
    and read correctly), ``valid`` [C, 3] which digit slots exist, ``overlap`` [A, A] bool
    (IoU > 0.3), ``bad_area`` [A] bool.
    """

    def __init__(self, actions: np.ndarray, gt_boxes: list[np.ndarray], gt_labels: list[np.ndarray],
                 preds: np.ndarray, size: int = 96) -> None:
        c, a = preds.shape
        if a != len(actions) or c != len(gt_boxes):
            raise ValueError(f"preds must be [canvases, actions] = [{len(gt_boxes)}, {len(actions)}], got {preds.shape}")
        self.actions = actions
        self.cov = torch.zeros(c, a, 3, dtype=torch.float64)
        self.correct = torch.zeros(c, a, 3, dtype=torch.bool)
        self.valid = torch.zeros(c, 3, dtype=torch.bool)
        for i, (g, lab) in enumerate(zip(gt_boxes, gt_labels)):
            n = len(g)
            if n:
                cv = coverage(g, actions).T  # [A, g]
                self.cov[i, :, :n] = cv
                self.correct[i, :, :n] = (cv >= COVERED) & (torch.from_numpy(preds[i])[:, None]
                                                            == torch.from_numpy(lab)[None, :])
                self.valid[i, :n] = True
        self.overlap = box_iou(actions, actions) > IOU_MAX
        share = area(actions) / size**2
        self.bad_area = (share < AREA_RANGE[0]) | (share > AREA_RANGE[1])

    def parts(self, canvas: torch.Tensor, acts: torch.Tensor) -> dict[str, torch.Tensor]:
        """Reward parts for answers ``acts`` [N, k] (distinct actions) to canvases ``canvas`` [N]:
        ``task``, ``heuristic``, ``coverage`` (each [N], float64)."""
        n, k = acts.shape
        valid = self.valid[canvas]  # [N, 3]
        nd = valid.sum(1).clamp(min=1).double()
        cov = self.cov[canvas[:, None], acts].amax(1)  # [N, 3]
        corr = self.correct[canvas[:, None], acts].any(1)
        task = (corr & valid).sum(1).double() / nd
        cover = (cov * valid).sum(1) / nd
        if k > 1:
            iu = torch.triu_indices(k, k, 1)
            overlap = self.overlap[acts[:, iu[0]], acts[:, iu[1]]].double().mean(1)
        else:
            overlap = torch.zeros(n, dtype=torch.float64)
        bad = self.bad_area[acts].double().mean(1)
        return {"task": task, "heuristic": cover - 0.5 * overlap - 0.5 * bad, "coverage": cover}
