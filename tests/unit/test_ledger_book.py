"""The claims ledger and the book build's cache key."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from minirepro import ledger
from minirepro.book import inputs_hash
from minirepro.chapters import get

ROOT = Path(__file__).resolve().parents[2]


def _book_files(root: Path) -> None:
    (root / "book" / "claims").mkdir(parents=True)
    shutil.copy(ROOT / "book" / "papers.yml", root / "book" / "papers.yml")
    (root / "src").mkdir()
    (root / "src" / "m.py").write_text("x = 1\n")


def test_ledger_reads_entries_and_flags_stale_ones(toy_book):
    _book_files(toy_book)
    ch = get("toy")
    assert ledger.load()[0].get("missing")
    entry = {"chapter": "toy", "slug": "01-toy", "title": "t", "scale": "book",
             "notebook_sha": ledger.notebook_sha(ch),
             "claims": [{"id": "c", "statement": "a | b", "paper_value": "1", "measured": "2",
                         "verdict": "partly", "rule": "r"}]}
    ledger.claims_path(ch, toy_book).write_text(json.dumps(entry))
    assert ledger.load()[0]["current"]
    md = ledger.markdown()
    assert "a \\| b" in md and "**partly**" in md
    assert ledger.verdict_counts()["partly"] == 1
    assert "statement" in ledger.markdown(fmt="csv").splitlines()[0]
    assert json.loads(ledger.markdown(fmt="json"))[0]["verdict"] == "partly"
    ch.path.write_text(ch.path.read_text() + "\nA new paragraph of prose.\n")
    assert ledger.load()[0]["current"]  # prose does not decide a claim
    text = ch.path.read_text()
    first_code = text.index("```{code-cell}")
    end = text.index("```", first_code + 3)
    ch.path.write_text(text[:end] + "x_extra = 1\n" + text[end:])
    assert not ledger.load()[0]["current"]  # a code cell moved on: stale


def test_ledger_update_runs_the_chapter(toy_book):
    _book_files(toy_book)
    path = ledger.update("toy", scale="smoke")
    entry = json.loads(path.read_text())
    assert entry["claims"][0]["id"] == "positive" and entry["notebook_sha"]
    assert entry["cpu_seconds"] > 0 and "(CPU " in ledger.page_markdown()  # the cost without the load
    assert ledger.papers()[0]["status"] == "chapter"  # paper 1 <-> 01-toy here


def test_cache_key_follows_the_code(toy_book):
    _book_files(toy_book)
    before = inputs_hash(toy_book)
    assert inputs_hash(toy_book) == before
    (toy_book / "src" / "m.py").write_text("x = 2\n")
    assert inputs_hash(toy_book) != before


def test_plain_papermill_runs_a_chapter(toy_book, tmp_path):
    ipynb, out = tmp_path / "toy.ipynb", tmp_path / "out.ipynb"
    bindir = Path(sys.executable).parent
    subprocess.run([str(bindir / "jupytext"), "--to", "ipynb", "-o", str(ipynb),
                    str(toy_book / "notebooks" / "01-toy" / "toy.md")], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "papermill", str(ipynb), str(out), "-p", "scale", "smoke",
                    "-p", "n", "3", "-k", "python3", "--no-progress-bar"], check=True, capture_output=True)
    assert "claim" in out.read_text() or "positive" in out.read_text()


def test_ledger_page_groups_claims_by_chapter():
    from minirepro.ledger import page_markdown

    text = page_markdown(ROOT)
    for entry in ledger.load(ROOT):
        assert entry["title"] in text
        for c in entry["claims"]:
            assert f"**{c['verdict']}**" in text


def test_ledger_page_keeps_checks_of_the_miniature_apart(toy_book):
    _book_files(toy_book)
    ch = get("toy")
    claims = [{"id": "p", "kind": "paper", "statement": "paper claim", "paper_value": "1",
               "measured": "2", "verdict": "reproduced", "rule": "r"},
              {"id": "k", "kind": "check", "statement": "cost check", "paper_value": "-",
               "measured": "3", "verdict": "reproduced", "rule": "r", "flag": None},
              {"id": "f", "kind": "paper", "statement": "flagged claim", "paper_value": "-",
               "measured": "4", "verdict": "not testable at this scale", "rule": "r",
               "flag": "1 seed(s): cannot give 'reproduced'"}]
    entry = {"chapter": "toy", "slug": "01-toy", "title": "Toy", "scale": "book",
             "notebook_sha": ledger.notebook_sha(ch), "seeds": {"reported": [0, 1], "tuning": [9]},
             "claims": claims}
    ledger.claims_path(ch, toy_book).write_text(json.dumps(entry))
    assert ledger.verdict_counts()["reproduced"] == 1  # the check is not counted as the paper's
    assert ledger.verdict_counts(kind="check")["reproduced"] == 1
    page = ledger.page_markdown()
    assert page.index("*The paper's claims*") < page.index("*Checks of the miniature*")
    assert "| 2 | 1 | 0 | 0 | 1 | 1 (1) |" in page
    assert "flagged: 1 seed(s)" in page and "tuning seeds [9]" in page


def test_code_sha_ignores_comments_but_not_code():
    cell = "```{{code-cell}} ipython3\n{}\n```\n"
    base = ledger.code_sha("# T\n\n" + cell.format("steps = 5  # steps per run"))
    assert ledger.code_sha("# T\n\n" + cell.format("steps = 5  # steps per run [1, inf]")) == base
    assert ledger.code_sha("# T\n\n" + cell.format("# a note\nsteps = 5")) == base
    assert ledger.code_sha("# T\n\n" + cell.format("steps = 6  # steps per run")) != base
    assert ledger.code_sha("# T\n\n" + cell.format("steps = '5 # not a comment'")) != base
    assert ledger.code_sha("# T\n\n" + cell.format("%time steps = 5")) != base  # magics: kept as text
