"""Metrics and claim verdicts, recorded by chapters for runs, the page and the ledger.

A chapter states each claim with a rule object (:mod:`minirepro.claims.rules`: ``Better``,
``Equivalent``, ``Threshold``, ``AllOf``) *before* the experiment runs
(``declare_claim``), then settles it with the data (``claim.settle(method=...,
baseline=...)``): the rule writes its sentence on the page and decides the verdict,
so the threshold lives in one place. ``kind="check"`` marks a claim the book adds
(a cost, a pipeline check) as a *check of the miniature*, kept apart from the
paper's claims in the ledger. ``claims_table()`` shows them on the page.

Metrics carry the tolerance within which a re-run must reproduce them
(``record_metric(name, value, rtol=..., atol=...)``): the golden check compares a
fresh smoke run with the stored one within these, so a number that training
computes may differ in its last digits between processors without failing.

When ``MINIREPRO_RESULTS`` names a file (``minirepro run`` and the golden tests set
it), every record is written there at once as JSON, so a run's ``results.json``
holds ``{"metrics": {...}, "tolerances": {...}, "claims": [...]}`` even if a later
cell fails.
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

from minirepro.claims.rules import Given, Rule

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
        self.verdict, self.details = out.verdict, _jsonable(out.details)
        self.measured = out.measured + (f"; {note}" if note else "")
        self.data = data_json(data)
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
            json.dump(data, fh, indent=2, sort_keys=False, default=_json_default)
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


def data_json(data: Any) -> Any:
    """A rule's data as JSON: arrays and sequences as lists of floats, mappings recursively,
    an :class:`~minirepro.core.stats.Interval` as ``{"interval": {...}}`` fields."""
    from minirepro.core.stats import Interval

    if isinstance(data, dict):
        return {str(k): data_json(v) for k, v in data.items()}
    if isinstance(data, Interval):
        return {"estimate": data.estimate, "low": data.low, "high": data.high, "level": data.level,
                "n": data.n, "method": data.method, "__interval__": True}
    if hasattr(data, "tolist"):
        data = data.tolist()
    if isinstance(data, (list, tuple)):
        return [data_json(v) for v in data]
    if isinstance(data, float) and not math.isfinite(data):
        return str(data)
    return data


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out[k] = _jsonable(v)
        elif hasattr(v, "item"):
            out[k] = v.item()
        elif isinstance(v, float) and not math.isfinite(v):
            out[k] = str(v)
        else:
            out[k] = v
    return out


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


def declare_seeds(reported: Any, tuning: Any = ()) -> None:
    """State the seeds whose results the chapter reports and those it tuned on.

    The two must be disjoint: a verdict is never settled on a seed that chose a knob.
    The ledger records both, and a test checks every chapter's entry.

    Raises:
        ValueError: no reported seed, a negative or repeated seed, or a seed in both sets.
    """
    from minirepro.core.seed import check_seed

    rep = [check_seed(s, "a reported seed") for s in reported]
    tun = [check_seed(s, "a tuning seed") for s in tuning]
    if not rep:
        raise ValueError("declare_seeds needs at least one reported seed")
    for label, seq in (("reported", rep), ("tuning", tun)):
        if len(set(seq)) != len(seq):
            raise ValueError(f"{label} seeds must be distinct non-negative integers, got {seq}")
    both = sorted(set(rep) & set(tun))
    if both:
        raise ValueError(f"seeds {both} are both tuning and reported seeds: report on seeds "
                         "disjoint from those a knob was chosen on")
    _STATE.seeds = {"reported": rep, "tuning": tun}
    _STATE.save()


def record_metric(name: str, value: float | int | str | bool, *, rtol: float | None = None,
                  atol: float | None = None, headline: bool = False) -> None:
    """Record a named metric of this run, and the tolerance a re-run must meet.

    Args:
        name: a non-empty name, unique within the chapter.
        value: a number or a short string.
        rtol, atol: the golden check accepts a re-run's value ``v`` when
            ``|v - value| <= atol + rtol * |value|``. Declare them for every number that
            training computes (it differs in its last digits between processors).
            Without them a float must agree to ``rtol=1e-6``, and an int, string or bool exactly.
        headline: this number is the chapter's headline metric (the method's own result in
            its main comparison, not a baseline's): ``minirepro run`` and ``sweep`` summarise
            it and ``sweep.png`` plots it. One per chapter; a second one is refused.
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"metric name must be a non-empty string, got {name!r}")
    if headline and _STATE.headline not in (None, name):
        raise ValueError(f"metric {name!r}: the headline metric is already {_STATE.headline!r} "
                         "(one headline per chapter)")
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        value = str(value)
    if not isinstance(value, (int, float, str, bool)):
        raise TypeError(f"metric {name!r} must be a number or a string, got {type(value).__name__}")
    for label, tol in (("rtol", rtol), ("atol", atol)):
        if tol is not None and not (tol >= 0 and math.isfinite(tol)):
            raise ValueError(f"metric {name!r}: {label} must be a finite number >= 0, got {tol}")
    _STATE.metrics[name] = value
    if headline:
        _STATE.headline = name
    if rtol is not None or atol is not None:
        _STATE.tolerances[name] = {"rtol": float(rtol or 0.0), "atol": float(atol or 0.0)}
    else:
        _STATE.tolerances.pop(name, None)
    _STATE.save()


def declare_claim(id: str, statement: str, paper_value: str, rule: Rule, setting: str = "",
                  *, kind: str = "paper", n_seeds: int | None = None,
                  machine_dependent: bool = False, flag: str | None = None,
                  unit: str = "seed", units_per_seed: int = 1,
                  preconditions: dict[str, Rule] | None = None) -> Claim:
    """State a claim and the rule for its verdict, before the experiment runs.

    Args:
        id: short identifier, unique within the chapter (``"zero-violation"``).
        statement: the claim, in one sentence.
        paper_value: the paper's own figure (``"MSE 0.0012 vs 0.0045"``) or ``"-"``.
        rule: a rule object from :mod:`minirepro.claims.rules` (``Better``, ``Equivalent``,
            ``Threshold``, ``AllOf``), which writes its sentence and decides the verdict.
        setting: the miniature's setting (data, sizes, seeds).
        kind: ``"paper"`` for the paper's claim, ``"check"`` for a check of the
            miniature that the book adds (costs, pipeline sanity).
        n_seeds: the number of seeds the claim will be settled on; a rule that cannot
            give "reproduced" with that many is flagged (``claim.flag``) here, before the run.
        machine_dependent: the verdict depends on the machine (e.g. a timing), so it is
            left out of :func:`verdict_lines`.
        flag: why the rule cannot give "reproduced" in this setting, when the chapter knows
            it beforehand (e.g. every method already sits at the optimum); joined with
            any problem the rule itself finds.
        unit: what one unit of the data is (``"seed"``; ``"episode"``, ``"scene"``, ...).
        units_per_seed: units each seed contributes (e.g. one per depth): with ``n_seeds``
            and the chapter's replication plan it gives the planned n of the pooled verdict.
        preconditions: rules the miniature must pass for the claim to be testable at all
            (``{"raw RM above chance": Threshold(...)}``); the claim is then settled with
            ``preconditions={name: data}`` beside the rule's data (see :class:`~minirepro.claims.rules.Given`).
    """
    if not id or any(ch.isspace() for ch in id):
        raise ValueError(f"claim id must be a non-empty word, got {id!r}")
    if kind not in KINDS:
        raise ValueError(f"claim kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(rule, Rule):
        raise TypeError(f"claim {id!r} needs a rule object from minirepro.claims.rules (Better, Equivalent, "
                        f"Threshold, AllOf) stated before the run, got {type(rule).__name__}")
    if preconditions:
        rule = Given(rule, dict(preconditions))
    if not isinstance(units_per_seed, int) or units_per_seed < 1:
        raise ValueError(f"units_per_seed must be an int >= 1, got {units_per_seed!r}")
    sentence, obj = rule.sentence(), rule
    flag = "; ".join(f for f in (flag, rule.design_problem(n_seeds)) if f) or None
    planned = None
    if n_seeds is not None:
        from minirepro.claims.plan import planned_runs

        planned = int(n_seeds) * units_per_seed * planned_runs(_STATE.chapter)
    claim = Claim(id=id, statement=statement, paper_value=paper_value, rule=sentence,
                  setting=setting, kind=kind, flag=flag, machine_dependent=machine_dependent,
                  unit=unit, planned_n=planned, spec=rule.spec(), _rule=obj)
    _STATE.claims[id] = claim
    _STATE.save()
    return claim


def metrics() -> dict[str, Any]:
    """The metrics recorded so far in this process."""
    return dict(_STATE.metrics)


def tolerances() -> dict[str, dict[str, float]]:
    """The declared tolerances of the metrics recorded so far."""
    return {k: dict(v) for k, v in _STATE.tolerances.items()}


def claims() -> list[Claim]:
    """The claims declared so far in this process, in order."""
    return list(_STATE.claims.values())


def stored_entry() -> dict[str, Any] | None:
    """The ledger's stored entry of the chapter this process records (see :func:`reset`),
    when it is current (made from this notebook's code); else ``None``."""
    if not _STATE.chapter:
        return None
    try:
        from minirepro.claims import ledger

        e = ledger.entry(_STATE.chapter)
    except Exception:  # noqa: BLE001 - no book here (a student's copy of a chapter)
        return None
    return e if e and e.get("current") else None


def _stored_pilot() -> dict[str, Any] | None:
    if not _STATE.chapter:
        return None
    try:
        from minirepro.chapters import get, repo_root
        from minirepro.claims.ledger import notebook_sha
        from minirepro.claims.pool import pilot_path

        ch = get(_STATE.chapter)
        path = pilot_path(ch.slug, repo_root())
        rec = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except Exception:  # noqa: BLE001 - no book here
        return None
    return rec if rec and rec.get("notebook_sha") == notebook_sha(ch) else None


def power_lines() -> str:
    """One line per declared paper claim: its power at its planned n, from the chapter's stored
    pilot (``"merge-beats-prune: power 0.91 at n = 25 (weakest part ...)"``)."""
    from minirepro.claims.power import Power, power

    pilot = _stored_pilot()
    lines = []
    for c in _STATE.claims.values():
        if c.kind != "paper" or c._rule is None:
            continue
        n = c.planned_n or 0
        if pilot is None:
            p = Power(None, n, why="no current pilot record (minirepro claims --pilot)")
        else:
            p = power(c._rule, (pilot.get("claims") or {}).get(c.id), n)
        lines.append(f"{c.id}: {p.describe()}")
    return "\n".join(lines)


def show_trends() -> None:
    """Show the chapter's recorded scale trends (``minirepro claims --trend``), under a heading:
    each claim's effect against size with its interval, the paper's value and the slope's
    interval. Shows nothing when no trend is recorded for this notebook's code."""
    entry = stored_entry()
    rec = (entry or {}).get("trend")
    if not rec or not rec.get("current"):
        return
    keys = [k for k, pts in (rec.get("claims") or {}).items() if pts]
    if not keys:
        return
    import matplotlib.pyplot as plt
    from IPython.display import Markdown, display

    from minirepro.claims.trend import figure

    display(Markdown(
        f"**Scale trends.** Each claim's effect measured at {len(rec.get('values', []))} sizes of "
        f"`{rec.get('param')}` (recorded once by `minirepro claims --trend`, {rec.get('date')}), with "
        "its 95% interval, the paper's value where it gives one, and the slope's interval: a slope "
        "whose interval excludes 0 in the paper's direction says the miniature is too small; a flat "
        "or opposite one says it is not a matter of size."))
    fig, axes = plt.subplots(len(keys), 1, figsize=(6.2, 3.0 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        figure(rec, key, ax)
    fig.tight_layout()
    display(fig)
    plt.close(fig)


def claims_table(kind: str | None = None):
    """The claims as a pandas DataFrame, for display on the page (``kind`` filters).

    Its HTML (the rendered page) shows, beside this run's verdict, the book's verdict: the
    stored record's, pooled over the recorded run and every replication, with its units,
    power and the replications' own verdicts (when the record is current)."""
    stored = {c["id"]: c for c in (stored_entry() or {}).get("claims", [])}
    rows = [{"claim": c.statement if c.kind == "paper" else f"(check) {c.statement}",
             "paper": c.paper_value, "measured here": c.measured or "(pending)",
             "verdict": c.verdict or "(pending)", "rule": c.rule + (f" [flag: {c.flag}]" if c.flag else ""),
             "id": c.id, "book": stored.get(c.id)}
            for c in _STATE.claims.values() if kind is None or c.kind == kind]
    return _FullTable(rows, columns=["claim", "paper", "measured here", "verdict", "rule", "id", "book"])


def _full_table_class():
    import pandas as pd

    class FullTable(pd.DataFrame):
        """A DataFrame whose HTML (the rendered page) shows every cell in full: pandas
        cuts cells at ``display.max_colwidth`` (50) with "…", which hid the measured
        values and rules; the book's CSS wraps them. Its text form is pandas' own."""

        def _repr_html_(self):
            if list(self.columns) != ["claim", "paper", "measured here", "verdict", "rule", "id", "book"]:
                with pd.option_context("display.max_colwidth", None):
                    return super()._repr_html_()
            return _claims_html(self)

    return FullTable


def _claims_html(table) -> str:
    """The claims table as the page shows it: every cell in full, no index column, the rule
    behind a "rule" toggle under each claim, this run's verdict and the book's pooled one."""
    from html import escape

    from minirepro.claims.ledger import replication_text
    from minirepro.claims.page import anchor, badge, power_text, units_text

    entry = stored_entry() or {}
    head = "".join(f"<th>{escape(c)}</th>" for c in ("claim", "paper", "measured here", "this run",
                                                      "the book's verdict"))
    rows = []
    for _, r in table.iterrows():
        claim = (f"{escape(str(r['claim']))}<details class=\"minirepro-rule\"><summary>rule</summary>"
                 f"{escape(str(r['rule']))}</details>")
        book = r["book"]
        if isinstance(book, dict):
            cause = book.get("why") or {}
            full = ((entry.get("full") or {}).get("claims") or {}).get(book.get("id"))
            if not (entry.get("full") or {}).get("current"):
                full = None
            book_cell = (f"{badge(book.get('verdict'), bool(book.get('fragile')))}<br>"
                         f"<small>{units_text(book)}; power {power_text(book)}; "
                         f"replications {escape(replication_text(entry, book))}</small>"
                         + (f"<br><small><b>why: {escape(cause['cause'])}</b>: {escape(cause['evidence'])}</small>"
                            if cause else "")
                         + (f"<br><small>at full scale: {escape(str(full.get('verdict')))}</small>" if full else ""))
        else:
            book_cell = "<small>no current record</small>"
        cells = [claim, escape(str(r["paper"])), escape(str(r["measured here"])), badge(str(r["verdict"])),
                 book_cell]
        rows.append(f'<tr id="{anchor(str(r["id"]))}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f'<table class="dataframe minirepro-claims"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def _FullTable(*args, **kwargs):  # noqa: N802 - a class made on first use (pandas is imported late)
    global _FULL_TABLE
    if _FULL_TABLE is None:
        _FULL_TABLE = _full_table_class()
    return _FULL_TABLE(*args, **kwargs)


_FULL_TABLE = None


def verdict_lines() -> str:
    """One line per claim, ``id: verdict``: the text a golden's checked cell prints.

    Claims declared ``machine_dependent`` are left out; checks of the miniature are
    marked ``(check)``.
    """
    return "\n".join(f"{c.id}{' (check)' if c.kind == 'check' else ''}: {c.verdict or '(pending)'}"
                     for c in _STATE.claims.values() if not c.machine_dependent)
