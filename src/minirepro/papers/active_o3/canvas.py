"""[reconstruction] The miniature's images: 96x96 canvases with 1-3 small digits and distractors.

Digits are scikit-learn's bundled ``load_digits`` (8x8, 16 grey levels), pasted at their
native size at random, non-overlapping places; distractors are bright squares, thin lines
and noise patches of the same scale (squares of side 1/2 to 3/4 of a digit, lines and noise
patches as long as a digit). The 24x24 *global view* (4x4 average pooling) shrinks a digit
to 2x2 pixels (spread over at most 3x3 when it straddles the pooling blocks), where it
cannot be read. (A first design upscaled the digits to 12x12; at 3x3 pixels in the global
view the frozen task model still read a third of them.) The digit images are split in two halves:
the task model and the GRPO training canvases use the ``"train"`` half, the evaluation
canvases (held-out layouts, from a disjoint seed stream) the ``"test"`` half.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

CANVAS = 96  # canvas side, pixels
VIEW = 24  # global view side, pixels (4x4 average pooling)
DIGIT = 8  # pasted digit side, pixels (load_digits' native size)
SPLITS = ("train", "test")


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    imgs = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    if DIGIT != imgs.shape[-1]:
        imgs = F.interpolate(imgs, size=(DIGIT, DIGIT), mode="bilinear", align_corners=False)
    return imgs[:, 0].clamp(0, 1).numpy(), d.target.astype(np.int64)


def digit_images(split: str) -> tuple[np.ndarray, np.ndarray]:
    """The digit images of one half of ``load_digits``: ``(images [n, DIGIT, DIGIT], labels [n])``.

    Even indices are ``"train"``, odd indices ``"test"``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    imgs, labels = _digits()
    sl = slice(0, None, 2) if split == "train" else slice(1, None, 2)
    return imgs[sl], labels[sl]


@dataclass
class Canvases:
    """A set of canvases: images [N, 96, 96] in [0, 1], and per canvas its digits'
    boxes (x1, y1, x2, y2 in pixels, exclusive ends) and labels."""

    images: torch.Tensor
    boxes: list[np.ndarray]
    labels: list[np.ndarray]

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def n_digits(self) -> int:
        return int(sum(len(b) for b in self.boxes))


def _free(occupied: list[tuple[int, int, int, int]], box: tuple[int, int, int, int], gap: int) -> bool:
    x1, y1, x2, y2 = box
    return all(x1 >= b[2] + gap or b[0] >= x2 + gap or y1 >= b[3] + gap or b[1] >= y2 + gap
               for b in occupied)


def make_canvases(n: int, seed: int, split: str = "train", max_digits: int = 3,
                  n_distractors: tuple[int, int] = (2, 4)) -> Canvases:
    """[reconstruction] ``n`` canvases with 1..``max_digits`` digits and distractors.

    Args:
        n: number of canvases (>= 1).
        seed: seed of the layout generator (positions, digits drawn, distractors).
        split: which half of the digit images to draw from ({"train", "test"}).
        max_digits: at most this many digits per canvas (1..3).
        n_distractors: inclusive range of distractors per canvas.
    """
    if n < 1:
        raise ValueError(f"need at least one canvas, got n={n}")
    if not 1 <= max_digits <= 3:
        raise ValueError(f"max_digits must be 1..3, got {max_digits}")
    imgs, labels = digit_images(split)
    rng = np.random.default_rng(seed)
    out = np.zeros((n, CANVAS, CANVAS), dtype=np.float32)
    all_boxes, all_labels = [], []
    for i in range(n):
        occupied: list[tuple[int, int, int, int]] = []
        bxs, lbs = [], []
        for _ in range(int(rng.integers(1, max_digits + 1))):
            for _try in range(50):
                x, y = (int(v) for v in rng.integers(2, CANVAS - DIGIT - 2, size=2))
                box = (x, y, x + DIGIT, y + DIGIT)
                if _free(occupied, box, 4):
                    j = int(rng.integers(len(imgs)))
                    out[i, y:y + DIGIT, x:x + DIGIT] = imgs[j]
                    occupied.append(box)
                    bxs.append(box)
                    lbs.append(int(labels[j]))
                    break
        for _ in range(int(rng.integers(n_distractors[0], n_distractors[1] + 1))):
            kind = int(rng.integers(3))
            s = int(rng.integers(DIGIT // 2, DIGIT * 3 // 4 + 1)) if kind == 0 else DIGIT  # digit-scaled
            for _try in range(50):
                x, y = (int(v) for v in rng.integers(0, CANVAS - s, size=2))
                if _free(occupied, (x, y, x + s, y + s), 2):
                    occupied.append((x, y, x + s, y + s))
                    if kind == 0:  # a bright solid square
                        out[i, y:y + s, x:x + s] = rng.uniform(0.7, 1.0)
                    elif kind == 1:  # a thin line, horizontal or vertical
                        if rng.random() < 0.5:
                            out[i, y + s // 2, x:x + s] = 1.0
                        else:
                            out[i, y:y + s, x + s // 2] = 1.0
                    else:  # a patch of noise
                        out[i, y:y + s, x:x + s] = rng.uniform(0, 1, size=(s, s)) * (rng.random((s, s)) < 0.4)
                    break
        all_boxes.append(np.array(bxs, dtype=np.int64).reshape(-1, 4))
        all_labels.append(np.array(lbs, dtype=np.int64))
    return Canvases(torch.from_numpy(out), all_boxes, all_labels)


def global_view(images: torch.Tensor) -> torch.Tensor:
    """§3 (o_init): the low-resolution global view, [N, 96, 96] -> [N, 24, 24] by 4x4 average pooling."""
    if images.ndim != 3 or images.shape[1:] != (CANVAS, CANVAS):
        raise ValueError(f"images must be [N, {CANVAS}, {CANVAS}], got {tuple(images.shape)}")
    return F.avg_pool2d(images[:, None], CANVAS // VIEW)[:, 0]


def upsample_view(view: torch.Tensor) -> torch.Tensor:
    """The global view brought back to canvas size (nearest), [N, 24, 24] -> [N, 96, 96]:
    what the task model sees when it reads the passive global view."""
    return F.interpolate(view[:, None], size=(CANVAS, CANVAS), mode="nearest")[:, 0]
