"""Boxes: the paper's JSON answer format, parsed strictly; IoU and ground-truth coverage.

Boxes are ``(x1, y1, x2, y2)`` in canvas pixels with ``x1 < x2``, ``y1 < y2`` and
exclusive ends (a box ``(0, 0, 96, 96)`` is the whole 96x96 canvas).
"""

from __future__ import annotations

import json

import numpy as np
import torch


class BoxFormatError(ValueError):
    """Eq. (active-o3-eq-reward), r_fmt = 0: a sensing answer that is not a valid list of boxes (the format reward is 0)."""


def to_json(boxes: np.ndarray | list, label: str = "digit") -> str:
    """[reconstruction] The paper's answer format: boxes -> ``[{"bbox_2d": [x1, y1, x2, y2], "label": ...}, ...]``."""
    return json.dumps([{"bbox_2d": [int(v) for v in b], "label": label} for b in np.asarray(boxes).reshape(-1, 4)])


def parse_boxes(text: str, size: int = 96, max_boxes: int = 3) -> np.ndarray:
    """Eq. (active-o3-eq-reward), r_fmt: parse a sensing answer strictly into an int array [k, 4].

    Accepts exactly a JSON list of 1..``max_boxes`` objects, each with a ``"bbox_2d"`` of
    four integers ``x1 < x2``, ``y1 < y2`` inside ``[0, size]`` and a string ``"label"``;
    an optional ``<answer>...</answer>`` wrapper is removed first.

    Raises:
        BoxFormatError: anything else (not JSON, wrong keys, non-integer or non-finite
            coordinates, empty boxes, boxes outside the canvas, too many or no boxes).
    """
    if not isinstance(text, str):
        raise BoxFormatError(f"answer must be a string, got {type(text).__name__}")
    s = text.strip()
    if s.startswith("<answer>"):
        if not s.endswith("</answer>"):
            raise BoxFormatError("unclosed <answer> tag")
        s = s[len("<answer>"):-len("</answer>")].strip()
    try:
        data = json.loads(s, parse_constant=lambda c: (_ for _ in ()).throw(BoxFormatError(f"{c} is not a coordinate")))
    except json.JSONDecodeError as exc:
        raise BoxFormatError(f"answer is not valid JSON: {exc.msg} at position {exc.pos}") from exc
    if not isinstance(data, list):
        raise BoxFormatError(f"answer must be a JSON list of boxes, got {type(data).__name__}")
    if not 1 <= len(data) <= max_boxes:
        raise BoxFormatError(f"answer must hold 1..{max_boxes} boxes, got {len(data)}")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or set(item) != {"bbox_2d", "label"}:
            raise BoxFormatError(f"box {i} must be an object with exactly the keys bbox_2d and label, got {item!r}")
        if not isinstance(item["label"], str):
            raise BoxFormatError(f"box {i}: label must be a string")
        b = item["bbox_2d"]
        if not (isinstance(b, list) and len(b) == 4 and all(type(v) is int for v in b)):
            raise BoxFormatError(f"box {i}: bbox_2d must be a list of 4 integers, got {b!r}")
        x1, y1, x2, y2 = b
        if not (x1 < x2 and y1 < y2):
            raise BoxFormatError(f"box {i}: empty or reversed box {b} (need x1 < x2 and y1 < y2)")
        if min(b) < 0 or max(x2, y2) > size:
            raise BoxFormatError(f"box {i}: {b} lies outside the {size}x{size} canvas")
        out.append(b)
    return np.array(out, dtype=np.int64)


def check_boxes(boxes: torch.Tensor | np.ndarray, size: int | None = None) -> torch.Tensor:
    """Eq. (active-o3-eq-reward), r_fmt's checks: ``boxes`` as a float64 tensor [..., 4], checked: finite, non-empty, inside ``[0, size]``."""
    b = torch.as_tensor(boxes, dtype=torch.float64)
    if b.ndim < 1 or b.shape[-1] != 4:
        raise ValueError(f"boxes must have a last dimension of 4, got shape {tuple(b.shape)}")
    if not torch.isfinite(b).all():
        raise ValueError("boxes hold a non-finite coordinate")
    if (b[..., 2] <= b[..., 0]).any() or (b[..., 3] <= b[..., 1]).any():
        raise ValueError("boxes must have x1 < x2 and y1 < y2")
    if size is not None and (b.min() < 0 or b[..., 2:].max() > size):
        raise ValueError(f"boxes lie outside the {size}x{size} canvas")
    return b


def _inter(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    return wh[..., 0] * wh[..., 1]


def area(boxes: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Eq. (active-o3-eq-reward), bad area: box areas in pixels^2, [n, 4] -> [n]."""
    b = check_boxes(boxes)
    return (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])


def box_iou(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Eq. (active-o3-eq-reward), overlap: pairwise IoU, [n, 4] x [m, 4] -> [n, m] (as ``torchvision.ops.box_iou``)."""
    a, b = check_boxes(a).reshape(-1, 4), check_boxes(b).reshape(-1, 4)
    inter = _inter(a, b)
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def coverage(gt: torch.Tensor | np.ndarray, boxes: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Eq. (active-o3-eq-reward), coverage: share of each ground-truth box's area inside each box, [g, 4] x [k, 4] -> [g, k] in [0, 1]."""
    g, b = check_boxes(gt).reshape(-1, 4), check_boxes(boxes).reshape(-1, 4)
    return _inter(g, b) / area(g)[:, None]


def grid_actions(size: int = 96, stride: int = 12, sizes: tuple[int, ...] = (16, 24, 40, 72)) -> np.ndarray:
    """[reconstruction] The sensing policy's action set: boxes of each side in ``sizes`` centred on
    a ``size/stride`` x ``size/stride`` grid, shifted to lie inside the canvas. Returns [A, 4],
    ordered (side, row, column): action ``a`` is side ``a // n**2`` at row ``(a % n**2) // n``."""
    if not sizes or min(sizes) < 1 or max(sizes) > size:
        raise ValueError(f"box sides must be in 1..{size}, got {sizes}")
    n = size // stride
    out = []
    for s in sizes:
        for r in range(n):
            for c in range(n):
                cx, cy = c * stride + stride // 2, r * stride + stride // 2
                x1 = min(max(cx - s // 2, 0), size - s)
                y1 = min(max(cy - s // 2, 0), size - s)
                out.append((x1, y1, x1 + s, y1 + s))
    return np.array(out, dtype=np.int64)


def tiling(size: int = 96, n: int = 3) -> np.ndarray:
    """[reconstruction] The full-tiling baseline: the tiling of the canvas by ``n x n`` equal boxes (the cost bound), [n*n, 4]."""
    if n < 1 or size % n:
        raise ValueError(f"cannot tile {size} pixels into {n} equal parts")
    s = size // n
    return np.array([(c * s, r * s, c * s + s, r * s + s) for r in range(n) for c in range(n)], dtype=np.int64)

