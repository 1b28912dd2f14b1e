"""Downstream metrics and the per-run measurement of every quantity of the theory."""

from __future__ import annotations

import numpy as np

from minirepro.papers.ssa.geometry import (
    check_pairs,
    effective_rank,
    gap_angle,
    isometry_violation,
    liang_gap,
    normalize,
    pair_cosine,
    project,
    shared_alignment,
    shared_space,
    translate,
)


def recall_at_k(x: np.ndarray, y: np.ndarray, k: int = 1) -> float:
    """Retrieval R@k between paired embeddings ``(n, d)``: the fraction of queries whose
    partner ranks among the top ``k`` by cosine, averaged over x->y and y->x. Ties count
    against the query (the partner must beat every other candidate strictly)."""
    x, y = check_pairs(x, y)
    if not 1 <= k <= x.shape[0]:
        raise ValueError(f"k must be in [1, {x.shape[0]}], got {k}")
    sim = normalize(x) @ normalize(y).T
    diag = np.diag(sim)
    r_xy = np.mean((sim >= diag[:, None]).sum(1) <= k)  # rank of the partner in each row
    r_yx = np.mean((sim >= diag[None, :]).sum(0) <= k)
    return float((r_xy + r_yx) / 2)


def zero_shot_accuracy(x: np.ndarray, prompts: np.ndarray, labels: np.ndarray) -> float:
    """Zero-shot accuracy: each ``x`` (``(n, d)``) takes the class of its most similar
    prompt embedding (``(n_classes, d)``, row c for class c); ``labels``: ``(n,)``."""
    x, p = normalize(x), normalize(prompts)
    labels = np.asarray(labels)
    if labels.shape != (x.shape[0],):
        raise ValueError(f"labels must be ({x.shape[0]},), got {labels.shape}")
    return float(np.mean(np.argmax(x @ p.T, 1) == labels))


def measure(x_est: np.ndarray, y_est: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
            prompts: np.ndarray | None = None, labels: np.ndarray | None = None) -> dict[str, float]:
    """Every quantity of the theory and every downstream metric for one run.

    The shared subspace S is estimated on the held-out ``est`` embeddings (never on the
    test pairs); everything else is measured on the test pairs. Angles in degrees.
    """
    space = shared_space(x_est, y_est)
    out = {
        "gap (deg)": gap_angle(x_test, y_test),
        "Liang gap": liang_gap(x_test, y_test),
        "mean norm": float(np.linalg.norm(x_test.mean(0)) + np.linalg.norm(y_test.mean(0))) / 2,
        "phi_min (deg)": space.phi_min,
        "d_overlap": float(space.d_overlap),
        "erank x": effective_rank(x_test),
        "erank y": effective_rank(y_test),
        "alignment": shared_alignment(x_test, y_test, space.basis),
        "pair cosine": pair_cosine(x_test, y_test),
        "isometry violation": isometry_violation(x_test, y_test),
        "R@1": recall_at_k(x_test, y_test, 1),
        "R@5": recall_at_k(x_test, y_test, 5),
    }
    if prompts is not None and labels is not None:
        out["zero-shot"] = zero_shot_accuracy(x_test, prompts, labels)
    return out


def post_hoc(x_est: np.ndarray, y_est: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
             prompts: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, ...]]:
    """The post-hoc arms on one trained run's embeddings, as new (est, test, prompts) sets:

    ``SSP``: both modalities projected onto S (estimated on ``est``) and renormalised
    (App. C.3); ``translation`` [reconstruction]: x shifted by μ_y - μ_x (means on ``est``).
    Returns ``{arm: (x_est, y_est, x_test, y_test, prompts)}``.
    """
    basis = shared_space(x_est, y_est).basis
    pr = (lambda p: None if p is None else project(p, basis))(prompts)
    ssp = (project(x_est, basis), project(y_est, basis), project(x_test, basis), project(y_test, basis), pr)
    mx, my = x_est.mean(0), y_est.mean(0)
    tr = (translate(x_est, mx, my), y_est, translate(x_test, mx, my), y_test, prompts)
    return {"SSP": ssp, "translation": tr}
