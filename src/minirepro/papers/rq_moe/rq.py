"""Plain residual quantization (RQ), written here: greedy k-means on residuals.

Step m quantizes the residual left by steps 0..m-1 with its own codebook
``C_m`` of ``K`` codewords::

    i_m = argmin_k || r_m - C_m[k] ||^2,   r_{m+1} = r_m - C_m[i_m],   r_0 = x
    x_hat = sum_m C_m[i_m]

This is faiss's ``ResidualQuantizer`` with beam size 1; the unit tests compare the two.
"""

from __future__ import annotations

import numpy as np
import torch


def check_vectors(x: np.ndarray | torch.Tensor, d: int | None = None, what: str = "x") -> None:
    """Eq. (rq-moe-eq-code)'s input: raise ``ValueError`` unless ``x`` is a finite (n, d), n >= 1."""
    shape = tuple(x.shape)
    if len(shape) != 2 or shape[0] == 0:
        raise ValueError(f"{what} must be a non-empty 2-D array (n, d), got shape {shape}")
    if d is not None and shape[1] != d:
        raise ValueError(f"{what} has dimension {shape[1]}, but the quantizer expects d={d}")
    finite = torch.isfinite(x).all() if isinstance(x, torch.Tensor) else np.isfinite(x).all()
    if not bool(finite):
        raise ValueError(f"{what} contains NaN or infinite values")


def check_codes(codes: np.ndarray | torch.Tensor, M: int, K: int) -> None:
    """Eq. (rq-moe-eq-code): raise ``ValueError`` unless ``codes`` is (n, M) integers in [0, K)."""
    shape = tuple(codes.shape)
    if len(shape) != 2 or shape[1] != M:
        raise ValueError(f"codes must have shape (n, M={M}), got {shape}")
    dtype_ok = (not torch.is_floating_point(codes)) if isinstance(codes, torch.Tensor) \
        else np.issubdtype(codes.dtype, np.integer)
    if not dtype_ok:
        raise ValueError(f"codes must be integers, got dtype {codes.dtype}")
    if shape[0] and (int(codes.min()) < 0 or int(codes.max()) >= K):
        raise ValueError(f"codes must lie in [0, K={K}), got range [{int(codes.min())}, {int(codes.max())}]")


def assign(r: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Eq. (rq-moe-eq-rq): the nearest codeword ``argmin_k ||r_b - C[k]||^2``; (B,) long.

    ``r`` is (B, d) and ``C`` is (K, d), or (B, K, d) for per-vector codebooks.
    """
    if C.dim() == 2:
        dist = (C * C).sum(-1)[None, :] - 2.0 * r @ C.T
    else:  # one codebook per vector
        dist = (C * C).sum(-1) - 2.0 * torch.einsum("bd,bkd->bk", r, C)
    return dist.argmin(-1)


def kmeans(x: torch.Tensor, K: int, n_iter: int = 25, seed: int = 0) -> torch.Tensor:
    """Eq. (rq-moe-eq-rq)'s codebooks: Lloyd's k-means, ``K`` centroids (K, d) of ``x`` (n, d).

    Initial centroids are K distinct training points; an empty cluster is re-seeded
    by splitting the largest cluster (its centroid plus a small symmetric offset).
    """
    n, d = x.shape
    if n < K:
        raise ValueError(f"k-means needs at least K={K} training vectors, got {n}")
    g = torch.Generator().manual_seed(seed)
    C = x[torch.randperm(n, generator=g)[:K]].clone()
    for _ in range(n_iter):
        a = assign(x, C)
        counts = torch.bincount(a, minlength=K).to(x.dtype)
        sums = torch.zeros_like(C).index_add_(0, a, x)
        nonempty = counts > 0
        C[nonempty] = sums[nonempty] / counts[nonempty, None]
        for k in torch.nonzero(~nonempty).flatten().tolist():
            big = int(counts.argmax())
            eps = 1e-3 * (x.std() + 1e-12) * torch.randn(d, generator=g, dtype=x.dtype)
            C[k], C[big] = C[big] + eps, C[big] - eps
            counts[k] = counts[big] / 2
            counts[big] = counts[big] / 2
    return C


class PlainRQ:
    """Eq. (rq-moe-eq-rq): residual quantizer, ``M`` codebooks of ``K`` codewords in ``d`` dims.

    Greedy encoding (beam 1).

    ``fit(x)`` trains it; ``encode(x)`` gives (n, M) int64 codes; ``decode(codes)`` the
    (n, d) float32 reconstruction. ``codebooks`` is the (M, K, d) float32 array.
    """

    def __init__(self, d: int, M: int, K: int) -> None:
        if min(d, M, K) < 1:
            raise ValueError(f"d, M and K must be positive, got d={d}, M={M}, K={K}")
        self.d, self.M, self.K = d, M, K
        self.codebooks: np.ndarray | None = None

    def _require_fit(self) -> torch.Tensor:
        if self.codebooks is None:
            raise RuntimeError("PlainRQ is not trained: call fit(x) before encode or decode")
        return torch.from_numpy(self.codebooks)

    def fit(self, x: np.ndarray, n_iter: int = 25, seed: int = 0) -> PlainRQ:
        """Train the codebooks step by step: k-means on the current residuals, then subtract."""
        check_vectors(x, self.d)
        r = torch.as_tensor(np.asarray(x, dtype=np.float32)).clone()
        books = []
        for m in range(self.M):
            C = kmeans(r, self.K, n_iter=n_iter, seed=seed + m)
            r -= C[assign(r, C)]
            books.append(C)
        self.codebooks = torch.stack(books).numpy()
        return self

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Greedy codes (n, M): each step picks the codeword nearest to the residual."""
        C = self._require_fit()
        check_vectors(x, self.d)
        r = torch.as_tensor(np.asarray(x, dtype=np.float32)).clone()
        codes = torch.empty((len(r), self.M), dtype=torch.int64)
        for m in range(self.M):
            codes[:, m] = assign(r, C[m])
            r -= C[m][codes[:, m]]
        return codes.numpy()

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Reconstruction ``x_hat = sum_m C_m[i_m]``, shape (n, d)."""
        C = self._require_fit()
        check_codes(codes, self.M, self.K)
        c = torch.as_tensor(codes)
        return sum(C[m][c[:, m]] for m in range(self.M)).numpy()
