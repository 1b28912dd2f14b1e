"""Digits as patch tokens, and k-shot episodes with labels permuted per episode.

An 8x8 digit from scikit-learn's ``load_digits`` becomes a 4x4 grid of 2x2 patches
(16 patch tokens of 4 pixels each). A demonstration is its 16 patch tokens and one label
token; the label is the class's position in a random permutation drawn per episode, so the
class-to-label map can only be read from the demonstrations.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

PATCH = 2  # patch side in pixels
GRID = 8 // PATCH  # patches per image side
N_PATCH = GRID * GRID  # patch tokens per image
ITEM = N_PATCH + 1  # tokens per demonstration (patches + label)
FORMATS = ("image-first", "label-first")


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target.astype(np.int64)


def split_digits(part: str) -> tuple[np.ndarray, np.ndarray]:
    """[reconstruction] The ``"train"`` or ``"test"`` half of the digits (alternate images
    within each class), as images (n, 8, 8) in [0, 1] and classes (n,)."""
    if part not in ("train", "test"):
        raise ValueError(f"part must be 'train' or 'test', got {part!r}")
    imgs, y = _digits()
    keep = np.zeros(len(y), dtype=bool)
    for c in range(10):
        idx = np.flatnonzero(y == c)
        keep[idx[0::2] if part == "train" else idx[1::2]] = True
    return imgs[keep], y[keep]


def patchify(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    """[reconstruction] Images (..., 8, 8) -> patch tokens (..., 16, 4), row-major over the 4x4 grid."""
    x = torch.as_tensor(np.asarray(images, dtype=np.float32))
    if x.shape[-2:] != (8, 8):
        raise ValueError(f"images must end in (8, 8), got {tuple(x.shape)}")
    lead = x.shape[:-2]
    x = x.reshape(*lead, GRID, PATCH, GRID, PATCH).movedim(-3, -2)
    return x.reshape(*lead, N_PATCH, PATCH * PATCH)


@dataclass
class Episodes:
    """A batch of episodes: demonstrations and one query each.

    ``demo_patches`` (B, D, 16, 4), ``demo_labels`` (B, D) in 0..n_way-1,
    ``query_patches`` (B, 16, 4), ``query_label`` (B,), ``demo_images`` (B, D, 8, 8) for figures,
    ``query_image`` (B, 8, 8), and the true digit classes ``demo_classes`` (B, D) and
    ``query_class`` (B,) (used only by the training's auxiliary loss and by checks).
    """

    demo_patches: torch.Tensor
    demo_labels: torch.Tensor
    query_patches: torch.Tensor
    query_label: torch.Tensor
    demo_images: np.ndarray
    query_image: np.ndarray
    demo_classes: torch.Tensor
    query_class: torch.Tensor

    def __len__(self) -> int:
        return int(self.query_label.shape[0])

    @property
    def n_demos(self) -> int:
        return int(self.demo_labels.shape[1])


def make_episodes(n: int, n_way: int, k_shot: int, seed: int, part: str = "test") -> Episodes:
    """[reconstruction] ``n`` episodes of ``n_way`` classes x ``k_shot`` demonstrations and one query.

    Classes are drawn per episode; labels are a random permutation of 0..n_way-1 over them
    (so the model must read the demonstrations); demonstrations are in random order; the
    query is a different image of one of the episode's classes.
    """
    if n < 1 or k_shot < 1 or not 2 <= n_way <= 10:
        raise ValueError(f"need n >= 1, k_shot >= 1 and 2 <= n_way <= 10; got {n}, {k_shot}, {n_way}")
    imgs, y = split_digits(part)
    by_class = [np.flatnonzero(y == c) for c in range(10)]
    sizes = np.array([len(b) for b in by_class])
    table = np.full((10, sizes.max()), -1, np.int64)
    for c in range(10):
        table[c, : sizes[c]] = by_class[c]
    rng = np.random.default_rng(seed)
    D = n_way * k_shot
    classes = rng.random((n, 10)).argsort(1)[:, :n_way]  # (n, n_way)
    labels = rng.random((n, n_way)).argsort(1)  # a label permutation per episode
    keys = rng.random((n, n_way, sizes.max()))
    keys[np.arange(sizes.max()) >= sizes[classes][..., None]] = np.inf
    members = np.take_along_axis(table[classes], keys.argsort(2)[:, :, : k_shot + 1], 2)
    qc = rng.integers(n_way, size=n)
    rows = np.arange(n)
    q_img, q_lab = imgs[members[rows, qc, k_shot]], labels[rows, qc]
    order = rng.random((n, D)).argsort(1)
    d_idx = np.take_along_axis(members[:, :, :k_shot].reshape(n, D), order, 1)
    d_lab = np.take_along_axis(np.repeat(labels, k_shot, 1), order, 1)
    d_img = imgs[d_idx]
    d_cls, q_cls = y[d_idx], y[members[rows, qc, k_shot]]
    return Episodes(patchify(d_img), torch.from_numpy(np.ascontiguousarray(d_lab)), patchify(q_img),
                    torch.from_numpy(np.ascontiguousarray(q_lab)), d_img, q_img,
                    torch.from_numpy(d_cls), torch.from_numpy(np.ascontiguousarray(q_cls)))


def shuffle_labels(ep: Episodes, seed: int) -> Episodes:
    """The same episodes with the demonstrations' labels shuffled across demonstrations
    (so they carry no information about the query's class)."""
    rng = np.random.default_rng(seed)
    lab = ep.demo_labels.clone()
    for e in range(len(ep)):
        lab[e] = lab[e, torch.from_numpy(rng.permutation(ep.n_demos))]
    return Episodes(ep.demo_patches, lab, ep.query_patches, ep.query_label, ep.demo_images, ep.query_image,
                    ep.demo_classes, ep.query_class)
