"""The book's table of contents (``_toc.yml``): the documents it lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from minirepro.core.paths import repo_root


def toc_files(node: Any) -> list[str]:
    """The ``file`` and ``root`` entries of a parsed ``_toc.yml``, in order."""
    out: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("file", "root") and isinstance(v, str):
                out.append(v)
            else:
                out += toc_files(v)
    elif isinstance(node, list):
        for v in node:
            out += toc_files(v)
    return out


def toc_docs(root: Path | None = None) -> set[str]:
    """The documents of the book's table of contents (paths without ``.md``)."""
    import yaml

    toc = (root or repo_root()) / "_toc.yml"
    if not toc.is_file():
        return set()
    return {f.removesuffix(".md") for f in toc_files(yaml.safe_load(toc.read_text(encoding="utf-8")) or {})}
