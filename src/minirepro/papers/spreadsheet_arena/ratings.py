"""Ratings from pairwise votes: Bradley-Terry on the Elo scale, bootstrap, online Elo, style control.

Bradley-Terry (BT) gives generator i a strength b_i with
P(i beats j) = sigmoid(b_i - b_j); the arena reports R_i = 1000 + (400 / ln 10)(b_i - b_anchor),
so one generator is pinned at 1000 and 400 points are a factor 10 in odds. Ties and
"both bad" count half a win to each side (the usual arena convention). The
feature-controlled ("style-controlled") model adds gamma . (x_A - x_B) to the gap and
handles ties explicitly with the Rao-Kupper threshold tau (see :mod:`.voters`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import expit, log_expit

from minirepro.papers.spreadsheet_arena.voters import OUTCOMES

ELO_SCALE = 400.0 / np.log(10.0)
_COLUMNS = ("model_a", "model_b", "winner")


def check_battles(df: pd.DataFrame, models: list[str] | None = None) -> list[str]:
    """Eq. (spreadsheetarena-eq-bt-fit), its input: validate votes, return model names.

    The names come sorted, or as ``models`` if given.

    Raises:
        ValueError: a column is missing, a winner is not one of ``OUTCOMES``, a model is
            unknown, a battle pits a model against itself, or there are no battles.
    """
    missing = [c for c in _COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"votes are missing columns {missing}; expected at least {list(_COLUMNS)}")
    if len(df) == 0:
        raise ValueError("no votes to rate")
    bad = sorted(set(df["winner"].unique().tolist()) - set(OUTCOMES))
    if bad:
        raise ValueError(f"unknown winner values {bad[:5]}; expected one of {OUTCOMES}")
    if (df["model_a"] == df["model_b"]).any():
        raise ValueError("a battle pits a model against itself")
    seen = sorted(set(df["model_a"].unique().tolist()) | set(df["model_b"].unique().tolist()))
    if models is None:
        return seen
    unknown = sorted(set(seen) - set(models))
    if unknown:
        raise ValueError(f"votes name models {unknown} that are not in {models}")
    return list(models)


def _cells(df: pd.DataFrame, models: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (a, b, outcome) cells and their counts: ``(cells (n, 3) int, counts (n,))``."""
    k, n_o = len(models), len(OUTCOMES)
    a = pd.Categorical(df["model_a"], categories=models).codes.astype(np.int64)
    b = pd.Categorical(df["model_b"], categories=models).codes.astype(np.int64)
    o = pd.Categorical(df["winner"], categories=OUTCOMES).codes.astype(np.int64)
    counts = np.bincount((a * k + b) * n_o + o, minlength=k * k * n_o)
    nz = np.flatnonzero(counts)
    cells = np.stack([nz // (k * n_o), (nz // n_o) % k, nz % n_o], axis=1)
    return cells, counts[nz].astype(float)


def _contrib(cells: np.ndarray, k: int) -> np.ndarray:
    """(n_cells, K*K) map from cell counts to the flattened win matrix."""
    C = np.zeros((len(cells), k * k))
    a, b, o = cells.T
    win_a = np.where(o == 0, 1.0, np.where(o == 1, 0.0, 0.5))
    C[np.arange(len(cells)), a * k + b] += win_a
    C[np.arange(len(cells)), b * k + a] += 1.0 - win_a
    return C


def win_matrix(df: pd.DataFrame, models: list[str]) -> np.ndarray:
    """Eq. (spreadsheetarena-eq-bt-fit): ``W[i, j]``, i's total score against j; (K, K).

    A win counts 1, a tie or both-bad 0.5 to each side.
    """
    models = check_battles(df, models)
    cells, counts = _cells(df, models)
    return (counts @ _contrib(cells, len(models))).reshape(len(models), len(models))


def fit_bt(W: np.ndarray, anchor: int = 0, ridge: float = 1e-6, max_iter: int = 100,
           tol: float = 1e-10) -> np.ndarray:
    """Eq. (spreadsheetarena-eq-bt-fit): Bradley-Terry strengths by Newton, batched; (..., K).

    Maximises sum_{i != j} W_ij log sigmoid(b_i - b_j) - (ridge / 2) |b|^2 with b_anchor = 0.

    Args:
        W: win matrix, shape (K, K) or (B, K, K); ``W[..., i, j]`` is i's score against j.
        anchor: index of the generator whose strength is fixed at 0.
        ridge: a small L2 penalty that keeps the fit finite if one model never loses.

    Returns:
        ``b`` of shape (K,) or (B, K), natural-log-odds units, ``b[..., anchor] == 0``.
    """
    W = np.asarray(W, float)
    if W.ndim not in (2, 3) or W.shape[-1] != W.shape[-2] or W.shape[-1] < 2:
        raise ValueError(f"W must be (K, K) or (B, K, K) with K >= 2, got shape {W.shape}")
    if (W < 0).any() or not np.isfinite(W).all():
        raise ValueError("W must hold finite non-negative scores")
    k = W.shape[-1]
    if not 0 <= anchor < k:
        raise ValueError(f"anchor {anchor} out of range for {k} models")
    single = W.ndim == 2
    W = W[None] if single else W
    N = W + np.swapaxes(W, -1, -2)
    free = np.array([i for i in range(k) if i != anchor])
    b = np.zeros(W.shape[:2])
    for _ in range(max_iter):
        P = expit(b[:, :, None] - b[:, None, :])
        grad = (W - N * P).sum(-1) - ridge * b
        Q = N * P * (1 - P)
        H = Q - np.eye(k)[None] * (Q.sum(-1)[:, :, None] + ridge)  # Hessian of the log-likelihood
        g, Hf = grad[:, free], H[:, free][:, :, free]
        step = np.linalg.solve(-Hf, g[..., None])[..., 0]
        step = np.clip(step, -3.0, 3.0)
        b[:, free] += step
        if np.abs(step).max() < tol:
            break
    return b[0] if single else b


def to_elo(b: np.ndarray, anchor: int = 0, base: float = 1000.0) -> np.ndarray:
    """Eq. (spreadsheetarena-eq-bt): Elo ratings ``base + 400/ln(10) * (b - b_anchor)``; shape of b."""
    b = np.asarray(b, float)
    return base + ELO_SCALE * (b - b[..., anchor:anchor + 1])


@dataclass
class Leaderboard:
    """Eq. (spreadsheetarena-eq-bt) with bootstrap intervals: Elo ratings, one row per model."""

    models: list[str]
    rating: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    n_battles: np.ndarray

    def frame(self) -> pd.DataFrame:
        """Sorted by rating, best first."""
        df = pd.DataFrame({"model": self.models, "rating": self.rating, "lower": self.lower,
                           "upper": self.upper, "battles": self.n_battles.astype(int)})
        return df.sort_values("rating", ascending=False, ignore_index=True)


def bootstrap_bt(df: pd.DataFrame, models: list[str], n_boot: int, rng: np.random.Generator,
                 anchor: int = 0) -> np.ndarray:
    """[reconstruction] vote bootstrap of Eq. (spreadsheetarena-eq-bt): (n_boot, K) Elo ratings.

    Resampling battles with replacement is a multinomial draw over the distinct
    (model_a, model_b, outcome) cells, so every resample is fitted in one batched Newton solve.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be positive, got {n_boot}")
    models = check_battles(df, models)
    cells, counts = _cells(df, models)
    draws = rng.multinomial(int(counts.sum()), counts / counts.sum(), size=n_boot)
    k = len(models)
    W = (draws @ _contrib(cells, k)).reshape(n_boot, k, k)
    return to_elo(fit_bt(W, anchor), anchor)


def bootstrap_bt_clustered(df: pd.DataFrame, models: list[str], n_boot: int,
                           rng: np.random.Generator, anchor: int = 0,
                           cluster: str = "prompt_id") -> np.ndarray:
    """[reconstruction] cluster bootstrap of Eq. (spreadsheetarena-eq-bt): (n_boot, K) Elo ratings.

    Resamples the clusters (by default prompts, each with all of its battles) with
    replacement, so effects a prompt shares across its battles enter the intervals;
    :func:`bootstrap_bt` treats every battle as independent. Each resample's win matrix
    is its clusters' win matrices summed with their draw counts; one batched Newton solve.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be positive, got {n_boot}")
    if cluster not in df.columns:
        raise ValueError(f"votes have no {cluster!r} column to cluster on")
    models = check_battles(df, models)
    k = len(models)
    g = pd.factorize(df[cluster], sort=True)[0]
    a = pd.Categorical(df["model_a"], categories=models).codes.astype(np.int64)
    b = pd.Categorical(df["model_b"], categories=models).codes.astype(np.int64)
    w = df["winner"].map({"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "both_bad": 0.5}).to_numpy()
    n_g = int(g.max()) + 1
    per = np.zeros((n_g, k * k))  # (n_clusters, K*K): each cluster's win matrix
    np.add.at(per, (g, a * k + b), w)
    np.add.at(per, (g, b * k + a), 1.0 - w)
    draws = rng.multinomial(n_g, np.full(n_g, 1.0 / n_g), size=n_boot)
    W = (draws @ per).reshape(n_boot, k, k)
    return to_elo(fit_bt(W, anchor), anchor)


def leaderboard(df: pd.DataFrame, models: list[str] | None = None, n_boot: int = 200,
                rng: np.random.Generator | None = None, anchor: str | int = 0,
                level: float = 0.95) -> Leaderboard:
    """Eq. (spreadsheetarena-eq-bt) and its bootstrap: the arena's table, Elo scale.

    BT point ratings and percentile intervals at ``level``.
    """
    models = check_battles(df, models)
    a = models.index(anchor) if isinstance(anchor, str) else int(anchor)
    rng = rng if rng is not None else np.random.default_rng(0)
    point = to_elo(fit_bt(win_matrix(df, models), a), a)
    boot = bootstrap_bt(df, models, n_boot, rng, a)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2], axis=0)
    n = np.array([((df["model_a"] == m) | (df["model_b"] == m)).sum() for m in models])
    return Leaderboard(models, point, lo, hi, n)


def online_elo(df: pd.DataFrame, models: list[str], k_factor: float = 16.0,
               order: np.ndarray | None = None, init: float = 1000.0) -> np.ndarray:
    """Eq. (spreadsheetarena-eq-elo): sequential online Elo, one update per battle, in order.

    After each battle R_a += K (s_a - E_a), E_a = 1 / (1 + 10^((R_b - R_a)/400)).

    Returns:
        The rating trajectory, shape (n_battles + 1, K); the result depends on ``order``.
    """
    models = check_battles(df, models)
    idx = {m: k for k, m in enumerate(models)}
    a = df["model_a"].map(idx).to_numpy()
    b = df["model_b"].map(idx).to_numpy()
    s = df["winner"].map({"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "both_bad": 0.5}).to_numpy()
    order = np.arange(len(df)) if order is None else np.asarray(order)
    R = np.full(len(models), float(init))
    traj = np.empty((len(order) + 1, len(models)))
    traj[0] = R
    for t, i in enumerate(order):
        e = 1.0 / (1.0 + 10 ** ((R[b[i]] - R[a[i]]) / 400.0))
        R[a[i]] += k_factor * (s[i] - e)
        R[b[i]] -= k_factor * (s[i] - e)
        traj[t + 1] = R
    return traj


@dataclass
class StyleFit:
    """Eq. (spreadsheetarena-eq-style), fitted: strengths b, coefficients gamma, their s.e., tau."""

    models: list[str]
    b: np.ndarray
    gamma: np.ndarray
    gamma_se: np.ndarray
    tau: float
    loglik: float
    n: int
    n_params: int = 0  # free parameters fitted: free strengths + F gammas + tau


def _rk_terms(d: np.ndarray, tau: float, y: np.ndarray):
    """Per-vote Rao-Kupper log-likelihood and its derivatives in d and tau."""
    la, lb = log_expit(d - tau), log_expit(-d - tau)
    pa, pb = np.exp(la), np.exp(lb)
    pt = np.clip(1.0 - pa - pb, 1e-300, None)
    ll = np.where(y == 0, la, np.where(y == 1, lb, np.log(pt)))
    qa, qb = pa * (1 - pa), pb * (1 - pb)
    gd = np.where(y == 0, 1 - pa, np.where(y == 1, -(1 - pb), (qb - qa) / pt))
    gt = np.where(y == 0, -(1 - pa), np.where(y == 1, -(1 - pb), (qa + qb) / pt))
    return ll, gd, gt


def _rk_nll(params, D, X, y, k_free, ridge):
    """Negative log-likelihood of the feature-controlled Rao-Kupper model and its gradient."""
    b, g, phi = params[:k_free], params[k_free:-1], params[-1]
    tau = np.exp(phi)
    ll, gd, gt = _rk_terms(D @ b + X @ g, tau, y)
    nll = -ll.sum() + 0.5 * ridge * (b @ b + g @ g)
    grad = -np.concatenate([D.T @ gd, X.T @ gd, [gt.sum() * tau]])
    grad[:-1] += ridge * params[:-1]
    return nll, grad


def _rk_hessian(params, D, X, y, k_free, ridge, h=1e-5):
    """Hessian of ``_rk_nll``: per-vote second derivatives (central differences in d and tau,
    vectorised over votes) assembled through the design Z = [D, X]."""
    Z = np.hstack([D, X])
    beta, tau = params[:-1], np.exp(params[-1])
    d = Z @ beta
    _, gd_p, gt_p = _rk_terms(d + h, tau, y)
    _, gd_m, gt_m = _rk_terms(d - h, tau, y)
    _, gd_tp, gt_tp = _rk_terms(d, tau + h, y)
    _, gd_tm, gt_tm = _rk_terms(d, tau - h, y)
    _, _, gt0 = _rk_terms(d, tau, y)
    h_dd = (gd_p - gd_m) / (2 * h)
    h_dt = 0.5 * ((gd_tp - gd_tm) + (gt_p - gt_m)) / (2 * h)
    h_tt = (gt_tp - gt_tm) / (2 * h)
    k = Z.shape[1]
    H = np.empty((k + 1, k + 1))
    H[:k, :k] = -(Z.T * h_dd) @ Z + ridge * np.eye(k)
    H[:k, k] = H[k, :k] = -(Z.T @ h_dt) * tau
    H[k, k] = -(h_tt.sum() * tau**2 + gt0.sum() * tau)
    return H


def fit_style_control(df: pd.DataFrame, feats_a: np.ndarray, feats_b: np.ndarray,
                      models: list[str] | None = None, anchor: int | list[int] = 0,
                      ridge: float = 1e-4) -> StyleFit:
    """Eq. (spreadsheetarena-eq-style): feature-controlled Rao-Kupper fit by Newton's method.

    Fits P(A) = sigmoid(d - tau), P(B) = sigmoid(-d - tau), d = b_A - b_B + gamma . (x_A - x_B).

    "both_bad" votes are dropped (they carry no direction); ties are modelled.

    Args:
        df: votes (``model_a, model_b, winner``), n rows.
        feats_a, feats_b: (n, F) features of the two workbooks of each vote.
        anchor: index (or indices, one per disconnected block) of strengths fixed at 0.

    Returns:
        :class:`StyleFit` with ``b`` (K,), ``gamma`` (F,) and Wald standard errors of gamma
        from the inverse Hessian at the optimum (Newton's method with backtracking).
    """
    models = check_battles(df, models)
    feats_a, feats_b = _check_style_features(df, feats_a, feats_b)
    keep = (df["winner"] != "both_bad").to_numpy()
    if keep.sum() < 2:
        raise ValueError("need at least two votes that are not 'both_bad'")
    sub = df[keep]
    free, D = _strength_design(sub, models, anchor)
    X = (feats_a - feats_b)[keep]
    y = sub["winner"].map({"model_a": 0, "model_b": 1, "tie": 2}).to_numpy()
    args = (D, X, y, len(free), ridge)
    theta, nll = _newton_rk(len(free) + X.shape[1] + 1, args)
    cov = np.linalg.pinv(_rk_hessian(theta, *args))
    b = np.zeros(len(models))
    b[free] = theta[:len(free)]
    nf = len(free)
    se = np.sqrt(np.clip(np.diag(cov)[nf:nf + X.shape[1]], 0, None))
    return StyleFit(models, b, theta[nf:-1], se, float(np.exp(theta[-1])), float(-nll),
                    int(keep.sum()), int(len(theta)))


def _check_style_features(df: pd.DataFrame, feats_a, feats_b) -> tuple[np.ndarray, np.ndarray]:
    """The two workbooks' feature matrices as float arrays, checked to be both (n votes, F)."""
    feats_a, feats_b = np.asarray(feats_a, float), np.asarray(feats_b, float)
    if feats_a.shape != feats_b.shape or feats_a.ndim != 2 or len(feats_a) != len(df):
        raise ValueError(f"feats_a and feats_b must both be (n={len(df)}, F); got "
                         f"{feats_a.shape} and {feats_b.shape}")
    return feats_a, feats_b


def _strength_design(sub: pd.DataFrame, models: list[str],
                     anchor: int | list[int]) -> tuple[list[int], np.ndarray]:
    """The free (non-anchor) models' indices and the design D (+1 for model A, -1 for model B)."""
    idx = {m: k for k, m in enumerate(models)}
    anchors = [anchor] if isinstance(anchor, (int, np.integer)) else list(anchor)
    free = [i for i in range(len(models)) if i not in anchors]
    col = {m: j for j, m in enumerate(free)}
    D = np.zeros((len(sub), len(free)))
    for side, sign in (("model_a", 1.0), ("model_b", -1.0)):
        for r, m in enumerate(sub[side].map(idx)):
            if m in col:
                D[r, col[m]] += sign
    return free, D


def _newton_rk(n_params: int, args: tuple) -> tuple[np.ndarray, float]:
    """Newton's method with backtracking on ``_rk_nll`` from zero strengths and tau = 0.3."""
    x0 = np.zeros(n_params)
    x0[-1] = np.log(0.3)
    theta = x0
    nll, g = _rk_nll(theta, *args)
    for _ in range(100):  # Newton with backtracking on the negative log-likelihood
        H = _rk_hessian(theta, *args)
        step = np.linalg.lstsq(H, g, rcond=None)[0]
        t, moved = 1.0, False
        while t > 1e-6:
            cand = theta - t * step
            c_nll, c_g = _rk_nll(cand, *args)
            if np.isfinite(c_nll) and c_nll <= nll + 1e-12:
                theta, nll, g, moved = cand, c_nll, c_g, True
                break
            t *= 0.5
        if not moved or np.abs(g).max() < 1e-8 or np.abs(t * step).max() < 1e-10:
            break
    return theta, nll

