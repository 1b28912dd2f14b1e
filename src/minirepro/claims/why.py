"""Why a claim is not reproduced: one cause for every "not reproduced" and "not testable".

The causes (protocol v3, §5):

``scale``
    the effect grows toward the paper's with size, shown by a trend over sizes
    (:mod:`minirepro.claims.trend`).
``substrate``
    the model the chapter stands on lacks the skill the claim needs (with its level).
``protocol``
    the miniature's setting cannot show it (too few units for the rule's power, a
    design that cannot separate the arms), and what setting would.
``reconstruction``
    our reading of an under-specified method, and the alternative.
``disagrees``
    powered, stable, and the trend does not move toward the paper.
``unknown``
    none of the above is shown.

A chapter's causes are written in ``book/claims/why/<slug>.yml``, beside the records and
outside the notebook (a cause is a reading of the evidence, made after the runs; writing
it changes no verdict), one entry per claim::

    merge-beats-prune-spread:
      cause: reconstruction
      evidence: >-
        both TASM arms score below random pruning at 10% kept ({m[spread/0.1/TASM/accuracy]:.3f}
        vs {m[spread/0.1/random/accuracy]:.3f}): ...

``evidence`` is formatted with the recorded run's metrics as ``m`` (and the claim's pooled
record as ``c``), so its numbers come from the runs. Two causes need no entry: a claim
made *not testable* by too little power is ``protocol`` (the n it would need), and one
whose precondition fails is ``substrate`` (the precondition's measurement).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

CAUSES: tuple[str, ...] = ("scale", "substrate", "protocol", "reconstruction", "disagrees", "unknown")
NEEDS_CAUSE = ("not reproduced", "not testable at this scale")


class _Metrics(dict):
    def __missing__(self, key: str) -> Any:
        raise KeyError(f"no recorded metric {key!r}")


def why_path(slug: str, root: Path) -> Path:
    return root / "book" / "claims" / "why" / f"{slug}.yml"


def load_causes(slug: str, root: Path) -> dict[str, dict[str, str]]:
    """The chapter's written causes, checked: each a known cause with some evidence."""
    path = why_path(slug, root)
    if not path.is_file():
        return {}
    table = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for cid, item in table.items():
        if not isinstance(item, Mapping) or item.get("cause") not in CAUSES or not item.get("evidence"):
            raise ValueError(f"{path}: claim {cid!r} needs a cause (one of {', '.join(CAUSES)}) "
                             f"and evidence, got {item!r}")
    return {str(k): {"cause": str(v["cause"]), "evidence": str(v["evidence"])} for k, v in table.items()}


def _tally_text(claim: Mapping[str, Any]) -> str:
    reps, k = claim.get("replications") or {}, claim.get("k") or 0
    return ", ".join(f"{n}/{k} {v}" for v, n in sorted(reps.items(), key=lambda x: (-x[1], x[0])))


def _stable(claim: Mapping[str, Any]) -> bool:
    """At least two replications, decided under the same rule, and not fragile."""
    return (claim.get("k") or 0) >= 2 and not claim.get("fragile")


def _auto(claim: Mapping[str, Any]) -> dict[str, str] | None:
    """The cause that the records themselves establish, or None (protocol v3.1, §5):

    - a precondition not met: ``substrate`` (its measurement);
    - not testable because an inconclusive interval is underpowered: ``protocol`` (the n needed);
    - not testable because the baseline already sits at the best possible value: ``protocol``;
    - a verdict that more than one replication contradicts: ``protocol`` (the draw decides it);
    - a decided interval (it excludes the claim, or shows the effect smaller than claimed), or
      an inconclusive one from a design powered to find the minimum effect, stable over its
      replications: ``disagrees``, with the interval, P(reproduced) at the minimum effect and
      the replications' tally.
    """
    details = claim.get("details") or {}
    measured = str(claim.get("measured") or "")
    verdict = claim.get("verdict")
    p = claim.get("power") or {}
    if details.get("preconditions_met") is False or measured.startswith("precondition not met"):
        return {"cause": "substrate", "evidence": measured.split("; measured:")[0]}
    if verdict == "not testable at this scale" and "underpowered" in measured:
        need = p.get("needed_n")
        rng = p.get("needed_range")
        span = (f" (90% range {rng[0] or '?'}–{rng[1] or '> 5000'} from the pilot's spread)"
                if rng else "")
        return {"cause": "protocol", "evidence": (
            f"the interval is inconclusive and the rule's P(reproduced) at the minimum effect is "
            f"{p.get('value', 0):.2f} at the {claim.get('n_units')} units run"
            + (f"; about {need} units would give 0.8{span}" if need else "; no n up to 5000 gives 0.8")
            + " (the miniature cannot decide it at this size)")}
    if verdict == "not testable at this scale" and "best possible value" in measured:
        return {"cause": "protocol", "evidence": (
            "the baseline already sits within the minimum effect of the best value any method "
            f"could reach ({measured}); the miniature leaves no room to show an improvement")}
    if claim.get("fragile"):
        return {"cause": "protocol", "evidence": (
            f"the pooled verdict rests on {claim.get('n_units')} units, but the replications decided "
            f"under the same rule disagree ({_tally_text(claim)}): which way it goes depends on "
            "the draw at this size")}
    pw = p.get("value")
    powered = pw is not None and pw >= 0.8
    if verdict == "not reproduced" and (claim.get("decided") or powered) and _stable(claim):
        return {"cause": "disagrees", "evidence": (
            f"decided on {claim.get('n_units')} units: {measured}"
            + (f"; P(reproduced) at the minimum effect {pw:.2f}" if pw is not None else "")
            + f"; the replications, decided under the same rule: {_tally_text(claim)}")}
    return None


def cause_of(claim: Mapping[str, Any], written: Mapping[str, Mapping[str, str]],
             metrics: Mapping[str, Any]) -> dict[str, str] | None:
    """The claim's cause (``{"cause", "evidence"}``) when its verdict needs one, else ``None``.

    A written cause wins; else the automatic ones (:func:`_auto`); else ``unknown``.
    """
    if claim.get("kind", "paper") != "paper" or claim.get("verdict") not in NEEDS_CAUSE:
        return None
    item = written.get(claim["id"])
    if item is not None:
        try:
            evidence = item["evidence"].format(m=_Metrics(metrics), c=claim)
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            evidence = f"{item['evidence']} [evidence could not be filled in: {exc}]"
        return {"cause": item["cause"], "evidence": " ".join(evidence.split())}
    return _auto(claim) or {"cause": "unknown", "evidence": "no cause has been established yet"}


__all__ = ["CAUSES", "NEEDS_CAUSE", "cause_of", "load_causes", "why_path"]
