"""Where the book is: its root folder and its artifacts folder.

``core`` imports nothing above it, so the one function every layer needs to find the
book lives here: :func:`repo_root` (``MINIREPRO_ROOT``, else the nearest folder above
the working directory holding ``_toc.yml`` and ``notebooks/``, else the checkout this
package was installed from) and :func:`artifacts_root`.
"""

from __future__ import annotations

import os
from pathlib import Path

ARTIFACTS_ENV = "MINIREPRO_ARTIFACTS"


class BookNotFound(ValueError):
    """No book here: no ``_toc.yml`` and ``notebooks/`` at or above the working directory."""


def repo_root() -> Path:
    """The book's root folder: ``MINIREPRO_ROOT``, else the nearest parent of the
    working directory holding ``_toc.yml`` and ``notebooks/``, else the checkout
    this package was installed from."""
    env = os.environ.get("MINIREPRO_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for cand in (here, *here.parents):
        if (cand / "_toc.yml").is_file() and (cand / "notebooks").is_dir():
            return cand
    pkg = Path(__file__).resolve().parents[3]
    if (pkg / "notebooks").is_dir():
        return pkg
    raise BookNotFound("cannot find the book (no _toc.yml and notebooks/ here or above); "
                       "run inside the checkout or set MINIREPRO_ROOT")


def artifacts_root() -> Path:
    """``$MINIREPRO_ARTIFACTS`` if set, else ``artifacts/`` at the book's root."""
    env = os.environ.get(ARTIFACTS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return repo_root() / "artifacts"


__all__ = ["ARTIFACTS_ENV", "BookNotFound", "artifacts_root", "repo_root"]
