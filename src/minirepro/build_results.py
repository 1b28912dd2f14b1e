"""The ledger of a built book shows what that build computed.

:func:`minirepro.book.build` sets ``MINIREPRO_RESULTS_DIR`` (``_build/<scale>/results``)
and each chapter's kernel writes its results record there as ``<slug>.json``
(:mod:`minirepro.results`). The ledger page reads them through :func:`current_build`:
within it, :func:`minirepro.ledger.load` gives, for every chapter this build ran,
the claims and measurements of this build, while the stored record
(``book/claims/<slug>.json``) stays the reference: a claim whose verdict differs
from it says so in its row, and :func:`differences` lists them all.

Outside a build (no ``MINIREPRO_RESULTS_DIR``), nothing changes: the ledger shows
the stored records.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from minirepro import ledger


def results_dir() -> Path | None:
    folder = os.environ.get("MINIREPRO_RESULTS_DIR")
    return Path(folder) if folder else None


def overlay(entry: dict[str, Any], built: dict[str, Any], scale: str) -> dict[str, Any]:
    """``entry`` (a stored ledger entry) with the claims of ``built`` (a build's record);
    each claim keeps the stored verdict as ``reference_verdict``."""
    stored = {c["id"]: c for c in entry.get("claims", [])}
    claims = []
    for c in built.get("claims", []):
        c = dict(c)
        ref = stored.get(c["id"])
        c["reference_verdict"] = ref.get("verdict") if ref else None
        c["reference_measured"] = ref.get("measured") if ref else None
        if ref is None:
            c["measured"] = f"{c.get('measured')} (not in the stored record)"
        elif ref.get("verdict") != c.get("verdict"):
            c["measured"] = (f"{c.get('measured')} ⚠ **differs from the stored record "
                             f"({entry.get('scale', 'book')} scale, {entry.get('date', '?')}): "
                             f"{ref.get('verdict')}**, {ref.get('measured')}")
        claims.append(c)
    out = dict(entry)
    out.pop("missing", None)
    out.update({"claims": claims, "scale": scale, "built": True, "current": True,
                "reference": {k: entry.get(k) for k in ("scale", "date", "commit", "seconds")},
                "seeds": built.get("seeds") or entry.get("seeds", {}),
                "metrics": built.get("metrics", {}),
                "date": "this build", "commit": "this build's code",
                "seconds": float(built.get("seconds") or 0.0)})
    return out


def load_built(root: Path | None = None, folder: Path | None = None,
               scale: str | None = None) -> list[dict[str, Any]]:
    """The ledger entries, each replaced by this build's record where there is one."""
    folder = folder or results_dir()
    scale = scale or os.environ.get("MINIREPRO_SCALE", "book")
    out = []
    for e in _original_load(root):
        path = folder / f"{e['slug']}.json" if folder is not None else None
        if path is not None and path.is_file():
            e = overlay(e, json.loads(path.read_text(encoding="utf-8")), scale)
        if f"notebooks/{e['slug']}/{e['chapter']}" in _toc_docs(root):
            e["title"] = chapter_link(e)
        out.append(e)
    return out


def _toc_docs(root: Path | None) -> set[str]:
    import yaml

    from minirepro.book import _toc_files
    from minirepro.chapters import repo_root

    toc = (root or repo_root()) / "_toc.yml"
    files = _toc_files(yaml.safe_load(toc.read_text(encoding="utf-8")) or {}) if toc.is_file() else []
    return {f.removesuffix(".md") for f in files}


_original_load = ledger.load


@contextlib.contextmanager
def current_build(folder: Path | None = None) -> Iterator[None]:
    """Within: :mod:`minirepro.ledger` (``load``, ``rows``, ``page_markdown``, counts)
    reads this build's records (see the module's docstring)."""
    ledger.load = lambda root=None: load_built(root, folder)  # type: ignore[assignment]
    try:
        yield
    finally:
        ledger.load = _original_load  # type: ignore[assignment]


def differences(entries: list[dict[str, Any]]) -> list[tuple[str, str, str | None, str | None]]:
    """``(chapter, claim id, this build's verdict, stored verdict)`` where they differ."""
    return [(e["chapter"], c["id"], c.get("verdict"), c.get("reference_verdict"))
            for e in entries if e.get("built") for c in e["claims"]
            if c.get("verdict") != c.get("reference_verdict")]


def chapter_link(entry: dict[str, Any]) -> str:
    """A MyST link to the chapter's page (for the ledger's headings)."""
    return f"{{doc}}`{entry['title']} </notebooks/{entry['slug']}/{entry['chapter']}>`"
