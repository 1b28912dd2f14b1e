"""The claims ledger and the list of papers.

``book/claims/<slug>.json`` holds a chapter's claims as measured at book scale by
``minirepro claims --update``, together with the hash of the notebook that
produced them (a test fails when the notebook changed since). The ledger page
(``book/ledger.md``) and the papers page read these files when the book builds.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from minirepro.chapters import Chapter, discover, get, repo_root
from minirepro.rules import VERDICTS


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


def _git_commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def update(name: str, root: Path | None = None, scale: str = "book") -> Path:
    """Run a chapter at ``scale`` and store its claims in ``book/claims/<slug>.json``."""
    from minirepro.runner import run_chapter

    root = (root or repo_root()).resolve()
    chapter = get(name, root)
    run = run_chapter(chapter.name, {}, scale=scale, root=root, quiet_bars=True)
    entry = {"chapter": chapter.name, "slug": chapter.slug, "title": chapter.title,
             "scale": scale, "notebook_sha": notebook_sha(chapter),
             "commit": _git_commit(root), "date": _dt.date.today().isoformat(),
             "seconds": run.results["seconds"], "cpu_seconds": run.results.get("cpu_seconds"),
             "load": run.results.get("load"), "params": run.results["params"],
             "seeds": run.results.get("seeds", {}), "metrics": run.results["metrics"],
             "claims": run.results["claims"]}
    path = claims_path(chapter, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def load(root: Path | None = None) -> list[dict[str, Any]]:
    """Every chapter's ledger entry (chapters with none yet get an empty entry)."""
    root = (root or repo_root()).resolve()
    out = []
    for ch in discover(root):
        path = claims_path(ch, root)
        if path.exists():
            entry = json.loads(path.read_text(encoding="utf-8"))
            entry["current"] = entry.get("notebook_sha") == notebook_sha(ch)
            rob = robustness_path(ch, root)
            if rob.exists():
                entry["robustness"] = json.loads(rob.read_text(encoding="utf-8"))
            pol = robustness_policy(ch.name, root)
            if "fixed" in pol:
                entry["robustness_fixed"] = pol.get("short", pol["fixed"])
        else:
            entry = {"chapter": ch.name, "slug": ch.slug, "title": ch.title, "claims": [],
                     "current": False, "missing": True}
        out.append(entry)
    return out


def rows(root: Path | None = None, kind: str | None = None) -> list[dict[str, Any]]:
    """One row per claim of every chapter: chapter, id, kind, statement, paper, measured,
    verdict, rule, flag. ``kind`` keeps only ``"paper"`` claims or ``"check"``s of the miniature."""
    table = []
    for entry in load(root):
        for c in entry["claims"]:
            k = c.get("kind", "paper")
            if kind is not None and k != kind:
                continue
            table.append({"chapter": entry["chapter"], "id": c["id"], "kind": k,
                          "statement": c["statement"], "paper": c["paper_value"],
                          "measured": c.get("measured"), "verdict": c.get("verdict"),
                          "rule": c["rule"], "flag": c.get("flag"),
                          "robustness": robustness_text(entry, c["id"])})
    return table


def _cell(text: Any) -> str:
    return str(text if text is not None else "(pending)").replace("|", "\\|").replace("\n", " ")


COLUMNS = ["chapter", "id", "kind", "statement", "paper", "measured", "verdict", "rule", "flag",
           "robustness"]


def _cpu_note(entry: dict) -> str:
    """`` (CPU 88 s, load 5.2)`` when the entry recorded them: with other work on the machine
    the wall time is inflated, and the CPU time is the run's cost on a quiet machine."""
    cpu, load = entry.get("cpu_seconds"), entry.get("load")
    if cpu is None:
        return ""
    return f" (CPU {cpu:.0f} s" + (f", load {load:.1f})" if load is not None else ")")


def markdown(root: Path | None = None, fmt: str = "md") -> str:
    """The ledger as a markdown table (``fmt="md"``), CSV (``"csv"``) or JSON (``"json"``)."""
    data = rows(root)
    if fmt == "json":
        return json.dumps(data, indent=2)
    if fmt == "csv":
        import pandas as pd

        return pd.DataFrame(data, columns=COLUMNS).to_csv(index=False)
    if fmt != "md":
        raise ValueError(f"unknown format {fmt!r}; expected one of md, csv, json")
    lines = ["| chapter | claim | kind | the paper | measured here | verdict | over base seeds |",
             "|---|---|---|---|---|---|---|"]
    for r in data:
        lines.append(f"| {r['chapter']} | {_cell(r['statement'])} | {r['kind']} | {_cell(r['paper'])} | "
                     f"{_cell(r['measured'])} | **{_cell(r['verdict'])}** | {r['robustness'] or 'not run'} |")
    return "\n".join(lines)


def _counts(claims: list[dict[str, Any]]) -> dict[str, int]:
    return {v: sum(1 for c in claims if c.get("verdict") == v) for v in VERDICTS}


def page_markdown(root: Path | None = None) -> str:
    """The ledger page's body: verdict counts per chapter (the paper's claims apart from the
    book's checks of the miniature), then one section per chapter with both tables."""
    root = (root or repo_root()).resolve()
    entries = load(root)
    listed = yaml.safe_load((root / "book" / "papers.yml").read_text(encoding="utf-8"))
    short = {int(p["number"]): f"{p['name']} (paper {p['number']})" for p in listed}
    out = ["| chapter | paper's claims | reproduced | partly | not reproduced | not testable | checks (passed) |",
           "|---|---|---|---|---|---|---|"]
    for e in entries:
        paper = [c for c in e["claims"] if c.get("kind", "paper") == "paper"]
        checks = [c for c in e["claims"] if c.get("kind", "paper") == "check"]
        counts = _counts(paper)
        name = short.get(int(e["slug"][:2]), e["title"]) if e["slug"][:2].isdigit() else e["title"]
        passed = sum(1 for c in checks if c.get("verdict") == VERDICTS[0])
        out.append(f"| {name} | {len(paper)} | " + " | ".join(str(counts[v]) for v in VERDICTS)
                   + f" | {len(checks)} ({passed}) |")
    for e in entries:
        out.append("")
        if e.get("missing"):
            out.append(f"**{_cell(e['title'])}**: no ledger entry yet.")
            continue
        stale = "" if e.get("current") else " (the chapter changed since: re-run `minirepro claims --update`)"
        seeds = e.get("seeds") or {}
        seed_text = (f" Reported seeds {seeds.get('reported')}; tuning seeds {seeds.get('tuning') or 'none'}."
                     if seeds else "")
        out.append(f"**{_cell(e['title'])}**: measured at {e.get('scale', 'book')} scale in "
                   f"{e.get('seconds', 0):.0f} s{_cpu_note(e)}, {e.get('date', '')}, "
                   f"commit {e.get('commit', '?')}{stale}."
                   + seed_text)
        for kind, heading in (("paper", "The paper's claims"), ("check", "Checks of the miniature")):
            claims = [c for c in e["claims"] if c.get("kind", "paper") == kind]
            if not claims:
                continue
            out += ["", f"*{heading}*", "", "| claim | the paper | measured here | verdict | "
                    "over base seeds |", "|---|---|---|---|---|"]
            for c in claims:
                flag = f" (flagged: {_cell(c['flag'])})" if c.get("flag") else ""
                out.append(f"| {_cell(c['statement'])} | {_cell(c['paper_value'])} | "
                           f"{_cell(c.get('measured'))} | **{_cell(c.get('verdict'))}**{flag} | "
                           f"{robustness_text(e, c['id']) or 'not run'} |")
    return "\n".join(out)


def verdict_counts(root: Path | None = None, kind: str | None = "paper") -> dict[str, int]:
    """How many claims have each verdict (the paper's claims by default; ``kind=None``: all)."""
    counts = {v: 0 for v in VERDICTS}
    for r in rows(root, kind=kind):
        if r["verdict"] in counts:
            counts[r["verdict"]] += 1
    return counts


def papers(root: Path | None = None) -> list[dict[str, Any]]:
    """The papers of ``book/papers.yml`` with their status: chapter or planned."""
    root = (root or repo_root()).resolve()
    listed = yaml.safe_load((root / "book" / "papers.yml").read_text(encoding="utf-8"))
    have = {ch.number: ch for ch in discover(root)}
    out = []
    for p in listed:
        ch = have.get(int(p["number"]))
        out.append({**p, "status": "chapter" if ch else "planned",
                    "doc": f"notebooks/{ch.slug}/{ch.name}" if ch else None})
    return out


def robustness_path(chapter: Chapter, root: Path) -> Path:
    return root / "book" / "claims" / "robustness" / f"{chapter.slug}.json"


POLICY_FILE = Path("book") / "claims" / "robustness_policy.yml"


def robustness_policy(name: str, root: Path | None = None) -> dict[str, str]:
    """How a chapter is re-seeded: ``{"param": NAME, "why": ...}`` or ``{"fixed": REASON}``.

    Read from ``book/claims/robustness_policy.yml``; a chapter not listed varies
    ``seed``. A chapter whose models are checked artifacts trained on fixed seeds
    either varies another parameter (``param``: what the run still draws, e.g.
    the test data) or cannot be re-seeded without re-training (``fixed``).
    """
    root = (root or repo_root()).resolve()
    path = root / POLICY_FILE
    table = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    pol = (table or {}).get(name) or {"param": "seed"}
    if ("param" in pol) == ("fixed" in pol):
        raise ValueError(f"{path}: chapter {name!r} needs exactly one of 'param' or 'fixed'")
    return {k: str(v) for k, v in pol.items()}


def robustness(name: str, k: int, root: Path | None = None, scale: str = "book", jobs: int = 1,
               scheduler: str | None = None, step: int = 1000) -> Path:
    """Re-run a chapter on ``k`` base seeds through the sweep machinery; store verdict counts.

    The varied parameter is the chapter's ``seed`` unless its
    :func:`robustness_policy` names another (or says it cannot be re-seeded:
    ``ValueError``). Its values are the parameter's default plus ``0, step, 2*step,
    ...`` (far apart, so that chapters deriving several seeds from the base do not
    share any). The runs go through :func:`minirepro.runner.sweep` (locally in
    ``jobs`` processes, or on Dask with ``scheduler``). Writes
    ``book/claims/robustness/<slug>.json``: per claim, how many of the runs gave each
    verdict, and how many runs failed.
    """
    from minirepro.runner import sweep

    root = (root or repo_root()).resolve()
    chapter = get(name, root)
    if k < 1:
        raise ValueError(f"--robustness needs K >= 1, got {k}")
    pol = robustness_policy(chapter.name, root)
    if "fixed" in pol:
        raise ValueError(f"chapter {chapter.name!r} is not re-seeded ({POLICY_FILE}): {pol['fixed']}")
    param = pol["param"]
    if param not in chapter.parameters:
        raise ValueError(f"chapter {chapter.name!r} has no `{param}` parameter")
    base = int(chapter.parameters[param].default or 0)
    seeds = [base + i * step for i in range(k)]
    folder = sweep(chapter.name, {param: seeds}, jobs=jobs, scale=scale, root=root,
                   scheduler=scheduler)
    runs = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    counts: dict[str, dict[str, int]] = {}
    for r in runs:
        for cid, verdict in (r.get("verdicts") or {}).items():
            counts.setdefault(cid, {})
            counts[cid][str(verdict)] = counts[cid].get(str(verdict), 0) + 1
    entry = {"chapter": chapter.name, "slug": chapter.slug, "scale": scale, "k": k,
             "param": param, "seeds": seeds, "notebook_sha": notebook_sha(chapter),
             "commit": _git_commit(root), "date": _dt.date.today().isoformat(),
             "failed": sum(1 for r in runs if not r["ok"]), "claims": counts}
    path = robustness_path(chapter, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry, indent=2) + "\n", encoding="utf-8")
    return path


def robustness_text(entry: dict[str, Any], claim_id: str) -> str:
    """``"4/5 reproduced, 1/5 partly"`` for a claim (most frequent first), or ``""``.

    A record that varied another parameter than ``seed`` says which (``"over
    data_seed"``); a chapter its policy marks ``fixed`` reads ``"not re-seeded: ..."``.
    """
    rob = entry.get("robustness")
    if not rob or claim_id not in rob.get("claims", {}):
        fixed = entry.get("robustness_fixed")
        return f"not re-seeded: {fixed}" if fixed else ""
    k = rob["k"]
    parts = [f"{n}/{k} {v}" for v, n in sorted(rob["claims"][claim_id].items(), key=lambda x: -x[1])]
    if rob.get("failed"):
        parts.append(f"{rob['failed']}/{k} runs failed")
    over = f" (over {rob['param']})" if rob.get("param", "seed") != "seed" else ""
    stale = "" if rob.get("notebook_sha") == entry.get("notebook_sha") else " (older notebook)"
    return ", ".join(parts) + over + stale
