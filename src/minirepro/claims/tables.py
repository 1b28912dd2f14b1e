"""The ledger as tables and text: one row per claim (the JSON interface of ``minirepro
claims``), the markdown table, the CSV, the terminal summary and the counts per verdict.

Everything here renders the stored records that :mod:`minirepro.claims.ledger` reads
(``ledger.load``, which :func:`minirepro.claims.build_results.current_build` may point at a
build's own records); the HTML of the same records is :mod:`minirepro.claims.page`.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from minirepro.claims import ledger, why
from minirepro.claims.rules import VERDICTS

COLUMNS = ["chapter", "id", "kind", "statement", "paper", "measured", "verdict", "run_verdict", "rule",
           "flag", "n_units", "unit", "power", "replications", "k", "fragile", "cause", "why",
           "full_verdict", "robustness"]


def power_value(claim: dict[str, Any]) -> float | None:
    """The claim's power at its pooled n (``None``: a check, or not computable)."""
    p = claim.get("power")
    return p.get("value") if isinstance(p, dict) else None


def underpowered(claim: dict[str, Any]) -> bool:
    """A paper claim made *not testable* by too little power."""
    return claim.get("verdict") == VERDICTS[3] and "underpowered" in str(claim.get("measured"))


def replication_text(entry: dict[str, Any], claim: dict[str, Any]) -> str:
    """``"4/5 reproduced, 1/5 partly"`` (most frequent first), the parameter varied when it
    is not ``seed``; or why there is none."""
    counts, k = claim.get("replications") or {}, claim.get("k") or 0
    rep = entry.get("replication") or {}
    if entry.get("withdrawn"):
        return "withdrawn (the record's substrate is retired)"
    if not k:
        fixed = entry.get("robustness_fixed")
        if fixed:
            return f"not re-seeded: {fixed}"
        return "not run" if not rep else "none current (the chapter changed since)"
    parts = [f"{n}/{k} {v}" for v, n in sorted(counts.items(), key=lambda x: (-x[1], x[0]))]
    over = f" (over {rep['param']})" if rep.get("param") not in (None, "seed") else ""
    return ", ".join(parts) + over


def rows(root: Path | None = None, kind: str | None = None) -> list[dict[str, Any]]:
    """One row per claim of every chapter (the JSON interface of ``minirepro claims``).

    Keys: chapter, id, kind, statement, paper, measured, verdict (pooled), run_verdict
    (the recorded run's own), rule, flag, n_units (units the verdict was decided on),
    unit, power (simulated probability of the rule's test passing at its design point
    at ``n_units``; ``None`` for checks or when not computable), power_detail,
    replications (verdict -> count over the K replications), k, fragile, robustness
    (the replications as text). ``kind`` keeps only ``"paper"`` claims or ``"check"``s.
    """
    table = []
    for e in ledger.load(root):
        for c in e["claims"]:
            k = c.get("kind", "paper")
            if kind is not None and k != kind:
                continue
            p = c.get("power") if isinstance(c.get("power"), dict) else None
            table.append({"chapter": e["chapter"], "id": c["id"], "kind": k,
                          "statement": c["statement"], "paper": c["paper_value"],
                          "measured": c.get("measured"), "verdict": c.get("verdict"),
                          "run_verdict": c.get("run_verdict", c.get("verdict")),
                          "rule": c["rule"], "flag": c.get("flag"),
                          "n_units": c.get("n_units"), "unit": c.get("unit", "seed"),
                          "power": power_value(c), "power_detail": p,
                          "replications": c.get("replications") or {}, "k": c.get("k") or 0,
                          "fragile": bool(c.get("fragile")), "why": c.get("why"),
                          "cause": (c.get("why") or {}).get("cause"),
                          "full_verdict": _full_verdict(e, c["id"]),
                          "robustness": replication_text(e, c)})
    return table


def full_record(entry: dict[str, Any], claim_id: str) -> dict[str, Any] | None:
    """The claim's record in the chapter's full-scale run (``--full``), when that run is current."""
    full = entry.get("full") or {}
    if not full.get("current"):
        return None
    return (full.get("claims") or {}).get(claim_id)


def _full_verdict(entry: dict[str, Any], claim_id: str) -> str | None:
    return (full_record(entry, claim_id) or {}).get("verdict")


def _cell(text: Any) -> str:
    return str(text if text is not None else "(pending)").replace("|", "\\|").replace("\n", " ")


def summary(root: Path | None = None) -> dict[str, Any]:
    """What a reader takes in at once: counts per verdict (the paper's claims and the
    checks), fragile claims, and claims not testable for lack of power."""
    paper, checks = rows(root, "paper"), rows(root, "check")
    return {"paper": {v: sum(r["verdict"] == v for r in paper) for v in VERDICTS},
            "checks": {v: sum(r["verdict"] == v for r in checks) for v in VERDICTS},
            "fragile": [(r["chapter"], r["id"], r["verdict"], r["robustness"]) for r in paper + checks
                        if r["fragile"]],
            "underpowered": [(r["chapter"], r["id"], (r["power_detail"] or {}).get("needed_n"))
                             for r in paper if underpowered(r)],
            "causes": {cause: sum(r["cause"] == cause for r in paper) for cause in why.CAUSES},
            "n_paper": len(paper), "n_checks": len(checks)}


def summary_text(root: Path | None = None) -> str:
    """The terminal summary of ``minirepro claims``: counts, fragile and underpowered claims."""
    s = summary(root)
    lines = [f"{s['n_paper']} claims of the papers: "
             + ", ".join(f"{n} {v}" for v, n in s["paper"].items()),
             f"{s['n_checks']} checks of the miniature: "
             + ", ".join(f"{n} {v}" for v, n in s["checks"].items())]
    lines.append("of those not reproduced or not testable, by cause: "
                 + ", ".join(f"{n} {c}" for c, n in s["causes"].items() if n))
    lines.append(f"fragile (more than one replication disagrees): {len(s['fragile'])}")
    for ch, cid, v, rob in s["fragile"]:
        lines.append(f"  {ch} {cid}: {v}; replications {rob}")
    lines.append(f"not testable for lack of power: {len(s['underpowered'])}")
    by_chapter: dict[str, list[str]] = {}  # one line a chapter, so the summary stays short
    for ch, cid, need in s["underpowered"]:
        by_chapter.setdefault(ch, []).append(f"{cid} (n ≈ {need})" if need else cid)
    for ch, items in by_chapter.items():
        lines += textwrap.wrap(", ".join(items), width=120, initial_indent=f"  {ch}: ",
                               subsequent_indent="    ", break_on_hyphens=False)
    lines.append("(the whole table: minirepro claims --all; --format md|csv|json)")
    return "\n".join(lines)


def markdown(root: Path | None = None, fmt: str = "md") -> str:
    """The ledger as a markdown table (``fmt="md"``), CSV (``"csv"``) or JSON (``"json"``)."""
    data = rows(root)
    if fmt == "json":
        return json.dumps(data, indent=2)
    if fmt == "csv":
        import pandas as pd

        flat = [{**r, "replications": json.dumps(r["replications"]), "power_detail": None,
                 "why": (r["why"] or {}).get("evidence")} for r in data]
        return pd.DataFrame(flat, columns=COLUMNS).to_csv(index=False)
    if fmt != "md":
        raise ValueError(f"unknown format {fmt!r}; expected one of md, csv, json")
    lines = ["| chapter | claim | kind | verdict | units | power | replications |",
             "|---|---|---|---|---|---|---|"]
    for r in data:
        pw = f"{r['power']:.2f}" if r["power"] is not None else "-"
        frag = " (fragile)" if r["fragile"] else ""
        lines.append(f"| {r['chapter']} | {_cell(r['id'])} | {r['kind']} | **{_cell(r['verdict'])}**{frag} | "
                     f"{r['n_units'] if r['n_units'] is not None else '-'} | {pw} | {r['robustness']} |")
    return "\n".join(lines)


def verdict_counts(root: Path | None = None, kind: str | None = "paper") -> dict[str, int]:
    """How many claims have each verdict (the paper's claims by default; ``kind=None``: all)."""
    counts = {v: 0 for v in VERDICTS}
    for r in rows(root, kind=kind):
        if r["verdict"] in counts:
            counts[r["verdict"]] += 1
    return counts


__all__ = ["COLUMNS", "full_record", "markdown", "power_value", "replication_text", "rows", "summary",
           "summary_text", "underpowered", "verdict_counts"]
