"""FedAvg of a softmax-regression model, run for every coalition of clients at once."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

N_CLASSES = 10


def add_bias(X: np.ndarray) -> np.ndarray:
    """[reconstruction] the miniature's softmax regression, its bias column: ``[X, 1]``; (n, d + 1)."""
    return np.hstack([X, np.ones((len(X), 1))])


def softmax(z: np.ndarray) -> np.ndarray:
    """[reconstruction] the miniature's softmax regression: softmax over the last axis, stable."""
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def local_update(W: np.ndarray, X: np.ndarray, y: np.ndarray, steps: int, lr: float,
                 weight_decay: float) -> np.ndarray:
    """Eq. (attribution-attack-eq-fedavg), the client update Delta_k^t: ``steps`` GD steps on CE.

    ``steps`` full-batch gradient-descent steps on the mean cross-entropy.

    ``W`` holds ``C`` models side by side, shape (d + 1, C * 10); ``X`` (n, d + 1) with the
    bias column. Returns the update (new minus old weights), shape of ``W``. All C models
    are trained by two matrix products per step.
    """
    n = len(X)
    C = W.shape[1] // N_CLASSES
    Y = np.zeros((n, 1, N_CLASSES))
    Y[np.arange(n), 0, y] = 1.0
    V = W.copy()
    for _ in range(steps):
        P = softmax((X @ V).reshape(n, C, N_CLASSES))
        G = X.T @ (P - Y).reshape(n, C * N_CLASSES) / n + weight_decay * V
        V -= lr * G
    return V - W


@dataclass
class CoalitionRun:
    """Eq. (attribution-attack-eq-fedavg) on every coalition, its record: masks, weights, history.

    FedAvg on every coalition: ``masks`` (C, n_clients) bool, final weights
    ``W`` (C, d + 1, 10), and per-round global weights and client updates of the
    grand coalition (``history`` (R + 1, d + 1, 10), ``updates`` (R, n_clients, d + 1, 10))."""

    masks: np.ndarray
    W: np.ndarray
    history: np.ndarray
    updates: np.ndarray


def all_masks(n: int) -> np.ndarray:
    """Eq. (attribution-attack-eq-shapley), its coalitions S: one boolean row each; (2**n, n).

    Row ``b`` holds the bits of ``b``.
    """
    b = np.arange(2 ** n)[:, None]
    return ((b >> np.arange(n)[None, :]) & 1).astype(bool)


def fedavg_coalitions(clients: list[tuple[np.ndarray, np.ndarray]], rounds: int, local_steps: int,
                      lr: float, weight_decay: float = 0.0, masks: np.ndarray | None = None) -> CoalitionRun:
    """Eq. (attribution-attack-eq-fedavg), equal client weights, for every coalition in ``masks``.

    ``masks`` defaults to all 2**n coalitions.

    Round t: every member k of coalition S starts from S's global model, makes
    ``local_steps`` GD steps on its data, and the server averages the members' updates
    (an empty coalition keeps the zero start). The last row of ``masks`` must be the grand
    coalition for ``history``/``updates`` to be the full federation's.
    """
    n = len(clients)
    masks = all_masks(n) if masks is None else np.asarray(masks, dtype=bool)
    if masks.ndim != 2 or masks.shape[1] != n:
        raise ValueError(f"masks must have shape (C, {n}), got {masks.shape}")
    Xs = [add_bias(X) for X, _ in clients]
    d1, C = Xs[0].shape[1], len(masks)
    W = np.zeros((d1, C * N_CLASSES))
    size = np.maximum(masks.sum(1), 1).astype(float)
    hist, ups = [W[:, -N_CLASSES:].copy()], []
    with threadpool_limits(1):
        for _ in range(rounds):
            agg = np.zeros_like(W)
            round_ups = []
            for k, (Xk, (_, yk)) in enumerate(zip(Xs, clients)):
                cols = np.flatnonzero(np.repeat(masks[:, k], N_CLASSES))
                upd = np.zeros_like(W)
                if len(cols):
                    upd[:, cols] = local_update(W[:, cols], Xk, yk, local_steps, lr, weight_decay)
                agg += upd
                round_ups.append(upd[:, -N_CLASSES:].copy())
            W = W + agg / np.repeat(size, N_CLASSES)[None, :]
            hist.append(W[:, -N_CLASSES:].copy())
            ups.append(np.stack(round_ups))
    Wc = W.reshape(d1, C, N_CLASSES).transpose(1, 0, 2)
    return CoalitionRun(masks=masks, W=Wc, history=np.stack(hist), updates=np.stack(ups))


def accuracy(W: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Eq. (attribution-attack-eq-shapley), its utility U(S): accuracy of each model; (C,) or ().

    ``W`` is (C, d + 1, 10) or (d + 1, 10); the data are ``(X, y)``.
    """
    logits = np.einsum("nd,...dk->...nk", add_bias(X), W)
    return (logits.argmax(-1) == y).mean(-1)


def per_class_accuracy(W: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[reconstruction] coverage of classes: one model's accuracy per true class; (10,).

    ``W`` is (d + 1, 10); NaN for an absent class.
    """
    pred = (add_bias(X) @ W).argmax(-1)
    return np.array([np.mean(pred[y == c] == c) if np.any(y == c) else np.nan for c in range(N_CLASSES)])
