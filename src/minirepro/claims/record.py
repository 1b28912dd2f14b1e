"""The record of a chapter's run: what its kernel declared and measured, kept in this process
and written at once to its ``results.json``.

The state (:class:`Claim` and the metrics, tolerances and seeds of this process), its
persistence, and the one sanitiser that turns what a chapter measured into JSON
(:func:`jsonable`) live here; the declarations a chapter makes are
:mod:`minirepro.claims.results`, and what the page shows of them
:mod:`minirepro.claims.chapter_view`.

When ``MINIREPRO_RESULTS`` names a file (``minirepro run`` and the golden tests set
it), every record is written there at once as JSON, so a run's ``results.json``
holds ``{"metrics": {...}, "tolerances": {...}, "claims": [...]}`` even if a later
cell fails. In a book build (``MINIREPRO_RESULTS_DIR``) a chapter writes
``<dir>/<slug>.json`` instead (:func:`_build_target`).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from minirepro.claims.rules import Rule

KINDS: tuple[str, ...] = ("paper", "check")


@dataclass
class Claim:
    """One claim, its rule, and (once settled) the measurement and verdict.

    Attributes:
        id: short identifier, unique within the chapter.
        statement: the claim in one sentence (the paper's, or the book's for a check).
        paper_value: the paper's own figure, or ``"-"``.
        rule: the rule's sentence (what decides the verdict).
        setting: the miniature's setting (data, sizes, seeds).
        kind: ``"paper"`` (a claim of the paper) or ``"check"`` (a check of the miniature).
        flag: set at declaration when the rule cannot give "reproduced" in this setting.
        machine_dependent: the verdict depends on the machine (timings): it is left out
            of :func:`verdict_lines`, which goldens compare as exact text.
        measured: the measurement, as text (set by ``settle``).
        verdict: one of ``VERDICTS`` (set by ``settle``).
        details: the numbers behind the verdict (interval ends, n, ...).
        unit: what one unit of the claim's data is (``"seed"``, ``"episode"``, ...).
        planned_n: the units the pooled verdict is planned on (this run's seeds times units
            per seed times the runs the chapter's replication plan pools), declared before the run.
        spec: the rule as JSON (:meth:`minirepro.claims.rules.Rule.spec`), so the ledger can
            decide the claim again on the units of every replication.
        data: the rule's data as given to ``settle`` (per-unit lists), recorded for pooling.
        n_units: how many units this run's data holds.
    """

    id: str
    statement: str
    paper_value: str
    rule: str
    setting: str = ""
    kind: str = "paper"
    flag: str | None = None
    machine_dependent: bool = False
    measured: str | None = None
    verdict: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    unit: str = "seed"
    planned_n: int | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] | None = None
    n_units: int | None = None
    _rule: Rule | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:  # short: a stray repr on a page must not be a wall of text
        return f"<claim {self.id}: {self.verdict or 'pending'}>"

    def settle(self, measured: Any = None, verdict: str | None = None, *, note: str = "",
               **data: Any) -> Claim:
        """Decide the verdict by the claim's rule from ``data``, and record it.

        Pass the rule's data as keywords (``method=``, ``baseline=``, ``values=``, ...):
        the rule computes the verdict and the measured text, and ``note`` adds context
        to it. A verdict or measurement given by hand (positionally) is refused: no
        chapter writes its own verdict.
        """
        if self.verdict is not None:
            raise RuntimeError(f"claim {self.id!r} is already settled as {self.verdict!r}")
        if verdict is not None or measured is not None or self._rule is None:
            raise TypeError(f"claim {self.id!r} is settled by its rule object: pass the rule's "
                            "data (e.g. method=..., baseline=...), not a verdict")
        out = self._rule.decide(**data)
        self.verdict, self.details = out.verdict, jsonable(out.details)
        self.measured = out.measured + (f"; {note}" if note else "")
        self.data = jsonable(data)
        self.n_units = self._rule.n_units(**data)
        _STATE.save()
        return self

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("_rule", None)
        return d


@dataclass
class _State:
    metrics: dict[str, Any] = field(default_factory=dict)
    tolerances: dict[str, dict[str, float]] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    seeds: dict[str, list[int]] = field(default_factory=dict)
    chapter: str | None = None
    headline: str | None = None  # the metric the chapter names its headline (record_metric(headline=True))

    def as_json(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "tolerances": self.tolerances, "seeds": self.seeds,
                "claims": [c.as_json() for c in self.claims.values()],
                **({"headline": self.headline} if self.headline else {})}

    def save(self) -> None:
        target = os.environ.get("MINIREPRO_RESULTS")
        data = self.as_json()
        if not target:
            target = _build_target()
            if not target:
                return
            data["seconds"] = round(time.time() - _STARTED, 1)  # since the kernel imported this
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".results-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(jsonable(data), fh, indent=2, sort_keys=False, default=_refuse)
        os.replace(tmp, path)


_STATE = _State()
_STARTED = time.time()


def _build_target() -> str | None:
    """In a book build (``MINIREPRO_RESULTS_DIR`` set by :func:`minirepro.book.build`), a
    chapter's kernel, which runs in its notebook's folder ``notebooks/<slug>/``, writes
    ``<dir>/<slug>.json``: the ledger page of that build reads what the build computed."""
    folder = os.environ.get("MINIREPRO_RESULTS_DIR")
    cwd = Path.cwd()
    if not folder or cwd.parent.name != "notebooks":
        return None
    return str(Path(folder) / f"{cwd.name}.json")


def jsonable(value: Any) -> Any:
    """A value as JSON data, the one sanitiser of every record: mappings key by key (keys as
    text), arrays, tensors and numpy scalars through their ``tolist``, sequences as lists, a
    non-finite float as its text (``"nan"``, ``"inf"``), and an
    :class:`~minirepro.core.stats.Interval` as its fields with ``"__interval__": True``
    (which :mod:`minirepro.claims.pool` turns back into an interval). Other values are
    returned as they are."""
    from minirepro.core.stats import Interval

    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, Interval):
        return {"estimate": value.estimate, "low": value.low, "high": value.high, "level": value.level,
                "n": value.n, "method": value.method, "__interval__": True}
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _refuse(obj: Any) -> Any:
    raise TypeError(f"cannot record a {type(obj).__name__} as JSON")


def reset(chapter: str | None = None) -> None:
    """Forget every metric and claim recorded in this process, and say which chapter records
    next (its name, ``"tasm"``): the page's claims table and power lines read that chapter's
    stored record (pooled verdicts, pilot) from the ledger."""
    _STATE.metrics.clear()
    _STATE.tolerances.clear()
    _STATE.claims.clear()
    _STATE.seeds.clear()
    _STATE.headline = None
    _STATE.chapter = chapter


def chapter() -> str | None:
    """The chapter this process records (given to :func:`reset`), or ``None``."""
    return _STATE.chapter


def metrics() -> dict[str, Any]:
    """The metrics recorded so far in this process."""
    return dict(_STATE.metrics)


def tolerances() -> dict[str, dict[str, float]]:
    """The declared tolerances of the metrics recorded so far."""
    return {k: dict(v) for k, v in _STATE.tolerances.items()}


def claims() -> list[Claim]:
    """The claims declared so far in this process, in order."""
    return list(_STATE.claims.values())
