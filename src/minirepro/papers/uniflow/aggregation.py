"""The server-side LoRA aggregation rules, as plain NumPy on one LoRA module.

Notation (per LoRA module): client ``i`` holds ``A_i`` of shape ``(r, d_in)`` and ``B_i``
of shape ``(d_out, r)``; peft applies the update ``s * B_i @ A_i`` with ``s = lora_alpha / r``.
Client weights ``p_i`` are non-negative and sum to one (data sizes, normalised).

* :func:`target_update`: the exact average update ``dW* = s * sum_i p_i B_i A_i``.
* :func:`fedit`: FedAvg of ``A`` and ``B`` separately.
* :func:`feda2_b`: FedA2-LoRA's ridge solve for ``B+`` given the averaged ``A+``.
* :func:`fedex_residual`: the residual FedEx-LoRA adds to the frozen weight.
* :func:`flora_stack`: FLoRA's stacked factors, whose product is ``dW*`` exactly.
* :func:`relative_error`: ``||dW_agg - dW*||_F / ||dW*||_F``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _weights(p: Sequence[float], n: int) -> np.ndarray:
    w = np.asarray(p, dtype=np.float64).ravel()
    if w.size != n:
        raise ValueError(f"need one weight per client: {n} clients, {w.size} weights")
    if n == 0:
        raise ValueError("no client results to aggregate")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"client weights must be finite, >= 0 and not all zero, got {w}")
    return w / w.sum()


def check_factors(As: Sequence[np.ndarray], Bs: Sequence[np.ndarray]) -> int:
    """[reconstruction] Check one module's client factors and return the common rank ``r``.

    Raises ``ValueError`` when a client's ``A`` is not ``(r, d_in)``, its ``B`` not
    ``(d_out, r)``, the ranks or shapes differ between clients, or a value is not finite.
    """
    if len(As) != len(Bs) or not As:
        raise ValueError(f"need one A and one B per client, got {len(As)} A's and {len(Bs)} B's")
    ranks = {a.shape[0] for a in As} | {b.shape[1] for b in Bs}
    if any(a.ndim != 2 for a in As) or any(b.ndim != 2 for b in Bs):
        raise ValueError("every A and B must be a 2-D matrix")
    if len(ranks) != 1:
        raise ValueError(f"LoRA ranks differ between clients (A rows / B columns: {sorted(ranks)}); "
                         "these aggregators need one common rank r")
    if len({a.shape for a in As}) != 1 or len({b.shape for b in Bs}) != 1:
        raise ValueError(f"client factor shapes differ: A {sorted({a.shape for a in As})}, "
                         f"B {sorted({b.shape for b in Bs})}")
    if not all(np.all(np.isfinite(m)) for m in (*As, *Bs)):
        raise ValueError("a client's LoRA factors contain NaN or inf")
    return ranks.pop()


def target_update(As: Sequence[np.ndarray], Bs: Sequence[np.ndarray], p: Sequence[float],
                  scaling: float) -> np.ndarray:
    """Eq. (uniflow-eq-target): ``dW* = s * sum_i p_i B_i A_i``, shape ``(d_out, d_in)``."""
    check_factors(As, Bs)
    w = _weights(p, len(As))
    return scaling * sum(wi * (b.astype(np.float64) @ a.astype(np.float64))
                         for wi, a, b in zip(w, As, Bs, strict=True))


def fedavg(arrays: Sequence[np.ndarray], p: Sequence[float]) -> np.ndarray:
    """Eq. (uniflow-eq-fedit): the weighted average ``sum_i p_i X_i`` (FedAvg), float64."""
    if not arrays:
        raise ValueError("no client arrays to average")
    if len({a.shape for a in arrays}) != 1:
        raise ValueError(f"arrays to average differ in shape: {sorted({a.shape for a in arrays})}")
    w = _weights(p, len(arrays))
    return sum(wi * a.astype(np.float64) for wi, a in zip(w, arrays, strict=True))


def fedit(As: Sequence[np.ndarray], Bs: Sequence[np.ndarray], p: Sequence[float]
          ) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (uniflow-eq-fedit): FedIT's ``A+ = sum p_i A_i`` and ``B+ = sum p_i B_i``."""
    check_factors(As, Bs)
    return fedavg(As, p), fedavg(Bs, p)


def ridge_lambda(A_plus: np.ndarray, lam_rel: float) -> float:
    """[reconstruction] The absolute ridge weight ``lam = lam_rel * trace(A+ A+^T) / r``.

    The paper's Eq. 11 ``lam`` is not scale-free; scaling it by the mean eigenvalue of ``A+ A+^T``
    makes a relative ``lam_rel`` mean the same for any initialisation scale of ``A``.
    """
    if not (np.isfinite(lam_rel) and lam_rel >= 0):
        raise ValueError(f"the ridge weight lambda must be a finite number >= 0, got {lam_rel}")
    r = A_plus.shape[0]
    return float(lam_rel * np.trace(A_plus @ A_plus.T) / r)


def feda2_b(target: np.ndarray, A_plus: np.ndarray, scaling: float, lam: float) -> np.ndarray:
    """Eq. (uniflow-eq-feda2): ``B+ = (1/s) dW* A+^T (A+ A+^T + lam I_r)^-1``, shape ``(d_out, r)``.

    ``target`` is ``dW*`` (already scaled by ``s = alpha / r``), so that peft's update
    ``s * B+ A+`` is the ridge fit of ``dW*`` in the row space of ``A+``. ``lam`` is the
    absolute ridge weight (see :func:`ridge_lambda`); ``lam = 0`` needs ``A+`` of full row rank.
    """
    if not (np.isfinite(lam) and lam >= 0):
        raise ValueError(f"the ridge weight lambda must be a finite number >= 0, got {lam}")
    if scaling <= 0 or not np.isfinite(scaling):
        raise ValueError(f"the LoRA scaling alpha/r must be positive, got {scaling}")
    r, d_in = A_plus.shape
    if target.shape[1] != d_in:
        raise ValueError(f"dW* has {target.shape[1]} input columns but A+ has {d_in}")
    gram = A_plus @ A_plus.T + lam * np.eye(r)
    # Solve gram^T X^T = (dW* A+^T)^T instead of inverting (gram is symmetric).
    rhs = target @ A_plus.T
    try:
        sol = np.linalg.solve(gram, rhs.T).T
    except np.linalg.LinAlgError as err:
        raise ValueError("A+ A+^T + lam I is singular: use lam > 0 (A+ has dependent rows)") from err
    return sol / scaling


def fedex_residual(As: Sequence[np.ndarray], Bs: Sequence[np.ndarray], p: Sequence[float],
                   scaling: float) -> np.ndarray:
    """Eq. (uniflow-eq-fedex): FedEx-LoRA's residual ``dW* - s B+ A+`` (FedIT averages), ``(d_out, d_in)``."""
    A_plus, B_plus = fedit(As, Bs, p)
    return target_update(As, Bs, p, scaling) - scaling * B_plus @ A_plus


def flora_stack(As: Sequence[np.ndarray], Bs: Sequence[np.ndarray], p: Sequence[float]
                ) -> tuple[np.ndarray, np.ndarray]:
    """Eq. (uniflow-eq-flora): FLoRA's stacked ``A_s = [A_1; ...; A_K]`` ``(K r, d_in)`` and
    ``B_s = [p_1 B_1, ..., p_K B_K]`` ``(d_out, K r)``, so ``s B_s A_s = dW*`` exactly."""
    check_factors(As, Bs)
    w = _weights(p, len(As))
    A_s = np.concatenate([a.astype(np.float64) for a in As], axis=0)
    B_s = np.concatenate([wi * b.astype(np.float64) for wi, b in zip(w, Bs, strict=True)], axis=1)
    return A_s, B_s


def relative_error(update: np.ndarray, target: np.ndarray) -> float:
    """Eq. (uniflow-eq-error): ``||dW_agg - dW*||_F / ||dW*||_F`` (0 when both are zero)."""
    if update.shape != target.shape:
        raise ValueError(f"update {update.shape} and target {target.shape} differ in shape")
    den = float(np.linalg.norm(target))
    num = float(np.linalg.norm(update - target))
    return 0.0 if den == 0.0 and num == 0.0 else num / max(den, 1e-300)


def a_drift(As: Sequence[np.ndarray], p: Sequence[float]) -> float:
    """[reconstruction] Spread of the clients' ``A``: ``sum_i p_i ||A_i - A+||_F / ||A+||_F``."""
    A_plus = fedavg(As, p)
    w = _weights(p, len(As))
    den = max(float(np.linalg.norm(A_plus)), 1e-300)
    return float(sum(wi * np.linalg.norm(a - A_plus) for wi, a in zip(w, As, strict=True)) / den)


__all__ = ["a_drift", "check_factors", "fedavg", "feda2_b", "fedex_residual", "fedit",
           "flora_stack", "relative_error", "ridge_lambda", "target_update"]
