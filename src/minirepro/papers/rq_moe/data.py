"""The two vector sets of the chapter, each split into training, database and query vectors.

* ``synthetic``: a mixture of anisotropic low-rank Gaussians (``core.datasets.gaussian_mixture``),
  the kind of structured, heterogeneous geometry that motivates input-dependent codebooks.
* ``digits``: a stand-in for real embeddings. scikit-learn's bundled 8x8 digits are
  augmented by small random affine warps (so there are enough vectors) and embedded in
  ``d`` dimensions by a PCA fitted on the training images only.

The three splits never share a source: for ``digits`` the training vectors come from the
training images and the database and query vectors from disjoint sets of held-out images.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minirepro.core import datasets

DATASETS: tuple[str, ...] = ("synthetic", "digits")


@dataclass(frozen=True)
class VectorSplits:
    """float32 arrays of shape (n, d): ``train`` fits quantizers, ``database`` is encoded
    and searched, ``queries`` are searched for (never encoded)."""

    name: str
    train: np.ndarray
    database: np.ndarray
    queries: np.ndarray

    @property
    def d(self) -> int:
        return int(self.train.shape[1])


def _check_sizes(n_train: int, n_database: int, n_queries: int) -> None:
    for label, n in (("n_train", n_train), ("n_database", n_database), ("n_queries", n_queries)):
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{label} must be a positive integer, got {n!r}")


def synthetic_vectors(n_train: int, n_database: int, n_queries: int, d: int = 32,
                      n_components: int = 16, rank: int = 4, seed: int = 0) -> VectorSplits:
    """Train/database/query splits drawn i.i.d. from one low-rank Gaussian mixture in ``d`` dims."""
    _check_sizes(n_train, n_database, n_queries)
    n = n_train + n_database + n_queries
    X, _ = datasets.gaussian_mixture(n=n, d=d, n_components=n_components, rank=rank, seed=seed)
    X = X.astype(np.float32)
    return VectorSplits("synthetic", X[:n_train], X[n_train:n_train + n_database],
                        X[n_train + n_database:])


def warp_images(images: np.ndarray, n: int, rng: np.random.Generator,
                max_rotation: float = 0.25, max_shift: float = 0.8,
                scale_range: tuple[float, float] = (0.9, 1.1)) -> np.ndarray:
    """``n`` randomly warped copies of square images, by bilinear resampling.

    Args:
        images: (n_images, s, s) array; each output picks a source image uniformly.
        n: number of warped images to make.
        rng: the generator that draws sources, rotations (radians), scales and shifts (pixels).

    Returns:
        (n, s * s) float array: the warped images, flattened, zero outside the frame.
    """
    if images.ndim != 3 or images.shape[1] != images.shape[2]:
        raise ValueError(f"images must have shape (n, s, s), got {images.shape}")
    s = images.shape[1]
    src = rng.integers(0, len(images), size=n)
    theta = rng.uniform(-max_rotation, max_rotation, size=n)
    zoom = rng.uniform(*scale_range, size=n)
    shift = rng.uniform(-max_shift, max_shift, size=(n, 2))
    centre = (s - 1) / 2.0
    yy, xx = np.meshgrid(np.arange(s, dtype=np.float64) - centre,
                         np.arange(s, dtype=np.float64) - centre, indexing="ij")
    cos, sin = np.cos(theta)[:, None, None], np.sin(theta)[:, None, None]
    z = zoom[:, None, None]
    # inverse map: output pixel -> source coordinate
    sy = (cos * yy[None] - sin * xx[None]) / z + centre + shift[:, 0, None, None]
    sx = (sin * yy[None] + cos * xx[None]) / z + centre + shift[:, 1, None, None]
    y0, x0 = np.floor(sy).astype(int), np.floor(sx).astype(int)
    wy, wx = sy - y0, sx - x0
    padded = np.pad(images, ((0, 0), (1, 1), (1, 1)))  # zeros outside the frame
    out = np.zeros((n, s, s))
    for dy, fy in ((0, 1 - wy), (1, wy)):
        for dx, fx in ((0, 1 - wx), (1, wx)):
            yi = np.clip(y0 + dy + 1, 0, s + 1)
            xi = np.clip(x0 + dx + 1, 0, s + 1)
            out += fy * fx * padded[src[:, None, None], yi, xi]
    return out.reshape(n, s * s)


def digits_vectors(n_train: int, n_database: int, n_queries: int, d: int = 32,
                   seed: int = 0, query_images: int = 100) -> VectorSplits:
    """Warped digits embedded by PCA: a real-data stand-in for learned embeddings.

    Training vectors are warps of the training images; database and query vectors are
    warps of two disjoint sets of held-out images (``query_images`` of them for queries).
    The PCA (to ``d`` dims) is fitted on the training vectors only.
    """
    from sklearn.decomposition import PCA

    _check_sizes(n_train, n_database, n_queries)
    if not 1 <= d <= 64:
        raise ValueError(f"digits vectors have at most 64 dims, got d={d}")
    split = datasets.digits(seed=seed)
    rng = np.random.default_rng(seed + 12_000)
    tr_img = split.X_train.reshape(-1, 8, 8)
    te_img = split.X_test.reshape(-1, 8, 8)
    if not 1 <= query_images < len(te_img):
        raise ValueError(f"query_images must be in [1, {len(te_img) - 1}], got {query_images}")
    q_img, db_img = te_img[:query_images], te_img[query_images:]
    Xt = warp_images(tr_img, n_train, rng)
    Xb = warp_images(db_img, n_database, rng)
    Xq = warp_images(q_img, n_queries, rng)
    pca = PCA(n_components=d, random_state=seed).fit(Xt)
    emb = [pca.transform(a).astype(np.float32) for a in (Xt, Xb, Xq)]
    return VectorSplits("digits", *emb)


def load_vectors(name: str, n_train: int, n_database: int, n_queries: int, d: int = 32,
                 seed: int = 0) -> VectorSplits:
    """The vector set ``name`` (one of ``DATASETS``) with the given split sizes."""
    if name == "synthetic":
        return synthetic_vectors(n_train, n_database, n_queries, d=d, seed=seed)
    if name == "digits":
        return digits_vectors(n_train, n_database, n_queries, d=d, seed=seed)
    raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
