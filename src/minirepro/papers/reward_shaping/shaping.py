"""Mechanistic reward shaping: difference-of-means probes, Gram-Schmidt, projection (§3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _as_states(x: np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty (n, d) array of hidden states, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or inf")
    return a


def diff_of_means_probe(h_pos: np.ndarray, h_neg: np.ndarray) -> np.ndarray:
    """Eq. (reward-shaping-eq-probe): p = normalise(mean h+ - mean h-) over contrastive pairs.

    Args:
        h_pos: ``(n, d)`` states of the texts with the attribute.
        h_neg: ``(m, d)`` states of the texts without it.

    Returns:
        unit vector ``(d,)``.
    """
    a, b = _as_states(h_pos, "h_pos"), _as_states(h_neg, "h_neg")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"h_pos and h_neg have different widths: {a.shape[1]} vs {b.shape[1]}")
    p = a.mean(0) - b.mean(0)
    norm = np.linalg.norm(p)
    if norm < 1e-12:
        raise ValueError("the two contrast sets have the same mean: the probe is undefined")
    return p / norm


def clean_probe(p: np.ndarray, correctness: np.ndarray) -> np.ndarray:
    """Eq. (reward-shaping-eq-probe), cleaning: remove the correctness direction from ``p``, renormalise."""
    p, c = np.asarray(p, float), np.asarray(correctness, float)
    if p.ndim != 1 or c.shape != p.shape:
        raise ValueError(f"probe and correctness direction must be vectors of one width, got {p.shape}, {c.shape}")
    c = c / np.linalg.norm(c)
    q = p - (p @ c) * c
    norm = np.linalg.norm(q)
    if norm < 1e-12:
        raise ValueError("the probe is parallel to the correctness direction; nothing is left after cleaning")
    return q / norm


def gram_schmidt(probes: Sequence[np.ndarray] | np.ndarray, tol: float = 1e-8) -> np.ndarray:
    """Eq. (reward-shaping-eq-shaped)'s B: orthonormal rows spanning the probes (modified Gram-Schmidt).

    Probes whose residual norm falls below ``tol`` (linearly dependent on earlier
    ones) are dropped, so ``B`` is ``(rank, d)`` with ``B B^T = I``. Each probe is
    orthogonalised twice ("twice is enough", Giraud et al. 2005): one pass leaves
    ``B B^T - I`` at ~1e-16 times the probes' condition number (1.2e-10 for a random
    5 x 5 matrix), two passes at ~1e-16 whatever it is.
    """
    P = np.atleast_2d(np.asarray(probes, dtype=np.float64))
    if P.size == 0 or P.ndim != 2:
        raise ValueError("gram_schmidt needs at least one probe vector")
    if not np.all(np.isfinite(P)):
        raise ValueError("probes contain NaN or inf")
    basis: list[np.ndarray] = []
    for v in P:
        w = v.copy()
        for _ in range(2):
            for b in basis:
                w -= (b @ w) * b
        n = np.linalg.norm(w)
        if n > tol * max(1.0, np.linalg.norm(v)):
            basis.append(w / n)
    if not basis:
        raise ValueError("all probes are zero")
    return np.stack(basis)


def project_out(h: np.ndarray, basis: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """Eq. (reward-shaping-eq-shaped): h_null = h - alpha * B^T B h per row of ``h`` (``(n, d)`` or ``(d,)``)."""
    B = np.asarray(basis, dtype=np.float64)
    H = np.asarray(h)
    if B.ndim != 2:
        raise ValueError(f"basis must be (k, d), got shape {B.shape}")
    if H.shape[-1] != B.shape[1]:
        raise ValueError(f"hidden states have width {H.shape[-1]} but the probes have width {B.shape[1]}")
    return (H - alpha * (H @ B.T) @ B).astype(H.dtype if H.dtype.kind == "f" else np.float64)
