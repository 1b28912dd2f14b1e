"""The stored records of the claims ledger: reading ``book/claims/`` (this module only reads).

``book/claims/<slug>.json`` holds a chapter's claims as measured at book scale by
``minirepro claims --update``, together with the hash of the notebook that produced
them (a test fails when the notebook changed since), and, for every claim, the verdict
pooled over the recorded run and the chapter's replications (protocol v3,
:mod:`minirepro.claims.pool`): the units it was decided on, its power, the
replications' own verdicts and whether it is fragile. Beside it lie the chapter's
``replications/``, ``pilot/``, ``full/`` and ``trend/`` records, ``why/`` causes and
``withdrawn.yml``. The ledger page (``book/ledger.md``) and the papers page read these
files when the book builds; their text and tables are :mod:`minirepro.claims.tables`
and :mod:`minirepro.claims.page`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from minirepro.chapters import Chapter, discover, get, repo_root
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


def records_dir(root: Path) -> Path:
    """``book/claims/``: where every chapter's records lie."""
    return root / "book" / "claims"


def claims_path(chapter: Chapter, root: Path) -> Path:
    """The chapter's recorded book-scale run, ``book/claims/<slug>.json``."""
    return records_dir(root) / f"{chapter.slug}.json"


def replications_path(slug: str, root: Path) -> Path:
    """The chapter's K replications (``minirepro claims --robustness K``)."""
    return records_dir(root) / "replications" / f"{slug}.json"


def pilot_path(slug: str, root: Path) -> Path:
    """The chapter's pilot run on seeds never reported (``minirepro claims --pilot``)."""
    return records_dir(root) / "pilot" / f"{slug}.json"


def read_record(path: Path) -> dict[str, Any] | None:
    """The JSON record at ``path``, or ``None`` when there is none."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


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
    return records_dir(root) / "withdrawn.yml"


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
        rec = read_record(records_dir(root) / folder / f"{chapter.slug}.json")
        if rec is not None:
            rec["current"] = rec.get("notebook_sha") == entry.get("notebook_sha")
            entry[key] = rec


def entry(name: str, root: Path | None = None) -> dict[str, Any] | None:
    """One chapter's ledger entry (``None`` when it has none)."""
    return next((e for e in load(root) if e["chapter"] == name and not e.get("missing")), None)


def current_entry(name: str | None) -> dict[str, Any] | None:
    """The stored entry of chapter ``name`` when it is current (made from this notebook's code);
    else ``None`` (no name, no current record, or no book here: a student's copy of a chapter)."""
    if not name:
        return None
    try:
        e = entry(name)
    except Exception:  # noqa: BLE001 - no book here (a student's copy of a chapter)
        return None
    return e if e and e.get("current") else None


def current_pilot(name: str | None) -> dict[str, Any] | None:
    """The pilot record of chapter ``name`` when it was run on this notebook's code, else ``None``."""
    if not name:
        return None
    try:
        ch = get(name)
        rec = read_record(pilot_path(ch.slug, repo_root()))
    except Exception:  # noqa: BLE001 - no book here
        return None
    return rec if rec and rec.get("notebook_sha") == notebook_sha(ch) else None


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


__all__ = ["claims_path", "code_sha", "current_entry", "current_pilot", "entry", "load", "notebook_sha",
           "papers", "pilot_path", "read_record", "records_dir", "replications_path", "withdrawals",
           "withdrawals_path"]
