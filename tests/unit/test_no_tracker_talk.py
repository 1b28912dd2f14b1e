"""Pages speak of the method and the evidence, not of the tracker (issue 47, item 8; the
chapter contract v3): no page under ``notebooks/`` or ``book/`` mentions "issue" followed by
a number, and no figure is named after an issue (``metrics-issue26.png``).

What is read: every text file a page is made of or shows (``.md``, ``.txt`` included by a
page, ``.yml`` records whose text reaches the ledger, ``.bib``), not the book's code
(``book/_ext``) or styles. History goes in the changelog (git log).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = (".md", ".txt", ".yml", ".yaml", ".bib")
SKIP = {"_ext", "_static", "__pycache__"}
MENTION = re.compile(r"\bissues?\s*(?:#|no\.?\s*)?\d+|\bissue#\d+", re.I)
FIGURE = re.compile(r"[\w./-]*issue[-_]?\d+[\w.-]*\.(?:png|svg|jpe?g|pdf)", re.I)


def _page_files() -> list[Path]:
    files = []
    for top in ("notebooks", "book"):
        for p in sorted((ROOT / top).rglob("*")):
            if p.is_file() and p.suffix in TEXT and not SKIP & set(p.relative_to(ROOT).parts):
                files.append(p)
    return files


def _findings() -> list[str]:
    out = []
    for p in _page_files():
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for m in list(MENTION.finditer(line)) + list(FIGURE.finditer(line)):
                out.append(f"{p.relative_to(ROOT)}:{n}: {m.group(0)!r}")
    for top in ("notebooks", "book"):  # figure files named after an issue
        out += [f"{p.relative_to(ROOT)}: a file named after an issue"
                for p in (ROOT / top).rglob("*") if FIGURE.fullmatch(p.name)]
    return out


def test_the_scan_finds_tracker_talk():
    """The patterns catch the forms the issue found (so the test below can fail)."""
    for text in ("What issue 26 changed", "see Issue #31", "(issues 12 and 13)"):
        assert MENTION.search(text), text
    assert FIGURE.search("![metrics](metrics-issue26.png)") and FIGURE.search("fig_issue_27.svg")
    for text in ("an issue of scale", "the issue: 3 seeds", "tissue 5"):
        assert not MENTION.search(text), text
    assert len(_page_files()) > 25


def test_no_page_mentions_an_issue_number_or_names_a_figure_after_one():
    found = _findings()
    assert not found, f"{len(found)} mention(s) of the tracker on the pages:\n  " + "\n  ".join(found[:40])
