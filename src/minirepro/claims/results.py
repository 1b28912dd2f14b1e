"""The notebook's API for metrics and claims: what a chapter declares, records and shows.

A chapter states each claim with a rule object (:mod:`minirepro.claims.rules`: ``Better``,
``Equivalent``, ``Threshold``, ``AllOf``) *before* the experiment runs
(``declare_claim``), then settles it with the data (``claim.settle(method=...,
baseline=...)``): the rule writes its sentence on the page and decides the verdict,
so the threshold lives in one place. ``kind="check"`` marks a claim the book adds
(a cost, a pipeline check) as a *check of the miniature*, kept apart from the
paper's claims in the ledger. ``claims_table()`` shows them on the page. Every word of a
declaration is explained once on the book's page "Writing a claim"
(``book/writing-claims.md``).

Metrics carry the tolerance within which a re-run must reproduce them
(``record_metric(name, value, rtol=..., atol=...)``): the golden check compares a
fresh smoke run with the stored one within these, so a number that training
computes may differ in its last digits between processors without failing.

This module holds the declarations only: the record they write (and its ``results.json``)
is :mod:`minirepro.claims.record`, the chapter's stored ledger entry
:mod:`minirepro.claims.ledger`, and what the page shows :mod:`minirepro.claims.chapter_view`.
"""

from __future__ import annotations

import math
from typing import Any

from minirepro.claims import ledger
from minirepro.claims.chapter_view import claims_table, power_lines, show_trends, verdict_lines
from minirepro.claims.record import (
    _STATE,
    KINDS,
    Claim,
    chapter,
    claims,
    jsonable,
    metrics,
    reset,
    tolerances,
)
from minirepro.claims.rules import Given, Rule


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
    value = jsonable(value.item() if hasattr(value, "item") else value)
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


def stored_entry() -> dict[str, Any] | None:
    """The ledger's stored entry of the chapter this process records (see :func:`reset`),
    when it is current (made from this notebook's code); else ``None``."""
    return ledger.current_entry(chapter())


__all__ = ["KINDS", "Claim", "chapter", "claims", "claims_table", "declare_claim", "declare_seeds",
           "metrics", "power_lines", "record_metric", "reset", "show_trends", "stored_entry",
           "tolerances", "verdict_lines"]
