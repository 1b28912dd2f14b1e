"""What every rule shares: the four verdicts, the :class:`Outcome` a rule decides, the
:class:`Rule` base class (sentence, decision, design check, spec, units) and how rules write
numbers and levels in their sentences."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from minirepro.core.stats import sig

VERDICTS: tuple[str, ...] = ("reproduced", "partly", "not reproduced", "not testable at this scale")
REPRODUCED, PARTLY, NOT_REPRODUCED, NOT_TESTABLE = VERDICTS


@dataclass(frozen=True)
class Outcome:
    """What a rule decided: the verdict, the measured text, and the numbers behind it."""

    verdict: str
    measured: str
    details: dict[str, Any] = field(default_factory=dict)


class Rule:
    """Base class: a rule has a sentence, a decision and a design check."""

    def sentence(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def decide(self, **data: Any) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError

    def design_problem(self, n_seeds: int | None) -> str | None:
        """Why this rule cannot reach "reproduced" with ``n_seeds`` seeds, or ``None``."""
        return None

    def spec(self) -> dict[str, Any]:
        """The rule as JSON: ``{"kind": <class name>, <field>: <value>, ...}`` (parts nested)."""
        out: dict[str, Any] = {"kind": type(self).__name__}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, Rule):
                v = v.spec()
            elif isinstance(v, Mapping):
                v = {k: (r.spec() if isinstance(r, Rule) else r) for k, r in v.items()}
            out[f.name] = v
        return out

    def n_units(self, **data: Any) -> int:
        """How many units ``data`` holds for this rule (the length of its per-unit arrays)."""
        for key in ("method", "values", "x"):
            if data.get(key) is not None:
                return int(np.atleast_1d(np.asarray(data[key], dtype=float)).size)
        iv = data.get("interval")
        return int(getattr(iv, "n", 0) or 0)

    def __str__(self) -> str:
        return self.sentence()


def fmt_num(x: float) -> str:
    """A number in a rule's sentence: three significant digits."""
    return sig(x, 3)


def fmt_pct(level: float) -> str:
    """A confidence level in a rule's sentence: ``0.95`` -> ``"95%"``."""
    return f"{round(100 * level)}%"
