"""A finance best-practice checker, standing in for the paper's expert reviewers.

Each check reads the features of one workbook (any .xlsx) and encodes a common
financial-modelling convention: calculations are live formulas, formulas hold
no typed-in constants (inputs live in cells), inputs are blue and formulas
black, no formula evaluates to an error, and numbers carry formats.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

CHECKS: dict[str, str] = {
    "formulas_used": "at least half of the numeric cells are formulas",
    "no_hardcodes": "no formula contains a typed-in constant other than 0 or 1",
    "blue_inputs": "at least 90% of typed-in numbers are blue",
    "black_formulas": "at least 90% of formulas are black",
    "no_errors": "every formula evaluates, none to an error value",
    "number_formats": "at least 80% of numbers and formulas carry a number format",
}


def finance_checklist(f: dict[str, float]) -> dict[str, bool]:
    """[reconstruction] of the expert review: pass/fail of each check in :data:`CHECKS`.

    ``f`` is a feature dict from ``extract_features``.
    """
    missing = [k for k in ("formula_share", "literal_formula_share", "blue_input_share",
                           "black_formula_share", "n_errors", "eval_complete",
                           "number_format_share", "n_formulas") if k not in f]
    if missing:
        raise ValueError(f"feature dict lacks {missing}; pass the output of extract_features")
    has_f = f["n_formulas"] > 0
    return {
        "formulas_used": f["formula_share"] >= 0.5,
        "no_hardcodes": has_f and f["literal_formula_share"] == 0.0,
        "blue_inputs": f["blue_input_share"] >= 0.9,
        "black_formulas": has_f and f["black_formula_share"] >= 0.9,
        "no_errors": f["n_errors"] == 0 and f["eval_complete"] == 1.0,
        "number_formats": f["number_format_share"] >= 0.8,
    }


def expert_score(f: dict[str, float]) -> float:
    """[reconstruction] expert score of one workbook: share of checks passed, in [0, 1]."""
    c = finance_checklist(f)
    return sum(c.values()) / len(c)


def meets_best_practice(f: dict[str, float]) -> bool:
    """[reconstruction] best practice met: True only if every check passes."""
    return all(finance_checklist(f).values())


def expert_table(features: list[list[dict | None]], generators: list[str], categories: list[str],
                 category: str = "finance") -> pd.DataFrame:
    """[reconstruction] expert review per generator over its ``category`` workbooks.

    Mean score, share meeting all checks, and the pass rate of each check.
    ``features[p][k]`` as in :class:`voters.Pool`.
    """
    rows = []
    for k, g in enumerate(generators):
        fs = [features[p][k] for p, c in enumerate(categories) if c == category and features[p][k]]
        if not fs:
            continue
        checks = pd.DataFrame([finance_checklist(f) for f in fs])
        rows.append({"model": g, "expert_score": float(np.mean([expert_score(f) for f in fs])),
                     "best_practice": float(np.mean([meets_best_practice(f) for f in fs])),
                     **checks.mean().to_dict(), "n": len(fs)})
    return pd.DataFrame(rows)


def pairwise_agreement(winner_scores: np.ndarray, loser_scores: np.ndarray) -> float:
    """[reconstruction] crowd-expert agreement: share of decisive votes the expert also ranks so.

    A vote agrees if the expert scores its winner higher; expert ties are dropped.
    """
    win, lose = np.asarray(winner_scores, float), np.asarray(loser_scores, float)
    if win.shape != lose.shape:
        raise ValueError(f"shapes differ: {win.shape} vs {lose.shape}")
    diff = win - lose
    decided = diff != 0
    return float((diff[decided] > 0).mean()) if decided.any() else float("nan")


def rank_agreement(arena: np.ndarray, expert: np.ndarray) -> float:
    """[reconstruction] arena-expert rank agreement: Kendall's tau-b of two score vectors.

    Both vectors score the same models; ties are allowed.
    """
    arena, expert = np.asarray(arena, float), np.asarray(expert, float)
    if arena.shape != expert.shape or arena.ndim != 1 or len(arena) < 2:
        raise ValueError(f"need two 1-D score vectors of equal length >= 2, got {arena.shape}, {expert.shape}")
    return float(kendalltau(arena, expert).statistic)
