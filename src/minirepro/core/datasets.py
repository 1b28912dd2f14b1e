"""Data that exists offline: scikit-learn's bundled sets and seeded synthetic generators."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Split:
    """Train and test arrays: ``X_*`` of shape (n, d) float64, ``y_*`` of shape (n,) int64."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def digits(seed: int = 0, test_fraction: float = 0.25) -> Split:
    """scikit-learn's bundled 8x8 digits (1797 images, 64 features scaled to [0, 1]).

    The split is stratified by class and fixed by ``seed``.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    data = load_digits()
    X = data.data.astype(np.float64) / 16.0
    y = data.target.astype(np.int64)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=test_fraction,
                                              random_state=seed, stratify=y)
    return Split(X_tr, y_tr, X_te, y_te)


def gaussian_mixture(n: int, d: int, n_components: int, rank: int, seed: int = 0,
                     noise: float = 0.05, sample_seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Samples from a mixture of anisotropic low-rank Gaussians.

    Each component has a random mean and a random rank-``rank`` covariance with
    decaying singular values plus isotropic ``noise``. ``seed`` fixes the mixture
    (and, by default, the samples); with ``sample_seed`` the same mixture is
    sampled by its own generator, so more samples of one distribution can be drawn
    apart from an earlier draw.

    Returns:
        ``(X, labels)`` with ``X`` of shape (n, d) float64 and ``labels`` (n,) int64.
    """
    if min(n, d, n_components, rank) < 1 or rank > d:
        raise ValueError(f"need n, d, n_components >= 1 and 1 <= rank <= d; got n={n}, d={d}, "
                         f"n_components={n_components}, rank={rank}")
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=2.0, size=(n_components, d))
    bases = rng.normal(size=(n_components, d, rank)) / np.sqrt(d)
    if sample_seed is not None:
        rng = np.random.default_rng(sample_seed)
    scales = 1.0 / np.arange(1, rank + 1) ** 0.7
    labels = rng.integers(0, n_components, size=n)
    z = rng.normal(size=(n, rank)) * scales
    X = means[labels] + np.einsum("ndr,nr->nd", bases[labels], z) * np.sqrt(d) \
        + noise * rng.normal(size=(n, d))
    return X, labels.astype(np.int64)
