"""Server-side defences that score each client's update in a round, and their flags."""

from __future__ import annotations

import numpy as np


def _flat(updates: np.ndarray) -> np.ndarray:
    u = np.asarray(updates, dtype=float)
    if u.ndim < 2 or len(u) < 2:
        raise ValueError(f"need updates of shape (n_clients >= 2, ...), got {u.shape}")
    return u.reshape(len(u), -1)


def krum_scores(updates: np.ndarray, f: int) -> np.ndarray:
    """[reconstruction] geometric defence, Krum (Blanchard et al. 2017): scores; (n, ...) -> (n,).

    score_i = sum of squared distances from update i to its
    n - f - 2 nearest other updates. ``updates`` (n, ...); needs n > f + 2.
    """
    u = _flat(updates)
    n = len(u)
    m = n - f - 2
    if f < 0 or m < 1:
        raise ValueError(f"Krum needs n > f + 2 clients: n={n}, f={f}")
    sq = (u * u).sum(1)
    D = np.maximum(sq[:, None] + sq[None, :] - 2 * u @ u.T, 0.0)
    np.fill_diagonal(D, np.inf)
    return np.sort(D, axis=1)[:, :m].sum(1)


def krum_flags(updates: np.ndarray, f: int) -> np.ndarray:
    """[reconstruction] geometric defence, Multi-Krum: flagged = not among the n - f kept; (n,)."""
    s = krum_scores(updates, f)
    keep = np.argsort(s, kind="stable")[: len(s) - f]
    flags = np.ones(len(s), dtype=bool)
    flags[keep] = False
    return flags


def cosine_to_others(updates: np.ndarray) -> np.ndarray:
    """[reconstruction] geometric diagnostic: cosine of update i to the others' mean; (n,)."""
    u = _flat(updates)
    n = len(u)
    others = (u.sum(0)[None, :] - u) / (n - 1)
    num = (u * others).sum(1)
    den = np.linalg.norm(u, axis=1) * np.linalg.norm(others, axis=1)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def foolsgold_weights(history: np.ndarray, kappa: float = 1.0) -> np.ndarray:
    """[reconstruction] geometric defence, FoolsGold (Fung et al. 2020, its Alg. 1): weights; (n,).

    Learning-rate weights from the clients' summed
    past updates ``history`` (n, ...): clients whose history is too similar to another's
    (sybils pushing one direction) get weights near 0. Shape (n,), in [0, 1].
    """
    h = _flat(history)
    n = len(h)
    nrm = np.linalg.norm(h, axis=1)
    safe = np.where(nrm > 0, nrm, 1.0)
    cs = (h @ h.T) / safe[:, None] / safe[None, :]
    np.fill_diagonal(cs, -np.inf)
    v = cs.max(1)
    np.fill_diagonal(cs, 0.0)
    for i in range(n):  # pardoning: a client less similar to others is not punished for j's similarity
        for j in range(n):
            if i != j and v[j] > v[i] and v[j] > 0:
                cs[i, j] *= v[i] / v[j]
    np.fill_diagonal(cs, -np.inf)
    wv = np.clip(1.0 - cs.max(1), 0.0, 1.0)
    if wv.max() > 0:
        wv = wv / wv.max()
    wv[wv == 1.0] = 0.99
    with np.errstate(divide="ignore"):
        wv = kappa * (np.log(wv / (1.0 - wv)) + 0.5)
    return np.clip(np.nan_to_num(wv, neginf=0.0, posinf=1.0), 0.0, 1.0)


def norm_ratio(updates: np.ndarray) -> np.ndarray:
    """[reconstruction] geometric defence, clipping's unit: each norm over the round's median; (n,)."""
    nrm = np.linalg.norm(_flat(updates), axis=1)
    med = np.median(nrm)
    return nrm / med if med > 0 else np.zeros_like(nrm)


def clip_flags(updates: np.ndarray, factor: float) -> np.ndarray:
    """[reconstruction] geometric defence, norm clipping at ``factor`` x median: flagged = clipped."""
    if factor <= 0:
        raise ValueError(f"clip factor must be positive, got {factor}")
    return norm_ratio(updates) > factor


def defence_report(updates: np.ndarray, f: int, fg_threshold: float, clip_factor: float) -> dict[str, np.ndarray]:
    """[reconstruction] geometric defences: each one's score and flag per round and client.

    ``updates`` is (R, n, ...).

    Krum flags the ``f`` clients Multi-Krum drops; FoolsGold (on the updates summed up to
    the round) flags weights below ``fg_threshold``; clipping flags norms above
    ``clip_factor`` x the round's median. Returns arrays of shape (R, n).
    """
    out: dict[str, list] = {k: [] for k in ("krum", "krum_flag", "foolsgold", "foolsgold_flag",
                                            "norm", "norm_flag")}
    cum = np.zeros_like(updates[0])
    for u in updates:
        cum = cum + u
        out["krum"].append(krum_scores(u, f))
        out["krum_flag"].append(krum_flags(u, f))
        w = foolsgold_weights(cum)
        out["foolsgold"].append(w)
        out["foolsgold_flag"].append(w < fg_threshold)
        out["norm"].append(norm_ratio(u))
        out["norm_flag"].append(norm_ratio(u) > clip_factor)
    return {k: np.array(v) for k, v in out.items()}
