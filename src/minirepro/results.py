"""Metrics and claim verdicts, recorded by chapters for runs, the page and the ledger.

A chapter states each claim and the rule that will decide its verdict *before*
the experiment runs (``declare_claim``), then settles it from the measurement
(``Claim.settle``). ``record_claim`` does both at once for a claim whose rule and
measurement sit in one cell. ``claims_table()`` shows them on the page.

When ``MINIREPRO_RESULTS`` names a file (``minirepro run`` sets it), every record
is written there at once as JSON, so a run's ``results.json`` holds
``{"metrics": {...}, "claims": [...]}`` even if a later cell fails.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

VERDICTS: tuple[str, ...] = ("reproduced", "partly", "not reproduced", "not testable at this scale")


@dataclass
class Claim:
    """One claim of the paper, its rule, and (once settled) the measurement and verdict."""

    id: str
    statement: str
    paper_value: str
    rule: str
    setting: str = ""
    measured: str | None = None
    verdict: str | None = None

    def settle(self, measured: Any, verdict: str) -> Claim:
        """Record the measured figure and the verdict the pre-stated rule gives."""
        if verdict not in VERDICTS:
            raise ValueError(f"verdict {verdict!r} is not one of: {', '.join(VERDICTS)}")
        if self.verdict is not None:
            raise RuntimeError(f"claim {self.id!r} is already settled as {self.verdict!r}")
        self.measured = _fmt(measured)
        self.verdict = verdict
        _STATE.save()
        return self


@dataclass
class _State:
    metrics: dict[str, Any] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "claims": [asdict(c) for c in self.claims.values()]}

    def save(self) -> None:
        target = os.environ.get("MINIREPRO_RESULTS")
        if not target:
            return
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".results-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(self.as_json(), fh, indent=2, sort_keys=False, default=_json_default)
        os.replace(tmp, path)


_STATE = _State()


def _json_default(obj: Any) -> Any:
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"cannot record a {type(obj).__name__} as JSON")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def reset() -> None:
    """Forget every metric and claim recorded in this process (tests use it)."""
    _STATE.metrics.clear()
    _STATE.claims.clear()


def record_metric(name: str, value: float | int | str | bool) -> None:
    """Record a named metric of this run (a number, or a short string)."""
    if not name or not isinstance(name, str):
        raise ValueError(f"metric name must be a non-empty string, got {name!r}")
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        value = str(value)
    if not isinstance(value, (int, float, str, bool)):
        raise TypeError(f"metric {name!r} must be a number or a string, got {type(value).__name__}")
    _STATE.metrics[name] = value
    _STATE.save()


def declare_claim(id: str, statement: str, paper_value: str, rule: str, setting: str = "") -> Claim:
    """State a claim and the rule for its verdict, before the experiment runs.

    Args:
        id: short identifier, unique within the chapter (``"zero-violation"``).
        statement: the paper's claim, in one sentence.
        paper_value: the paper's own figure (``"MSE 0.0012 vs 0.0045"``) or ``"-"``.
        rule: how the measurement decides the verdict, e.g. "reproduced if the
            max violation is below 1e-9 on every seed; not reproduced otherwise".
        setting: the miniature's setting (data, sizes, seeds).
    """
    if not id or any(ch.isspace() for ch in id):
        raise ValueError(f"claim id must be a non-empty word, got {id!r}")
    if not rule.strip():
        raise ValueError(f"claim {id!r} needs its verdict rule stated before the run")
    claim = Claim(id=id, statement=statement, paper_value=paper_value, rule=rule, setting=setting)
    _STATE.claims[id] = claim
    _STATE.save()
    return claim


def record_claim(id: str, statement: str, paper_value: str, measured: Any, verdict: str,
                 rule: str, setting: str = "") -> Claim:
    """Declare and settle a claim in one call (``declare_claim`` then ``settle``)."""
    return declare_claim(id, statement, paper_value, rule, setting).settle(measured, verdict)


def decide(reproduced: bool, partly: bool = False, testable: bool = True) -> str:
    """The verdict word for a rule's outcome.

    ``testable=False`` gives "not testable at this scale"; otherwise ``reproduced``
    wins, then ``partly``, else "not reproduced".
    """
    if not testable:
        return VERDICTS[3]
    if reproduced:
        return VERDICTS[0]
    if partly:
        return VERDICTS[1]
    return VERDICTS[2]


def metrics() -> dict[str, Any]:
    """The metrics recorded so far in this process."""
    return dict(_STATE.metrics)


def claims() -> list[Claim]:
    """The claims declared so far in this process, in order."""
    return list(_STATE.claims.values())


def claims_table():
    """The claims as a pandas DataFrame, for display on the page."""
    import pandas as pd

    rows = [{"claim": c.id, "paper": c.paper_value, "measured here": c.measured or "(pending)",
             "verdict": c.verdict or "(pending)", "rule": c.rule} for c in _STATE.claims.values()]
    return pd.DataFrame(rows, columns=["claim", "paper", "measured here", "verdict", "rule"])


def verdict_lines() -> str:
    """One line per claim, ``id: verdict``: the text a golden's checked cell prints."""
    return "\n".join(f"{c.id}: {c.verdict or '(pending)'}" for c in _STATE.claims.values())
