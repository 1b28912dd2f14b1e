"""Shared fixtures: a toy book with one tiny chapter, for runner and CLI tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def toy_book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throwaway book root holding ``notebooks/01-toy/toy.md``; MINIREPRO_ROOT points at it
    and it is the working directory, so runs land in its ``runs/`` (runs go to the current
    folder's ``runs/``)."""
    (tmp_path / "notebooks" / "01-toy").mkdir(parents=True)
    shutil.copy(DATA / "toy.md", tmp_path / "notebooks" / "01-toy" / "toy.md")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINIREPRO_ROOT", str(tmp_path))
    monkeypatch.delenv("MINIREPRO_SCALE", raising=False)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return tmp_path
