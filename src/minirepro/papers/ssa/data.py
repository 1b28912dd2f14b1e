"""The paired data: synthetic modalities from shared and private latents, and digits with captions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pairs:
    """Paired views split into train / est (to estimate S) / test, float32 arrays ``(n, D)``.

    ``labels_*`` are class labels (digits) or ``None``; ``prompts`` are the class "captions"
    of the second modality for zero-shot classification (``(n_classes, D_y)``) or ``None``.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_est: np.ndarray
    y_est: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    labels_test: np.ndarray | None = None
    prompts: np.ndarray | None = None


def _split(x: np.ndarray, y: np.ndarray, n_train: int, n_est: int, n_test: int, rng: np.random.Generator,
           labels: np.ndarray | None = None) -> tuple:
    n = x.shape[0]
    if n_train + n_est + n_test > n:
        raise ValueError(f"asked for {n_train}+{n_est}+{n_test} samples, only {n} exist")
    idx = rng.permutation(n)
    a, b, c = idx[:n_train], idx[n_train:n_train + n_est], idx[n_train + n_est:n_train + n_est + n_test]
    f = np.float32
    out = (x[a].astype(f), y[a].astype(f), x[b].astype(f), y[b].astype(f), x[c].astype(f), y[c].astype(f))
    return out + ((labels[c] if labels is not None else None),)


def synthetic_pairs(n_train: int, n_est: int, n_test: int, seed: int, n_shared: int = 4,
                    n_private: int = 4, dim: int = 24, noise: float = 0.3) -> Pairs:
    """[reconstruction] Two modalities from one shared latent z_s (``n_shared``) and private
    latents z_x, z_y (``n_private`` each): x = tanh([z_s, z_x] M_x) + noise, likewise y.

    Only z_s links a pair, so retrieval can use only what both views share.
    """
    for name, v in (("n_train", n_train), ("n_test", n_test), ("n_shared", n_shared), ("dim", dim)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    rng = np.random.default_rng(seed)
    n = n_train + n_est + n_test
    zs = rng.normal(size=(n, n_shared))
    mx = rng.normal(size=(n_shared + n_private, dim)) / np.sqrt(n_shared + n_private)
    my = rng.normal(size=(n_shared + n_private, dim)) / np.sqrt(n_shared + n_private)
    x = np.tanh(np.hstack([zs, rng.normal(size=(n, n_private))]) @ mx) + noise * rng.normal(size=(n, dim))
    y = np.tanh(np.hstack([zs, rng.normal(size=(n, n_private))]) @ my) + noise * rng.normal(size=(n, dim))
    return Pairs(*_split(x, y, n_train, n_est, n_test, rng))


def digit_attributes(images: np.ndarray) -> np.ndarray:
    """[reconstruction] Three "caption attributes" of 8x8 digit images ``(n, 64)`` in [0, 16]:
    total ink, top-minus-bottom ink and left-minus-right ink, each standardised. ``(n, 3)``."""
    im = np.asarray(images, float).reshape(-1, 8, 8) / 16.0
    ink = im.sum((1, 2))
    top = im[:, :4].sum((1, 2)) - im[:, 4:].sum((1, 2))
    left = im[:, :, :4].sum((1, 2)) - im[:, :, 4:].sum((1, 2))
    a = np.stack([ink, top, left], 1)
    return (a - a.mean(0)) / a.std(0)


def digits_pairs(n_train: int, n_est: int, n_test: int, seed: int, caption_noise: float = 0.3) -> Pairs:
    """[reconstruction] scikit-learn digits paired with a synthetic "caption": the one-hot
    label and three ink attributes, plus Gaussian noise. The zero-shot prompts are the
    noise-free captions of each class with average attributes (zeros)."""
    from sklearn.datasets import load_digits

    if caption_noise < 0:
        raise ValueError(f"caption_noise must be >= 0, got {caption_noise}")
    ds = load_digits()
    rng = np.random.default_rng(seed)
    x = ds.data / 16.0
    onehot = np.eye(10)[ds.target]
    cap = np.hstack([onehot, digit_attributes(ds.data)])
    cap = cap + caption_noise * rng.normal(size=cap.shape)
    parts = _split(x, cap, n_train, n_est, n_test, rng, labels=ds.target)
    prompts = np.hstack([np.eye(10), np.zeros((10, 3))]).astype(np.float32)
    return Pairs(*parts, prompts=prompts)
