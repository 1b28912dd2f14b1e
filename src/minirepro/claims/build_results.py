"""The ledger of a built book and what that build computed.

:func:`minirepro.book.build` sets ``MINIREPRO_RESULTS_DIR`` (``_build/<scale>/results``)
and each chapter's kernel writes its results record there as ``<slug>.json``
(:mod:`minirepro.claims.results`). The ledger page always shows the stored records
(``book/claims/<slug>.json``: the book-scale verdicts, pooled over every replication);
within :func:`current_build`, a build at the records' own scale also compares each
claim's verdict in this build with the stored run's own verdict (``run_verdict``): a
claim whose verdict differs says so in its row, and :func:`differences` lists them all.
A build at another scale (the smoke build of CI) says so once and compares nothing: its
single smoke-scale runs are not the book's evidence.

Outside a build (no ``MINIREPRO_RESULTS_DIR``), nothing changes: the ledger shows the
stored records.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from minirepro.claims import ledger


def results_dir() -> Path | None:
    folder = os.environ.get("MINIREPRO_RESULTS_DIR")
    return Path(folder) if folder else None


def overlay(entry: dict[str, Any], built: dict[str, Any], scale: str) -> dict[str, Any]:
    """``entry`` (a stored ledger entry) with this build's verdict beside each claim's
    (``build_verdict``) when the build ran at the entry's own scale."""
    out = dict(entry)
    out["build_scale"] = scale
    out["built"] = True
    if scale != entry.get("scale", "book"):
        return out
    got = {c["id"]: c for c in built.get("claims", [])}
    claims = []
    for c in entry.get("claims", []):
        c = dict(c)
        b = got.get(c["id"])
        c["build_verdict"] = b.get("verdict") if b else None
        claims.append(c)
    out["claims"] = claims
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
        out.append(e)
    return out


_original_load = ledger.load


@contextlib.contextmanager
def current_build(folder: Path | None = None) -> Iterator[None]:
    """Within: :mod:`minirepro.claims.ledger` (``load``, ``rows``, counts)
    reads this build's records (see the module's docstring)."""
    ledger.load = lambda root=None: load_built(root, folder)  # type: ignore[assignment]
    try:
        yield
    finally:
        ledger.load = _original_load  # type: ignore[assignment]


def differences(entries: list[dict[str, Any]]) -> list[tuple[str, str, str | None, str | None]]:
    """``(chapter, claim id, this build's verdict, the stored run's verdict)`` where a build at
    the records' scale gave another verdict than the stored run (a machine-dependent verdict)."""
    return [(e["chapter"], c["id"], c.get("build_verdict"), c.get("run_verdict", c.get("verdict")))
            for e in entries if e.get("built") and e.get("build_scale") == e.get("scale", "book")
            for c in e["claims"] if "build_verdict" in c
            and c.get("build_verdict") != c.get("run_verdict", c.get("verdict"))]
