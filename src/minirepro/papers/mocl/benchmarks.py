"""Continual-learning task streams built from scikit-learn's bundled digits (offline).

* **Permuted-Digits**: task ``t`` shows the 8x8 digits with a fixed random pixel
  permutation (task 0 is the identity); one shared 10-way head (domain-incremental).
* **Split-Digits**: five tasks of two classes each, (0, 1), (2, 3), ..., (8, 9); a
  shared 10-way output layer whose logits are masked to the task's two classes
  (task-incremental, the GPM protocol's "multi-head" in one matrix).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from minirepro.core.datasets import digits

BENCHMARKS: tuple[str, ...] = ("permuted", "split")
N_CLASSES = 10
N_FEATURES = 64


@dataclass(frozen=True)
class Task:
    """One task: float32 inputs ``X_*`` of shape (n, 64), int64 labels ``y_*`` (n,).

    ``classes`` are the output units the task uses; labels are the original digit
    classes (0-9), and the loss and accuracy look at ``classes`` only.
    """

    name: str
    X_train: torch.Tensor
    y_train: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor
    classes: tuple[int, ...]


def _tensor(x: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(x), dtype=dtype)


def permuted_digits(n_tasks: int, seed: int = 0, n_train: int | None = None) -> list[Task]:
    """``n_tasks`` Permuted-Digits tasks (task 0 unpermuted), same split for every task.

    Args:
        n_tasks: at least 1.
        seed: fixes the train/test split and the permutations.
        n_train: keep only the first ``n_train`` training images (None: all 1347).
    """
    if not isinstance(n_tasks, int) or n_tasks < 1:
        raise ValueError(f"n_tasks must be a positive integer, got {n_tasks!r}")
    data = digits(seed)
    X_tr, y_tr = _subset(data.X_train, data.y_train, n_train)
    rng = np.random.default_rng(10_000 + seed)
    tasks = []
    for t in range(n_tasks):
        perm = np.arange(N_FEATURES) if t == 0 else rng.permutation(N_FEATURES)
        tasks.append(Task(f"P{t + 1}", _tensor(X_tr[:, perm], torch.float32),
                          _tensor(y_tr, torch.int64), _tensor(data.X_test[:, perm], torch.float32),
                          _tensor(data.y_test, torch.int64), tuple(range(N_CLASSES))))
    return tasks


def split_digits(n_tasks: int = 5, seed: int = 0, n_train: int | None = None) -> list[Task]:
    """Split-Digits: task ``t`` holds classes ``(2t, 2t+1)``; at most 5 tasks.

    Args:
        n_tasks: 1 to 5.
        seed: fixes the train/test split.
        n_train: training images kept *per task* (None: all, about 270).
    """
    if not isinstance(n_tasks, int) or not 1 <= n_tasks <= 5:
        raise ValueError(f"Split-Digits has 1 to 5 tasks, got n_tasks={n_tasks!r}")
    data = digits(seed)
    tasks = []
    for t in range(n_tasks):
        cls = (2 * t, 2 * t + 1)
        tr = np.isin(data.y_train, cls)
        te = np.isin(data.y_test, cls)
        X_tr, y_tr = _subset(data.X_train[tr], data.y_train[tr], n_train)
        tasks.append(Task(f"S{t + 1}", _tensor(X_tr, torch.float32), _tensor(y_tr, torch.int64),
                          _tensor(data.X_test[te], torch.float32),
                          _tensor(data.y_test[te], torch.int64), cls))
    return tasks


def make_benchmark(name: str, n_tasks: int, seed: int = 0, n_train: int | None = None) -> list[Task]:
    """The task stream called ``name`` (one of ``BENCHMARKS``)."""
    if name == "permuted":
        return permuted_digits(n_tasks, seed, n_train)
    if name == "split":
        return split_digits(n_tasks, seed, n_train)
    raise ValueError(f"unknown benchmark {name!r}; expected one of {', '.join(BENCHMARKS)}")


def _subset(X: np.ndarray, y: np.ndarray, n: int | None) -> tuple[np.ndarray, np.ndarray]:
    if n is None:
        return X, y
    if not isinstance(n, int) or n < 10:
        raise ValueError(f"n_train must be an integer >= 10, got {n!r}")
    return X[:n], y[:n]
