"""The miniature's data: scikit-learn's 8x8 digits and templated questions about them.

Every example is one prompt of :data:`SEQ` positions whose answer is read at the last
position. Image prompts are four visual tokens (from the frozen CNN) followed by a
question token and ``=``; text-only prompts are ``PAD PAD a + b =``. Upstream (the
pretraining tasks): *which digit*, *even?*, *greater than 5?* and the text-only sum
``(a + b) mod 10``. Downstream (new, conflicting): *next?*, answered by ``(digit + 1) mod 10``
with the same digit tokens the *which digit* task uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.datasets import load_digits

DIGITS = list(range(10))          # tokens 0..9 are the digits
YES, NO = 10, 11
Q_DIGIT, Q_EVEN, Q_BIG, PLUS, Q_NEXT, EQ, PAD = 12, 13, 14, 15, 16, 17, 18
VOCAB = 19
N_VIS = 4                          # visual tokens per image (the CNN's 2x2 grid)
SEQ = N_VIS + 2                    # positions per prompt
UPSTREAM = ("which digit", "even?", "greater than 5?", "text: a+b mod 10")
DOWNSTREAM = "next digit?"
QUESTION = {"which digit": Q_DIGIT, "even?": Q_EVEN, "greater than 5?": Q_BIG, DOWNSTREAM: Q_NEXT}


def answer(task: str, digit: torch.Tensor) -> torch.Tensor:
    """The answer token of an image ``task`` for each digit (long tensor, same shape)."""
    if task == "which digit":
        return digit.clone()
    if task == "even?":
        return torch.where(digit % 2 == 0, YES, NO)
    if task == "greater than 5?":
        return torch.where(digit > 5, YES, NO)
    if task == DOWNSTREAM:
        return (digit + 1) % 10
    raise ValueError(f"unknown image task {task!r}; expected one of {list(QUESTION)}")


def split_digits(split: str, inverted: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, 1, 8, 8) scaled to [0, 1] and labels (N,) of a fixed 70/30 split."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))
    cut = int(0.7 * len(order))
    idx = order[:cut] if split == "train" else order[cut:]
    x = torch.tensor(d.images[idx] / 16.0, dtype=torch.float32)[:, None]
    if inverted:
        x = 1.0 - x
    return x, torch.tensor(d.target[idx], dtype=torch.long)


@dataclass
class Batch:
    """Prompts of one kind: ``images`` (B, 1, 8, 8) or ``None`` for text-only prompts,
    ``tokens`` (B, SEQ) (visual slots hold PAD), ``target`` (B,) answer tokens."""

    images: torch.Tensor | None
    tokens: torch.Tensor
    target: torch.Tensor

    def __len__(self) -> int:
        return len(self.target)

    def take(self, idx: torch.Tensor) -> Batch:
        """The prompts at ``idx``."""
        return Batch(None if self.images is None else self.images[idx], self.tokens[idx], self.target[idx])


def image_prompts(images: torch.Tensor, digits: torch.Tensor, task: str) -> Batch:
    """Prompts asking ``task`` about each image."""
    n = len(digits)
    tokens = torch.full((n, SEQ), PAD, dtype=torch.long)
    tokens[:, N_VIS] = QUESTION[task]
    tokens[:, N_VIS + 1] = EQ
    return Batch(images, tokens, answer(task, digits))


def text_prompts(a: torch.Tensor, b: torch.Tensor) -> Batch:
    """Text-only prompts ``PAD PAD a + b =`` with answer ``(a + b) mod 10``."""
    n = len(a)
    tokens = torch.full((n, SEQ), PAD, dtype=torch.long)
    tokens[:, 2], tokens[:, 3], tokens[:, 4], tokens[:, 5] = a, PLUS, b, EQ
    return Batch(None, tokens, (a + b) % 10)


def all_text_prompts() -> Batch:
    """All 100 text-only prompts (every pair of digits)."""
    a, b = torch.meshgrid(torch.arange(10), torch.arange(10), indexing="ij")
    return text_prompts(a.reshape(-1), b.reshape(-1))


def upstream_sets(split: str) -> dict[str, Batch]:
    """One batch per upstream task on ``split`` (the text task: all 100 sums)."""
    x, y = split_digits(split)
    sets = {t: image_prompts(x, y, t) for t in UPSTREAM[:3]}
    sets[UPSTREAM[3]] = all_text_prompts()
    return sets


def downstream_set(split: str) -> Batch:
    """The downstream task's prompts on ``split``."""
    x, y = split_digits(split)
    return image_prompts(x, y, DOWNSTREAM)
