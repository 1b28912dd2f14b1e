"""Digits split into disjoint server-validation, attacker-proxy, test, client and reserve sets."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minirepro.core.datasets import digits


@dataclass(frozen=True)
class Federation:
    """The data of one seed.

    ``clients[k] = (X_k, y_k)``, ``X_k`` of shape (n_k, 64) in [0, 1], ``y_k`` (n_k,) int;
    client 0 is the adversary. ``val`` is the server's validation set (utility U),
    ``proxy`` the attacker's own small labelled set, ``test`` the held-out test set,
    ``reserve`` real samples used by no one except the real-data control.
    ``roles`` names each class: ``adversary``, ``rare`` or ``common``.
    """

    clients: list[tuple[np.ndarray, np.ndarray]]
    val: tuple[np.ndarray, np.ndarray]
    proxy: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]
    reserve: tuple[np.ndarray, np.ndarray]
    roles: dict[int, str]


def make_federation(seed: int, n_benign: int = 5, per_class: int = 30, rare_per_class: int = 4,
                    n_val: int = 300, proxy_per_class: int = 5) -> Federation:
    """[reconstruction] Label-skewed clients on digits (notes: 'class-shard label skew').

    Classes are shuffled by ``seed``. Six *ring* classes: client ``j`` (the adversary is
    client 0) holds ring classes ``j`` and ``j+1`` (mod 6), ``per_class`` each, so every
    ring class, the adversary's two included, is held by two clients. Four *rare* classes:
    benign clients 1 to 4 hold ``rare_per_class`` samples of one each. The adversary is thus a
    typical client, and the rare classes are those the federation covers poorly.
    Validation, proxy, test, client and reserve samples are disjoint.
    """
    if n_benign < 2:
        raise ValueError(f"need at least 2 benign clients, got {n_benign}")
    if min(per_class, rare_per_class, proxy_per_class) < 1 or n_val < 10:
        raise ValueError("per_class, rare_per_class, proxy_per_class must be >= 1 and n_val >= 10")
    split = digits(seed=seed)
    rng = np.random.default_rng(seed)
    X, y = split.X_train, split.y_train
    order = rng.permutation(len(y))
    X, y = X[order], y[order]
    pools = {c: list(np.flatnonzero(y == c)) for c in range(10)}

    def take(c: int, n: int) -> list[int]:
        if len(pools[c]) < n:
            raise ValueError(f"class {c}: asked for {n} samples, {len(pools[c])} left")
        out, pools[c] = pools[c][:n], pools[c][n:]
        return out

    val_idx = [i for c in range(10) for i in take(c, n_val // 10)]
    proxy_idx = [i for c in range(10) for i in take(c, proxy_per_class)]
    perm = [int(c) for c in rng.permutation(10)]
    ring, rare_c = perm[:6], perm[6:]
    adv_c = ring[:2]
    roles = {c: "adversary" for c in adv_c} | {c: "rare" for c in rare_c} \
        | {c: "common" for c in ring[2:]}
    clients_idx = []
    for j in range(n_benign + 1):
        idx = [i for c in (ring[j % 6], ring[(j + 1) % 6]) for i in take(c, per_class)]
        if 1 <= j <= len(rare_c):
            idx += take(rare_c[j - 1], rare_per_class)
        clients_idx.append(idx)
    reserve_idx = [i for c in range(10) for i in pools[c]]
    sub = lambda idx: (X[np.array(idx, dtype=int)], y[np.array(idx, dtype=int)])  # noqa: E731
    return Federation(clients=[sub(ix) for ix in clients_idx], val=sub(val_idx), proxy=sub(proxy_idx),
                      test=(split.X_test, split.y_test), reserve=sub(reserve_idx), roles=roles)


def real_batch(fed: Federation, labels: np.ndarray, seed: int) -> np.ndarray:
    """Real reserve images with the given ``labels`` (the real-data control), shape (m, 64)."""
    rng = np.random.default_rng(seed + 7919)
    Xr, yr = fed.reserve
    out = []
    for c in np.unique(labels):
        pool = np.flatnonzero(yr == c)
        k = int(np.sum(labels == c))
        if len(pool) < k:
            raise ValueError(f"reserve holds {len(pool)} samples of class {c}, need {k}")
        out.append((c, Xr[rng.choice(pool, size=k, replace=False)]))
    X = np.empty((len(labels), Xr.shape[1]))
    for c, xs in out:
        X[labels == c] = xs
    return X
