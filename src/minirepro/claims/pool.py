"""Pooled verdicts: each claim decided on the units of every run recorded for it (protocol v3).

A chapter's records (``book/claims/``):

``<slug>.json``
    the recorded book-scale run (``minirepro claims --update``): per claim its rule as
    JSON (``spec``), its data (``data``, per unit) and that run's own verdict.
``replications/<slug>.json``
    the K replications of the chapter's plan (:mod:`minirepro.claims.plan`;
    ``minirepro claims --robustness K``): per run and claim, its verdict and data.
``pilot/<slug>.json``
    the pilot run on seeds never reported (``minirepro claims --pilot``): per claim its
    data, whose spread gives each rule its power (:mod:`minirepro.claims.power`).

:func:`pool_entry` decides each claim again with its own rule on the units of the
recorded run and every current replication together (a replication run at the recorded
run's own value is that run, counted once). Protocol v3.1: a decided interval stays
decided whatever the power; only a paper claim's *inconclusive* part whose power is below
0.8 is *not testable at this scale*, with the n it would need. Each replication is decided
again under the same rule and gate, and a verdict that more than one of them contradicts
is *fragile*. Nothing here runs a chapter: it decides on the records that
:mod:`minirepro.claims.ledger` reads (the runs belong to :mod:`minirepro.run.replicate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from minirepro.claims.ledger import pilot_path, read_record, replications_path
from minirepro.claims.power import TARGET, Power, power
from minirepro.claims.rules import (
    NOT_REPRODUCED,
    NOT_TESTABLE,
    PARTLY,
    AllOf,
    Given,
    Outcome,
    Rule,
    rule_from_spec,
)
from minirepro.core.stats import Interval

FRAGILE_AFTER = 1  # a verdict more than this many replications contradict is fragile


def _combine(datas: list[Any], lists: Callable[[list[Any]], list[Any]]) -> Any:
    """The per-unit data of several runs as one: mappings key by key, lists by ``lists``, and a
    constant (e.g. a count given as a number) kept when every run gives the same.

    Raises:
        ValueError: the runs' data do not have the same keys or constants, or an interval
            computed by the chapter (which cannot be pooled) is among them.
    """
    first = datas[0]
    if isinstance(first, Mapping):
        if first.get("__interval__"):
            raise ValueError("an interval computed by the chapter cannot be pooled")
        keys = list(first)
        if any(not isinstance(d, Mapping) or list(d) != keys for d in datas):
            raise ValueError(f"the runs' data differ in their keys: {[sorted(d) for d in datas]}")
        return {k: _combine([d[k] for d in datas], lists) for k in keys}
    if isinstance(first, list):
        return lists(datas)
    if all(d == first for d in datas):  # a constant (e.g. a count given as a number)
        return first
    raise ValueError(f"cannot pool {type(first).__name__} values that differ between runs")


def _joined(datas: list[Any]) -> list[Any]:
    out: list[Any] = []
    for d in datas:
        out.extend(d)
    return out


def _unit_means(datas: list[Any]) -> list[float]:
    if any(not isinstance(d, list) or len(d) != len(datas[0]) for d in datas):
        raise ValueError("the runs hold different numbers of units: they cannot be averaged by unit")
    return [float(np.mean([d[i] for d in datas])) for i in range(len(datas[0]))]


def concat(datas: list[Any]) -> Any:
    """The per-unit data of several runs as one: lists joined, mappings key by key.

    Raises:
        ValueError: the runs' data do not have the same keys, or an interval computed by
            the chapter (which cannot be pooled) is among them.
    """
    return _combine(datas, _joined)


def mean_by_unit(datas: list[Any]) -> Any:
    """The per-unit data of several runs averaged position by position: for a plan whose
    replications re-draw the test data of the *same* units (model seeds that are artifacts),
    so that each unit is counted once, with the mean over its draws (the seed is the cluster).

    Raises:
        ValueError: the runs hold different numbers of units, or different keys.
    """
    return _combine(datas, _unit_means)


def _revive(data: Any) -> Any:
    """JSON data back into the form ``decide`` takes (intervals as :class:`Interval`)."""
    if isinstance(data, Mapping):
        if data.get("__interval__"):
            return Interval(data["estimate"], data["low"], data["high"], data["level"], data["n"], data["method"])
        return {k: _revive(v) for k, v in data.items()}
    return data


def _leaf_units(rule: Rule, data: Mapping[str, Any]) -> int:
    return rule.n_units(**_revive(data))


def decide(rule: Rule, data: Mapping[str, Any], pilot: Mapping[str, Any] | None,
           gate: bool = True, search: bool = True) -> tuple[Outcome, Power | None]:
    """The rule's outcome on ``data`` and its power (P(reproduced) of the whole rule at the
    data's n and the rule's design point), protocol v3.1:

    - an interval that lies in the claim's region, or excludes it, decides: the rule's own
      verdict stands whatever the power;
    - an *inconclusive* interval (``details["conclusive"]`` false: it holds both the null
      and the claimed effect) is, with ``gate``, *not testable at this scale* when the
      leaf's planned power is below :data:`~minirepro.claims.power.TARGET` (saying the n it
      would need), and the rule's own verdict (not reproduced) when it is at least that.

    The gate acts on each part of an :class:`AllOf` (each part has its own interval and its
    own power); the power returned for a composite rule is the whole rule's. ``search``:
    also search the n the rule would need when its power is short (slow; not needed to decide).
    """
    if isinstance(rule, Given):
        met, text, pre = rule.check(_revive(data["preconditions"]))
        rest = {k: v for k, v in data.items() if k != "preconditions"}
        inner_pilot = {k: v for k, v in (pilot or {}).items() if k != "preconditions"} if pilot else None
        out, _ = decide(rule.rule, rest, inner_pilot, gate, search=False)
        pw = power(rule, pilot, _leaf_units(rule.rule, rest), search=search) if pilot is not None else None
        details = {**out.details, "preconditions": pre, "preconditions_met": met}
        if not met:
            return Outcome(NOT_TESTABLE, f"{text}; measured: {out.measured}", details), pw
        return Outcome(out.verdict, f"{out.measured}; {text}", details), pw
    if isinstance(rule, AllOf):
        outs = {}
        for name, part in rule.parts.items():
            outs[name], _ = decide(part, data[name], (pilot or {}).get(name) if pilot else None, gate,
                                   search=False)
        n = rule.n_units(**{k: _revive(v) for k, v in data.items()})
        pw = power(rule, pilot, n, search=search) if pilot is not None else Power(None, n, why="no pilot record")
        return rule.combine(outs), pw
    n = _leaf_units(rule, data)
    out = rule.decide(**_revive(data))
    pw = power(rule, pilot, n, search=search) if pilot is not None else Power(None, n, why="no pilot record")
    inconclusive = out.details.get("conclusive") is False
    if (gate and inconclusive and pw.value is not None and pw.value < TARGET
            and out.verdict != NOT_TESTABLE):
        return Outcome(NOT_TESTABLE, f"{out.measured}; inconclusive and underpowered: {pw.describe()}",
                       {**out.details, "gated": True}), pw
    return out, pw


def _decided(details: Mapping[str, Any], verdict: str | None = None) -> bool:
    """Whether the intervals behind an outcome decide its verdict: a leaf's interval is
    conclusive and not gated; a claim of several parts is decided when every part is (or,
    when it failed, when some part failed on a conclusive interval)."""
    parts = {k: v for k, v in details.items() if isinstance(v, Mapping) and "verdict" in v and k != "preconditions"}
    if not parts:
        return details.get("conclusive") is not False and not details.get("gated")
    if verdict in (NOT_REPRODUCED, PARTLY):
        failed = [v for v in parts.values() if v["verdict"] in (NOT_REPRODUCED, PARTLY)]
        if any(_decided(v, v["verdict"]) for v in failed):
            return True
    return all(_decided(v, v["verdict"]) for v in parts.values())


def _runs_for(claim_id: str, entry: Mapping[str, Any],
              reps: Mapping[str, Any] | None) -> tuple[list[Any], list[str], list[Any]]:
    """The data of every run to pool for a claim (the recorded run first), the replications'
    verdicts as each run recorded them, and each replication's own data (to decide it again
    under the pooled verdict's rule and gate)."""
    head = next(c for c in entry["claims"] if c["id"] == claim_id)
    datas = [head.get("data")]
    verdicts: list[str] = []
    rep_datas: list[Any] = []
    if reps and reps.get("current", True):
        head_value = (entry.get("params") or {}).get(reps.get("param", "seed"))
        for run in reps.get("runs", []):
            got = (run.get("claims") or {}).get(claim_id)
            if not run.get("ok", True) or got is None:
                continue
            verdicts.append(got.get("verdict"))
            rep_datas.append(got.get("data"))
            if run.get("value") != head_value and got.get("data") is not None:
                datas.append(got["data"])
    return datas, verdicts, rep_datas


def _tally(verdicts: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v] = counts.get(v, 0) + 1
    return counts


def pool_claim(claim: Mapping[str, Any], entry: Mapping[str, Any], reps: Mapping[str, Any] | None,
               pilot: Mapping[str, Any] | None) -> dict[str, Any]:
    """The v3.1 keys of one claim: pooled verdict and measurement, units, power (P(reproduced)
    of the whole rule), the replications decided again under the same rule and gate
    (``replications``, their tally) beside the verdicts the runs recorded
    (``replications_as_run``), and ``fragile``: more than one replication, decided under
    the same rule and gate, disagrees with the pooled verdict."""
    out: dict[str, Any] = {"run_verdict": claim.get("run_verdict", claim.get("verdict")),
                           "run_measured": claim.get("run_measured", claim.get("measured"))}
    datas, rep_verdicts, rep_datas = _runs_for(claim["id"], entry, reps)
    out["replications_as_run"] = _tally(rep_verdicts)
    out["replications"] = out["replications_as_run"]
    out["k"] = len(rep_verdicts)
    spec = claim.get("spec")
    if not spec or datas[0] is None:  # recorded before protocol v3: nothing to pool
        out.update(verdict=out["run_verdict"], measured=out["run_measured"], n_units=None, power=None,
                   pooled_runs=1, pooled=False, decided=None)
    else:
        rule = rule_from_spec(spec)
        note = ""
        by_unit = (reps or {}).get("pool") == "by-unit"
        try:
            data = mean_by_unit(datas) if by_unit and len(datas) > 1 else concat(datas)
            if by_unit and len(datas) > 1:
                note = f" (each unit the mean of its {len(datas)} draws)"
        except ValueError as exc:
            data, note, datas = datas[0], f" (the recorded run alone: {exc})", datas[:1]
        pilot_data = ((pilot or {}).get("claims") or {}).get(claim["id"])
        paper = claim.get("kind", "paper") == "paper"
        res, pw = decide(rule, data, pilot_data if paper else None, gate=paper)
        out.update(verdict=res.verdict, measured=res.measured + note, details=res.details,
                   n_units=rule.n_units(**_revive(data)), pooled_runs=len(datas), pooled=True,
                   decided=_decided(res.details, res.verdict),
                   power=pw.as_json() if (pw is not None and paper) else None)
        again = []
        for d in rep_datas:
            if d is None:
                continue
            try:
                again.append(decide(rule, d, pilot_data if paper else None, gate=paper, search=False)[0].verdict)
            except (TypeError, ValueError, KeyError):
                again = []
                break
        if again and len(again) == len(rep_verdicts):
            out["replications"] = _tally(again)
    # a replication contradicts the pooled verdict when it decides otherwise; one that cannot
    # decide at its own n ("not testable") holds less evidence, not contrary evidence
    disagree = sum(n for v, n in out["replications"].items() if v not in (out["verdict"], NOT_TESTABLE))
    out["fragile"] = bool(out["k"] and disagree > FRAGILE_AFTER)
    return out


def pool_entry(entry: dict[str, Any], root: Path) -> dict[str, Any]:
    """``entry`` (a ledger entry) with every claim's v3 keys computed from the records."""
    slug = entry["slug"]
    reps = read_record(replications_path(slug, root))
    if reps is not None:
        reps["current"] = reps.get("notebook_sha") == entry.get("notebook_sha")
        try:
            from minirepro.claims.plan import policy

            reps["pool"] = policy(entry["chapter"], root).get("pool", "concat")
        except (ValueError, OSError):
            reps["pool"] = "concat"
    pilot = read_record(pilot_path(slug, root))
    if pilot is not None and pilot.get("notebook_sha") != entry.get("notebook_sha"):
        pilot = None  # a pilot of another version of the notebook says nothing of this one
    claims = []
    for c in entry["claims"]:
        c = dict(c)
        c.update(pool_claim(c, entry, reps, pilot))
        claims.append(c)
    out = dict(entry)
    out["claims"] = claims
    out["replication"] = ({"param": reps.get("param"), "k": reps.get("k"), "values": reps.get("values"),
                           "current": reps["current"], "date": reps.get("date")} if reps else None)
    out["pilot"] = {"value": pilot.get("value"), "date": pilot.get("date")} if pilot else None
    return out


__all__ = ["FRAGILE_AFTER", "concat", "decide", "mean_by_unit", "pool_claim", "pool_entry"]
