"""The theory's quantities: the gap, principal angles, effective rank, the shared subspace.

Everything here is NumPy on float64 arrays of embeddings, one row per sample
(``(n, d)``). Embeddings are expected to be unit vectors (the sphere S^{d-1});
functions that need it say so and refuse zero-norm rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

OVERLAP_TOL = 1e-3  # App. C.3: directions whose principal cosine exceeds 1 - 1e-3 are shared
VARIANCE_KEPT = 0.99  # App. C.3: right singular vectors up to 99 % cumulative variance


def _matrix(x: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (n, d) matrix, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} holds a non-finite value")
    return arr


def check_pairs(x: np.ndarray, y: np.ndarray, unit: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (ssa-eq-infonce)'s pairs (x_i, y_i): ``x``, ``y`` as paired ``(n, d)`` float arrays, or an error.

    Raises:
        ValueError: not 2-D, different pair counts or widths, a non-finite value, or
            (with ``unit``) a row of zero norm, which has no direction on the sphere.
    """
    x, y = _matrix(x, "x"), _matrix(y, "y")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"paired embeddings need the same number of rows: x has {x.shape[0]}, "
                         f"y has {y.shape[0]}")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"both modalities must live in the same space: x is {x.shape[1]}-d, "
                         f"y is {y.shape[1]}-d")
    if unit:
        for name, arr in (("x", x), ("y", y)):
            norms = np.linalg.norm(arr, axis=1)
            if np.any(norms < 1e-12):
                raise ValueError(f"{name} has a zero-norm embedding (row {int(np.argmin(norms))}): "
                                 "it has no direction on the sphere")
    return x, y


def normalize(x: np.ndarray) -> np.ndarray:
    """Eq. (ssa-eq-infonce)'s unit vectors: rows of ``x`` scaled to unit norm, ``(n, d)``; a zero row is an error."""
    x = _matrix(x, "x")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if np.any(norms < 1e-12):
        raise ValueError(f"x has a zero-norm row (row {int(np.argmin(norms))}): cannot normalise it")
    return x / norms


def gap_angle(x: np.ndarray, y: np.ndarray) -> float:
    """Eq. (ssa-eq-gap), vMF model: the gap Δθ = arccos(c_x · c_y) in degrees, c the mean directions.

    ``x, y``: ``(n, d)`` unit embeddings of the two modalities (paired or not, but the
    check wants equal counts). Returns an angle in [0, 180] degrees.
    """
    x, y = check_pairs(x, y)
    mx, my = x.mean(0), y.mean(0)
    nx, ny = np.linalg.norm(mx), np.linalg.norm(my)
    if nx < 1e-12 or ny < 1e-12:
        raise ValueError("a modality's mean is zero: its mean direction (and the gap angle) is undefined")
    c = float(np.clip(mx @ my / (nx * ny), -1.0, 1.0))
    return math.degrees(math.acos(c))


def liang_gap(x: np.ndarray, y: np.ndarray) -> float:
    """Eq. (ssa-eq-penalty)'s distance: Liang et al.'s gap ||μ_x - μ_y||_2 between the modality means."""
    x, y = check_pairs(x, y)
    return float(np.linalg.norm(x.mean(0) - y.mean(0)))


def orthonormal_basis(a: np.ndarray, name: str = "basis") -> np.ndarray:
    """Eq. (ssa-eq-thm3)'s Q: an orthonormal basis ``(d, k)`` of the span of ``a`` (``(d, k)``, full rank)."""
    a = _matrix(a, name)
    q, r = np.linalg.qr(a)
    if np.any(np.abs(np.diag(r)) < 1e-10 * max(1.0, np.abs(r).max())):
        raise ValueError(f"{name} does not have full column rank")
    return q


def principal_angles(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Eq. (ssa-eq-thm3): Thm 3's principal angles between span(a) and span(b), in radians, ascending.

    ``a``: ``(d, p)``, ``b``: ``(d, q)`` with full column rank. Returns ``min(p, q)``
    angles: the arccosines of the singular values of ``Q_a^T Q_b`` (Björck-Golub), with
    small angles taken from the sine form so that they stay accurate near zero.
    """
    qa, qb = orthonormal_basis(a, "a"), orthonormal_basis(b, "b")
    if qa.shape[0] != qb.shape[0]:
        raise ValueError(f"subspaces of different spaces: {qa.shape[0]} vs {qb.shape[0]} rows")
    if qa.shape[1] < qb.shape[1]:
        qa, qb = qb, qa
    cos = np.clip(np.linalg.svd(qa.T @ qb, compute_uv=False), -1.0, 1.0)
    angles = np.arccos(cos)  # ascending, as the cosines come descending
    resid = qb - qa @ (qa.T @ qb)  # the part of span(b) outside span(a)
    sin = np.clip(np.linalg.svd(resid, compute_uv=False), 0.0, 1.0)[::-1]  # ascending
    small = angles < math.pi / 4
    angles[small] = np.arcsin(sin[: angles.size][small])
    return np.sort(angles)


def effective_rank(values: np.ndarray) -> float:
    """[reconstruction] Thm 3's collapse, measured: Roy-Vetterli effective rank exp(H(σ/Σσ)) of ``σ``.

    Pass a matrix ``(n, d)`` instead and its singular values are used. Equals k for
    k equal non-zero values; 1 for a rank-one spectrum.
    """
    arr = np.asarray(values, dtype=float)
    if arr.ndim == 2:
        arr = np.linalg.svd(_matrix(arr, "matrix"), compute_uv=False)
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("effective_rank needs a non-empty 1-D array of finite values >= 0")
    total = arr.sum()
    if total <= 0:
        raise ValueError("effective_rank of an all-zero spectrum is undefined")
    p = arr[arr > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def variance_basis(x: np.ndarray, kept: float = VARIANCE_KEPT) -> np.ndarray:
    """Eq. (ssa-eq-ssp)'s B_X, App. C.3: right singular vectors of ``x`` (``(n, d)``) up to ``kept`` cumulative
    variance (squared singular values), as a ``(d, k)`` orthonormal basis."""
    x = _matrix(x, "x")
    if not 0 < kept <= 1:
        raise ValueError(f"kept must be in (0, 1], got {kept}")
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    var = s**2
    if var.sum() <= 0:
        raise ValueError("x is all zeros: it spans no subspace")
    k = int(np.searchsorted(np.cumsum(var) / var.sum(), kept - 1e-12) + 1)
    return vt[: min(k, vt.shape[0])].T


@dataclass(frozen=True)
class SharedSpace:
    """Eq. (ssa-eq-ssp): the shared subspace of two modalities (App. C.3) and what led to it.

    ``basis`` is ``(d, k)`` orthonormal; ``angles`` (degrees, ascending) are the principal
    angles between the two modalities' variance subspaces; ``d_overlap`` how many of them
    count as shared (cosine > 1 - tol); ``fallback`` is True when none did and the single
    best-aligned direction was kept instead.
    """

    basis: np.ndarray
    angles: np.ndarray
    d_overlap: int
    dim_x: int
    dim_y: int
    fallback: bool

    @property
    def phi_min(self) -> float:
        """The smallest principal angle outside the overlap (degrees; 0 if the spans nest)."""
        rest = self.angles[self.d_overlap:]
        return float(rest[0]) if rest.size else 0.0


def shared_space(x: np.ndarray, y: np.ndarray, kept: float = VARIANCE_KEPT, tol: float = OVERLAP_TOL,
                 top_k: int | None = None) -> SharedSpace:
    """Eq. (ssa-eq-ssp), App. C.3 (SSP): the shared subspace of two modalities' embeddings.

    SVD of ``x`` and ``y`` (``(n, d)`` each), bases B_X, B_Y up to ``kept`` variance, SVD
    of G = B_X^T B_Y; singular values > 1 - ``tol`` give d_overlap and
    B_S = B_X U_G[:, :d_overlap]. ``top_k`` keeps the k shared directions with the most
    projected variance of both modalities. [reconstruction] When no direction passes the
    threshold, the best-aligned one is kept (``fallback``), so a projection always exists.
    """
    x, y = check_pairs(x, y, unit=False)
    bx, by = variance_basis(x, kept), variance_basis(y, kept)
    u, s, _ = np.linalg.svd(bx.T @ by, full_matrices=False)
    s = np.clip(s, -1.0, 1.0)
    d_overlap = int(np.sum(s > 1 - tol))
    fallback = d_overlap == 0
    basis = bx @ u[:, : max(d_overlap, 1)]
    if top_k is not None and top_k < basis.shape[1]:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        var = ((x @ basis) ** 2).sum(0) + ((y @ basis) ** 2).sum(0)
        basis = basis[:, np.argsort(-var)[:top_k]]
    angles = np.degrees(principal_angles(bx, by))
    return SharedSpace(basis, angles, d_overlap, bx.shape[1], by.shape[1], fallback)


def project(x: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Eq. (ssa-eq-ssp), SSP's projection: ``x`` (``(n, d)``) onto span(``basis``) (``(d, k)`` orthonormal),
    renormalised, kept in R^d. A row with no component in the subspace is an error."""
    x = _matrix(x, "x")
    p = x @ basis @ basis.T
    norms = np.linalg.norm(p, axis=1, keepdims=True)
    if np.any(norms < 1e-12):
        raise ValueError("an embedding is orthogonal to the shared subspace: its projection is zero")
    return p / norms


def shared_alignment(x: np.ndarray, y: np.ndarray, basis: np.ndarray) -> float:
    """Eq. (ssa-eq-align): shared-space alignment, the mean cosine of pairs after projecting both modalities
    onto span(``basis``) and renormalising (in [-1, 1])."""
    x, y = check_pairs(x, y)
    px, py = project(x, basis), project(y, basis)
    return float(np.mean(np.sum(px * py, axis=1)))


def pair_cosine(x: np.ndarray, y: np.ndarray) -> float:
    """Eq. (ssa-eq-align) unprojected: the mean cosine of pairs in the full space (unit embeddings)."""
    x, y = check_pairs(x, y)
    return float(np.mean(np.sum(normalize(x) * normalize(y), axis=1)))


def isometry_violation(x: np.ndarray, y: np.ndarray) -> float:
    """[reconstruction] Thm 4's assumption x_i · c_x = y_i · c_y, measured: mean |x_i·c_x - y_i·c_y|,
    with c the unit mean directions. 0 when intra-modal isometry holds."""
    x, y = check_pairs(x, y)
    cx, cy = x.mean(0), y.mean(0)
    if np.linalg.norm(cx) < 1e-12 or np.linalg.norm(cy) < 1e-12:
        raise ValueError("a modality's mean is zero: the isometry test is undefined")
    cx, cy = cx / np.linalg.norm(cx), cy / np.linalg.norm(cy)
    return float(np.mean(np.abs(x @ cx - y @ cy)))


def translate(x: np.ndarray, mu_x: np.ndarray, mu_y: np.ndarray) -> np.ndarray:
    """[reconstruction] The translation baseline: shift ``x`` by the mean difference
    μ_y - μ_x (means estimated elsewhere, ``(d,)``) and renormalise; returns new ``x``."""
    x = _matrix(x, "x")
    return normalize(x - np.asarray(mu_x, float) + np.asarray(mu_y, float))


def subspace_pair(d: int, rank: int, n_own: int, phi_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """[reconstruction] Bases ``(d, rank)`` of two rank-``rank`` subspaces A, B of R^d that
    share ``rank - n_own`` directions (C = A ∩ B) and whose own ``n_own`` directions meet
    at principal angle ``phi_deg``: A = C + span(e_j), B = C + span(cos φ e_j + sin φ e'_j).

    With ``rank = d - 1, n_own = 1`` these are Thm 3's hyperplanes.
    """
    if not (1 <= rank <= d and 0 <= n_own <= rank):
        raise ValueError(f"need 1 <= rank <= d and 0 <= n_own <= rank, got d={d}, rank={rank}, n_own={n_own}")
    if rank + n_own > d and phi_deg != 0:
        raise ValueError(f"{n_own} own directions at an angle need rank + n_own <= d ({rank + n_own} > {d})")
    if not 0 <= phi_deg <= 90:
        raise ValueError(f"phi_deg must be in [0, 90], got {phi_deg}")
    eye = np.eye(d)
    shared = eye[:, : rank - n_own]
    own_a = eye[:, rank - n_own: rank]
    phi = math.radians(phi_deg)
    if n_own and rank + n_own <= d:
        own_b = math.cos(phi) * own_a + math.sin(phi) * eye[:, rank: rank + n_own]
    else:
        own_b = own_a
    return np.hstack([shared, own_a]), np.hstack([shared, own_b])
