"""The claims ledger and the list of papers.

``book/claims/<slug>.json`` holds a chapter's claims as measured at book scale by
``minirepro claims --update``, together with the hash of the notebook that produced
them (a test fails when the notebook changed since), and, for every claim, the verdict
pooled over the recorded run and the chapter's replications (protocol v3,
:mod:`minirepro.claims.pool`): the units it was decided on, its power, the
replications' own verdicts and whether it is fragile. The ledger page
(``book/ledger.md``) and the papers page read these files when the book builds; this
module only reads records.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path
from typing import Any

import yaml

from minirepro.chapters import Chapter, discover, repo_root
from minirepro.claims import plan, why
from minirepro.claims.rules import VERDICTS
from minirepro.core.toc import toc_docs


def notebook_sha(chapter: Chapter) -> str:
    """SHA-256 (first 16 hex) of the chapter's code cells (code and tags, comments left out).

    Only code decides the recorded claims, so an edit to the prose, or to a comment
    (a parameter's description, its allowed range), keeps the ledger entry current;
    any change to the code of a code cell (a rule, a parameter, a step) makes it stale.
    """
    return code_sha(chapter.path.read_text(encoding="utf-8"))


def _without_comments(source: str) -> str:
    """``source``'s Python tokens without comments and blank lines (a cell that does not
    tokenize, such as one with IPython magics, is returned unchanged)."""
    import io
    import tokenize

    try:
        toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return source
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
    return "\x1f".join(f"{t.type}:{t.string}" for t in toks if t.type not in skip)


def code_sha(text: str) -> str:
    """:func:`notebook_sha` of a MyST notebook's text."""
    import jupytext

    nb = jupytext.reads(text, fmt="md:myst")
    h = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            tags = ",".join(sorted(cell.metadata.get("tags", [])))
            h.update(f"{tags}\n{_without_comments(cell.source)}\n\0".encode())
    return h.hexdigest()[:16]


def claims_path(chapter: Chapter, root: Path) -> Path:
    return root / "book" / "claims" / f"{chapter.slug}.json"


def load(root: Path | None = None) -> list[dict[str, Any]]:
    """Every chapter's ledger entry (chapters with none yet get an empty entry)."""
    root = (root or repo_root()).resolve()
    out, withdrawn_table = [], withdrawals(root)
    for ch in discover(root):
        path = claims_path(ch, root)
        if path.exists():
            entry = json.loads(path.read_text(encoding="utf-8"))
            entry["current"] = entry.get("notebook_sha") == notebook_sha(ch)
            written = why.load_causes(ch.slug, root)
            for c in entry.get("claims", []):
                c["why"] = why.cause_of(c, written, entry.get("metrics") or {})
            _attach_extras(entry, ch, root)
            if ch.name in withdrawn_table:
                _withdraw(entry, withdrawn_table[ch.name], root)
            pol = plan.policy(ch.name, root)
            if "fixed" in pol:
                entry["robustness_fixed"] = pol.get("short", pol["fixed"])
            else:
                entry["plan"] = {"param": pol["param"], "k": pol["k"]}
        else:
            entry = {"chapter": ch.name, "slug": ch.slug, "title": ch.title, "claims": [],
                     "current": False, "missing": True}
        out.append(entry)
    return out


def withdrawals_path(root: Path) -> Path:
    return root / "book" / "claims" / "withdrawn.yml"


def withdrawals(root: Path | None = None) -> dict[str, dict[str, Any]]:
    """Chapters whose recorded verdicts are withdrawn (``book/claims/withdrawn.yml``), checked.

    A chapter's record is withdrawn when what it was decided on is gone (the model it ran on
    was retired) and the chapter cannot be run again until an artifact is built. Each entry
    names the artifacts it ``needs`` and ``why``; while it stands, the chapter's claims are
    *not testable* with the cause ``substrate``, and the recorded verdicts are kept beside
    them as ``recorded_verdict``. Once every artifact it needs is built and verifies, the
    withdrawal no longer stands: the chapter must be re-run (``minirepro claims --update``)
    and its entry removed (``tests/unit/test_project.py`` fails until then).
    """
    path = withdrawals_path((root or repo_root()).resolve())
    if not path.is_file():
        return {}
    table = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for name, item in table.items():
        if (not isinstance(item, dict) or not item.get("why") or not item.get("needs")
                or not isinstance(item["needs"], list)):
            raise ValueError(f"{path}: {name!r} needs `why` (text) and `needs` (a list of "
                             f"artifact names), got {item!r}")
    return {str(k): {"why": " ".join(str(v["why"]).split()), "needs": [str(n) for n in v["needs"]]}
            for k, v in table.items()}


def _withdraw(entry: dict[str, Any], item: dict[str, Any], root: Path) -> None:
    """Mark ``entry`` withdrawn: each claim not testable (cause ``substrate``), the recorded
    verdict kept as ``recorded_verdict``; ``missing``: the needed artifacts not built or not
    verified now."""
    from minirepro.core import artifacts

    missing = [n for n in item["needs"] if artifacts.verify(n, root / "artifacts")]
    entry["withdrawn"] = {**item, "missing": missing}
    for c in entry.get("claims", []):
        c["recorded_verdict"] = c.get("verdict")
        c["verdict"] = c["run_verdict"] = VERDICTS[3]
        c["replications"], c["k"], c["fragile"] = {}, 0, False
        c["why"] = ({"cause": "substrate", "evidence": item["why"]}
                    if c.get("kind", "paper") == "paper" else None)


def _attach_extras(entry: dict[str, Any], chapter: Chapter, root: Path) -> None:
    """The chapter's full-scale run and scale trends, when recorded (``--full``, ``--trend``)."""
    for key, folder in (("full", "full"), ("trend", "trend")):
        path = root / "book" / "claims" / folder / f"{chapter.slug}.json"
        if path.is_file():
            rec = json.loads(path.read_text(encoding="utf-8"))
            rec["current"] = rec.get("notebook_sha") == entry.get("notebook_sha")
            entry[key] = rec


def entry(name: str, root: Path | None = None) -> dict[str, Any] | None:
    """One chapter's ledger entry (``None`` when it has none)."""
    return next((e for e in load(root) if e["chapter"] == name and not e.get("missing")), None)


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
    for e in load(root):
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


def _full_verdict(entry: dict[str, Any], claim_id: str) -> str | None:
    full = entry.get("full") or {}
    if not full.get("current"):
        return None
    return ((full.get("claims") or {}).get(claim_id) or {}).get("verdict")


def _cell(text: Any) -> str:
    return str(text if text is not None else "(pending)").replace("|", "\\|").replace("\n", " ")


COLUMNS = ["chapter", "id", "kind", "statement", "paper", "measured", "verdict", "run_verdict", "rule",
           "flag", "n_units", "unit", "power", "replications", "k", "fragile", "cause", "why",
           "full_verdict", "robustness"]


def _cpu_note(entry: dict) -> str:
    """`` (CPU 88 s, load 5.2)`` when the entry recorded them: with other work on the machine
    the wall time is inflated, and the CPU time is the run's cost on a quiet machine."""
    cpu, load_ = entry.get("cpu_seconds"), entry.get("load")
    if cpu is None:
        return ""
    return f" (CPU {cpu:.0f} s" + (f", load {load_:.1f})" if load_ is not None else ")")


def summary(root: Path | None = None) -> dict[str, Any]:
    """What a reader takes in at once: counts per verdict (the paper's claims and the
    checks), fragile claims, and claims not testable for lack of power."""
    paper, checks = rows(root, "paper"), rows(root, "check")
    return {"paper": {v: sum(r["verdict"] == v for r in paper) for v in VERDICTS},
            "checks": {v: sum(r["verdict"] == v for r in checks) for v in VERDICTS},
            "fragile": [(r["chapter"], r["id"], r["verdict"], r["robustness"]) for r in paper + checks
                        if r["fragile"]],
            "underpowered": [(r["chapter"], r["id"], (r["power_detail"] or {}).get("needed_n"))
                             for r in paper if r["verdict"] == VERDICTS[3]
                             and "underpowered" in str(r["measured"])],
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


def papers(root: Path | None = None) -> list[dict[str, Any]]:
    """The papers of ``book/papers.yml`` with their status: chapter or planned, and whether
    the chapter's page is in the book's table of contents (``in_book``)."""
    root = (root or repo_root()).resolve()
    listed = yaml.safe_load((root / "book" / "papers.yml").read_text(encoding="utf-8"))
    docs = toc_docs(root)
    have = {ch.number: ch for ch in discover(root)}
    out = []
    for p in listed:
        ch = have.get(int(p["number"]))
        doc = f"notebooks/{ch.slug}/{ch.name}" if ch else None
        out.append({**p, "status": "chapter" if ch else "planned", "doc": doc, "in_book": doc in docs})
    return out


__all__ = ["COLUMNS", "claims_path", "code_sha", "entry", "load", "markdown", "notebook_sha", "papers",
           "power_value", "replication_text", "rows", "summary", "summary_text", "underpowered",
           "verdict_counts", "withdrawals", "withdrawals_path"]
