"""The command line resolves a chapter's name once (``chapters.get``) and passes the ``Chapter``
down: ``minirepro run``, ``minirepro sweep`` and ``minirepro claims --robustness`` each call
``chapters.get`` exactly once. The notebook is not executed: papermill's call is stubbed."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from minirepro import chapters
from minirepro.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _fake_execute(ipynb: Path, output: Path, params: dict, env: dict, **_: object) -> None:
    """Stands in for papermill: the notebook 'ran' and its kernel recorded one metric."""
    shutil.copy(ipynb, output)
    Path(env["MINIREPRO_RESULTS"]).write_text(json.dumps({"metrics": {"stat": 1.0}, "claims": []}))


@pytest.fixture
def gets(toy_book: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names every ``chapters.get`` call resolves, also through a ``from ... import get``
    alias in any loaded ``minirepro`` module; notebooks are not executed."""
    from minirepro.run import folder

    (toy_book / "book" / "claims").mkdir(parents=True)
    shutil.copy(ROOT / "book" / "papers.yml", toy_book / "book" / "papers.yml")
    monkeypatch.setattr(folder, "execute", _fake_execute)
    calls: list[str] = []
    original = chapters.get

    def counting(name: str, root: Path | None = None) -> chapters.Chapter:
        calls.append(name)
        return original(name, root)

    for module in [m for n, m in sys.modules.items() if n.startswith("minirepro")]:
        if getattr(module, "get", None) is original:
            monkeypatch.setattr(module, "get", counting)
    return calls


def test_run_resolves_the_chapter_once(gets):
    assert main(["run", "toy", "--scale", "smoke", "-p", "seed", "3"]) == 0
    assert gets == ["toy"]


def test_sweep_resolves_the_chapter_once(gets):
    assert main(["sweep", "toy", "--scale", "smoke", "-p", "seed", "0", "1"]) == 0
    assert gets == ["toy"]


def test_replicate_resolves_the_chapter_once(gets, toy_book):
    assert main(["claims", "--robustness", "2", "--only", "toy", "--scale", "smoke"]) == 0
    assert gets == ["toy"]
    record = json.loads((toy_book / "book" / "claims" / "replications" / "01-toy.json").read_text())
    assert record["values"] == [0, 1000] and record["failed"] == 0
