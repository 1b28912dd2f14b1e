"""Marginal-utility evaluators on a cached utility table ``U[b]`` (``b`` = coalition bitmask)."""

from __future__ import annotations

from math import factorial

import numpy as np

MAX_EXACT = 12


def _check(U: np.ndarray) -> tuple[np.ndarray, int]:
    U = np.asarray(U, dtype=float)
    if U.ndim != 1 or U.size < 2 or U.size & (U.size - 1):
        raise ValueError(f"U must be a 1-D table of length 2**n (one value per coalition), got shape {U.shape}")
    if not np.all(np.isfinite(U)):
        raise ValueError("U holds a non-finite utility")
    return U, U.size.bit_length() - 1


def _marginals(U: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each player k: the coalitions S without k, their sizes and U(S + k) - U(S)."""
    b = np.arange(U.size)
    sizes = np.array([bin(x).count("1") for x in b])
    out = []
    for k in range(n):
        S = b[(b >> k) & 1 == 0]
        out.append((S, sizes[S], U[S | (1 << k)] - U[S]))
    return out


def exact_shapley(U: np.ndarray) -> np.ndarray:
    """Eq. (attribution-attack-eq-shapley), phi_k: the exact Shapley value; U (2**n,) -> (n,).

    Sum over S without k of |S|!(n-|S|-1)!/n! [U(S+k) - U(S)].

    ``U`` has length 2**n; returns shape (n,). Refuses n > 12 (2**n retrainings):
    use :func:`monte_carlo_shapley` instead.
    """
    U = np.asarray(U, dtype=float)
    if U.ndim == 1 and U.size > 2 ** MAX_EXACT:
        n = U.size.bit_length() - 1
        raise ValueError(f"exact Shapley over {n} clients needs 2**{n} = {U.size} coalition trainings; "
                         f"it is limited to {MAX_EXACT} clients: use monte_carlo_shapley "
                         "(permutation sampling) instead")
    U, n = _check(U)
    w = np.array([factorial(s) * factorial(n - s - 1) / factorial(n) for s in range(n)])
    return np.array([np.sum(w[sz] * m) for _, sz, m in _marginals(U, n)])


def banzhaf(U: np.ndarray) -> np.ndarray:
    """Eq. (attribution-attack-eq-shapley), beta_k: the Banzhaf value; U (2**n,) -> (n,).

    The mean of U(S + k) - U(S) over all 2**(n-1) coalitions S without k.
    """
    U, n = _check(U)
    return np.array([m.mean() for _, _, m in _marginals(U, n)])


def leave_one_out(U: np.ndarray) -> np.ndarray:
    """Eq. (attribution-attack-eq-shapley), LOO_k: leave-one-out U(N) - U(N minus k); (n,)."""
    U, n = _check(U)
    full = U.size - 1
    return np.array([U[full] - U[full & ~(1 << k)] for k in range(n)])


def monte_carlo_shapley(U, n: int, permutations: int, seed: int = 0) -> np.ndarray:
    """Eq. (attribution-attack-eq-shapley), phi_k by permutation sampling; (n,).

    Permutation-sampling Shapley (Castro et al. 2009): the mean marginal contribution of
    each player over ``permutations`` random orders. ``U`` is a table of length 2**n or a
    callable taking a bitmask (so n may exceed 12). Shape (n,)."""
    if n < 1 or permutations < 1:
        raise ValueError(f"need n >= 1 and permutations >= 1, got n={n}, permutations={permutations}")
    if callable(U):
        util = U
    else:
        T = _check(U)[0]
        if len(T) != 2 ** n:
            raise ValueError(f"U has {len(T)} entries, expected 2**{n}")
        util = T.__getitem__
    rng = np.random.default_rng(seed)
    phi = np.zeros(n)
    for _ in range(permutations):
        b, prev = 0, util(0)
        for k in rng.permutation(n):
            b |= 1 << int(k)
            cur = util(b)
            phi[k] += cur - prev
            prev = cur
    return phi / permutations


def share(phi: np.ndarray) -> np.ndarray:
    """Eq. (attribution-attack-eq-share): normalised attribution phi_k / sum_j |phi_j|; (n,).

    The notes: normalise before comparing runs.
    """
    phi = np.asarray(phi, dtype=float)
    tot = np.abs(phi).sum()
    if tot == 0:
        raise ValueError("every attribution is zero: no share is defined")
    return phi / tot
