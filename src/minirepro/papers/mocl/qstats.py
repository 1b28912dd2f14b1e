"""Tsallis statistics: the q-exponential, the q-logarithm, Tsallis entropy, Hill numbers.

These are the scalar building blocks of MoCL's metabolic gate (a reconstruction;
see the chapter). Everything works on NumPy arrays of float64.

Identities the tests check:

* ``exp_q(ln_q(x)) == x`` for ``x > 0``;
* ``exp_q(a) * exp_q(b) == exp_q(a + b + (1 - q) a b)`` (the q-product law);
* ``exp_q -> exp`` and ``S_q -> Shannon entropy`` as ``q -> 1``;
* ``exp_2(-x) == 1 / (1 + x)`` and ``exp_0(x) == max(0, 1 + x)``;
* the effective rank ``exp_q(S_q(p))`` is the Hill number ``(sum p_i^q)^(1/(1-q))``,
  equals ``n`` for a uniform ``p`` over ``n`` entries, and is multiplicative over
  Kronecker products of distributions.
"""

from __future__ import annotations

import numpy as np

# Numerics. Every closed form below divides by ``1 - q``; written naively (``x**(1-q) - 1``,
# ``1 - sum p**q``, ``base**(1/(1-q))``) it subtracts two numbers that agree to ~|1 - q| and so
# multiplies rounding by ~1/|1 - q| near the Shannon limit (relative errors of 1e-7 at
# |1 - q| ~ 1e-9). The forms used instead keep the difference inside ``expm1``/``log1p``:
#
#   ln_q x      = expm1((1-q) ln x) / (1-q)
#   e_q(x)      = exp(log1p((1-q) x) / (1-q))                  on the support 1 + (1-q) x > 0
#   S_q(p)      = sum_i p_i ln_q(1/p_i) = sum_i p_i expm1(-(1-q) ln p_i) / (1-q)
#   ln r_q(p)   = log1p((1-q) S_q(p)) / (1-q)                   (since sum p^q = 1 + (1-q) S_q)
#
# Each is accurate to a few ulps for every q, and at q = 1 exactly (the only float whose
# |1 - q| is below 1.1e-16) they are replaced by their limits ln x, e^x, -sum p ln p, H(p).
# No threshold around q = 1 is needed.


def _check_q(q: float) -> float:
    q = float(q)
    if not np.isfinite(q):
        raise ValueError(f"the entropic index q must be a finite number, got {q}")
    return q


def exp_q(x: np.ndarray | float, q: float) -> np.ndarray:
    r"""Eqs. (mocl-eq-gate, mocl-eq-tsallis): the q-exponential, elementwise.

    :math:`e_q(x) = [1 + (1-q)x]_+^{1/(1-q)}`, and :math:`e^x` at ``q = 1``.

    For ``q < 1`` it has compact support (exactly zero once ``x <= -1/(1-q)``);
    for ``q > 1`` it decays like a power law, ``|x|^{-1/(q-1)}``, and is ``+inf``
    at and beyond ``x = 1/(q-1)``.

    Args:
        x: any shape, float.
        q: the entropic index.

    Returns:
        An array of the shape of ``x``.
    """
    q = _check_q(q)
    x = np.asarray(x, dtype=np.float64)
    a = 1.0 - q
    if a == 0.0:
        return np.exp(x)
    y = a * x  # the support is 1 + y > 0
    inside = y > -1.0
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        out = np.exp(np.log1p(np.where(inside, y, 0.0)) / a)
    return np.where(inside, out, 0.0 if a > 0.0 else np.inf)


def ln_q(x: np.ndarray | float, q: float) -> np.ndarray:
    r"""Eq. (mocl-eq-tsallis): the q-logarithm, inverse of :math:`e_q`; :math:`S_q = \sum p \ln_q(1/p)`.

    :math:`\ln_q x = (x^{1-q} - 1)/(1-q)` for ``x > 0`` (``ln`` at ``q = 1``).

    Raises:
        ValueError: some ``x <= 0``.
    """
    q = _check_q(q)
    x = np.asarray(x, dtype=np.float64)
    if np.any(x <= 0.0):
        raise ValueError("ln_q is defined for positive arguments only")
    a = 1.0 - q
    if a == 0.0:
        return np.log(x)
    with np.errstate(over="ignore"):
        return np.expm1(a * np.log(x)) / a


def _as_distribution(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64).ravel()
    if p.size == 0:
        raise ValueError("a distribution needs at least one entry, got an empty array")
    if not np.all(np.isfinite(p)) or np.any(p < 0.0):
        raise ValueError("a distribution's entries must be finite and non-negative")
    total = p.sum()
    if not np.isclose(total, 1.0, rtol=0.0, atol=1e-6):
        raise ValueError(f"a distribution must sum to 1, got sum {total:.6g}; "
                         "normalise it first (see normalise_spectrum)")
    # within tolerance: renormalise, so that the 1e-6 slack is not amplified by 1/|1 - q|
    return p / total


def _q_terms(p: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    """The support's ``p_i`` and ``p_i ln_q(1/p_i)``, each term accurate to a few ulps for every q.

    The terms are all non-negative (``ln_q`` is increasing and ``ln_q(1) = 0``), so their sum,
    ``S_q``, has no cancellation.
    """
    nz = p[p > 0.0]
    lp = np.log(nz)
    a = 1.0 - q
    if a == 0.0:
        return nz, -nz * lp
    z = -a * lp  # ln(p^(q-1)); expm1 overflows only for q < 1 and z > ~709
    with np.errstate(over="ignore", invalid="ignore"):
        near = nz * np.expm1(np.minimum(z, 1.0)) / a
        # far from q = 1: p^q - p has no cancellation once p^(1-q) >= e (factor <= 1.6)
        far = (np.exp(q * lp) - nz) / a
    return nz, np.where(z <= 1.0, near, far)


def normalise_spectrum(lam: np.ndarray) -> np.ndarray:
    """Eq. (mocl-eq-tsallis): ``p = lambda / sum(lambda)``, a spectrum (any shape) as a distribution.

    Raises:
        ValueError: negative or non-finite entries, or an all-zero spectrum.
    """
    lam = np.asarray(lam, dtype=np.float64).ravel()
    if lam.size == 0 or not np.all(np.isfinite(lam)) or np.any(lam < 0.0):
        raise ValueError("a spectrum must be a non-empty array of finite, non-negative values")
    total = lam.sum()
    if total <= 0.0:
        raise ValueError("an all-zero spectrum cannot be normalised")
    return lam / total


def tsallis_entropy(p: np.ndarray, q: float) -> float:
    r"""Eq. (mocl-eq-tsallis): Tsallis entropy :math:`S_q(p) = (1 - \sum_i p_i^q)/(q - 1)`.

    Shannon's :math:`-\sum p \ln p` at ``q = 1``.

    Args:
        p: a probability vector (non-negative, sums to 1), any shape (flattened).
        q: the entropic index (``q > 0`` keeps it concave).
    """
    q = _check_q(q)
    _, terms = _q_terms(_as_distribution(p), q)
    return float(terms.sum())


def shannon_entropy(p: np.ndarray) -> float:
    """Eq. (mocl-eq-tsallis) at ``q = 1``: Shannon entropy in nats (see :func:`tsallis_entropy`)."""
    return tsallis_entropy(p, 1.0)


def effective_rank(p: np.ndarray, q: float) -> float:
    r"""Eq. (mocl-eq-tsallis): the effective number of directions ``r_q`` of a distribution ``p``.

    :math:`r_q = e_q(S_q(p)) = (\sum_i p_i^q)^{1/(1-q)}`. It is ``n`` for a uniform ``p``
    over ``n`` entries, lies in ``[1, #nonzero]``, and at ``q = 1`` it is :math:`e^{H(p)}`, the entropy effective rank. Because
    :math:`\sum (p \otimes p')^q = (\sum p^q)(\sum p'^q)`, it is multiplicative over
    Kronecker products, so a Kronecker-factored spectrum's rank is the product of
    its factors' ranks (no need to form the product).
    """
    q = _check_q(q)
    if q <= 0.0:
        raise ValueError(f"effective_rank needs q > 0, got q={q}")
    nz, terms = _q_terms(_as_distribution(p), q)
    s_q = terms.sum()
    a = 1.0 - q
    if a == 0.0:
        return float(np.exp(s_q))
    y = a * s_q  # = sum p^q - 1, accurate relative to itself
    if abs(y) <= 0.5:
        log_r = np.log1p(y) / a
    else:  # sum p^q is far from 1: take its log directly (log-sum-exp, no cancellation)
        lq = q * np.log(nz)
        m = lq.max()
        log_r = (m + np.log(np.exp(lq - m).sum())) / a
    return float(np.exp(log_r))


def hill_tail_index(values: np.ndarray, frac: float = 0.05) -> float:
    r"""[reconstruction] Hill's (1975) estimator of a power-law tail index from the top ``frac`` of ``values``.

    With the values sorted in decreasing order and ``k = ceil(frac n)``,
    :math:`\hat\alpha = \big[\frac{1}{k}\sum_{i=1}^{k} \ln(x_{(i)} / x_{(k+1)})\big]^{-1}`,
    the index of a tail :math:`P(X > x) \propto x^{-\alpha}`: the smaller, the heavier
    (below 2 the variance is infinite). Only positive values count.
    """
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())[::-1]
    x = x[x > 0]
    if not 0 < frac < 1:
        raise ValueError(f"frac must be in (0, 1), got {frac}")
    k = int(np.ceil(frac * x.size))
    if k < 2 or k >= x.size:
        raise ValueError(f"need at least {int(np.ceil(2 / frac)) + 1} positive values for frac={frac}, "
                         f"got {x.size}")
    return float(1.0 / np.mean(np.log(x[:k] / x[k])))
