"""Ranking and validation: HCA's combination of the three evidence sources.

For each candidate cause (hypothesis) ``c`` of a move, the score is [recon]

$$ s(c) = w_{KG}\\,\\mathrm{KG}(c) + w_{KKT}\\,\\tilde\\lambda_c\\,[E_c > \\tau_{KKT}]
        + w_{PC}\\,(1 - p_{PCMCI}(X_c \\to u_{j^*})) $$

with ``KG(c)`` in {0, 1} (an active cause with a sign-consistent path to the
moved input), ``E_c`` the KKT cost of the cause and ``lambda~_c = E_c / sum E``
its share. Hypotheses are ranked by ``s``; *validation* walks down the ranking
and accepts the first hypothesis that is active and whose knowledge-graph path
is sign-consistent with the observed move (the top one if none is). Ablations set a weight to 0
(without the KG there is no validation either).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class HCAParams:
    """Eq. (hca-eq-score): weights ``w``, ``tau_KKT`` and ``gamma``; cross-domain unless calibrated."""

    w_kg: float = 1.0
    w_kkt: float = 1.0
    w_pcmci: float = 1.0
    tau_kkt: float = 0.1  # cost units of the MPC objective
    gamma: float = 0.9  # horizon discount of multipliers (used when the evidence is built)

    def without(self, source: str) -> HCAParams:
        """The ablation without ``source`` in {"KG", "KKT", "PCMCI"}."""
        key = {"KG": "w_kg", "KKT": "w_kkt", "PCMCI": "w_pcmci"}
        if source not in key:
            raise ValueError(f"unknown evidence source {source!r}; expected one of {list(key)}")
        return replace(self, **{key[source]: 0.0})


@dataclass
class Evidence:
    """Eq. (hca-eq-score): the evidence about one move, per cause (all arrays ``(n_causes,)``)."""

    kg_support: np.ndarray
    kg_consistent: np.ndarray
    kkt: np.ndarray
    pcmci: np.ndarray


def kkt_term(kkt: np.ndarray, tau: float) -> np.ndarray:
    """Eq. (hca-eq-score): ``lambda~_c [E_c > tau]``, each cause's share of the KKT cost."""
    kkt = np.asarray(kkt, float)
    if np.any(kkt < 0) or not np.all(np.isfinite(kkt)):
        raise ValueError("KKT evidence must be finite and non-negative")
    total = kkt.sum()
    if total <= 0:
        return np.zeros_like(kkt)
    return np.where(kkt > tau, kkt / total, 0.0)


def score_hypotheses(ev: Evidence, params: HCAParams) -> np.ndarray:
    """Eq. (hca-eq-score): the score ``s(c)`` of every hypothesis, ``(n_causes,)``."""
    n = len(ev.kkt)
    for name in ("kg_support", "kg_consistent", "pcmci"):
        if len(getattr(ev, name)) != n:
            raise ValueError(f"Evidence.{name} has {len(getattr(ev, name))} entries, expected {n}")
    return (params.w_kg * np.asarray(ev.kg_support, float)
            + params.w_kkt * kkt_term(ev.kkt, params.tau_kkt)
            + params.w_pcmci * np.asarray(ev.pcmci, float))


def rank_and_validate(ev: Evidence, params: HCAParams) -> int:
    """Eq. (hca-eq-score), ranked and validated: the best-ranked hypothesis that passes validation.

    Ranking is by score (ties: lower index first); validation needs an active
    cause with a sign-consistent knowledge-graph path (``kg_support``), and is
    skipped when ``w_kg == 0``.
    """
    s = score_hypotheses(ev, params)
    order = np.argsort(-s, kind="stable")
    if params.w_kg > 0:
        for c in order:
            if ev.kg_support[c] > 0:
                return int(c)
    return int(order[0])


def explain_all(evidence: Sequence[Evidence], params: HCAParams) -> np.ndarray:
    """Eq. (hca-eq-score): :func:`rank_and_validate` for a list of moves; ``(n_moves,)`` causes."""
    return np.array([rank_and_validate(ev, params) for ev in evidence], dtype=int)


TAU_GRID: tuple[float, ...] = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


def calibrate_tau(evidence: Sequence[Evidence], labels: Sequence[int], params: HCAParams,
                  grid: Sequence[float] = TAU_GRID) -> float:
    """Eq. (hca-eq-score): ``tau_KKT`` from ``grid`` with the best accuracy on labelled moves.

    Ties go to the value closest (in log scale) to the cross-domain ``params.tau_kkt``,
    so an uninformative calibration set leaves the parameter where it was.
    """
    if len(evidence) == 0 or len(evidence) != len(labels):
        raise ValueError(f"calibration needs as many labels as moves (>0), got "
                         f"{len(evidence)} moves and {len(labels)} labels")
    labels = np.asarray(labels)
    best, best_key = None, None
    for tau in grid:
        acc = float(np.mean(explain_all(evidence, replace(params, tau_kkt=tau)) == labels))
        dist = abs(np.log10(tau + 1e-4) - np.log10(params.tau_kkt + 1e-4))
        key = (-acc, dist)
        if best_key is None or key < best_key:
            best, best_key = tau, key
    return float(best)
