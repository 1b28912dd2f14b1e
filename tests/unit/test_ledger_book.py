"""The claims ledger and the book build's cache key."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from minirepro.book import inputs_hash
from minirepro.chapters import get
from minirepro.claims import ledger, tables

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
    md = tables.markdown()
    assert "**partly**" in md and json.loads(tables.markdown(fmt="json"))[0]["statement"] == "a | b"
    assert tables.verdict_counts()["partly"] == 1
    assert "statement" in tables.markdown(fmt="csv").splitlines()[0]
    assert json.loads(tables.markdown(fmt="json"))[0]["verdict"] == "partly"
    ch.path.write_text(ch.path.read_text() + "\nA new paragraph of prose.\n")
    assert ledger.load()[0]["current"]  # prose does not decide a claim
    text = ch.path.read_text()
    first_code = text.index("```{code-cell}")
    end = text.index("```", first_code + 3)
    ch.path.write_text(text[:end] + "x_extra = 1\n" + text[end:])
    assert not ledger.load()[0]["current"]  # a code cell moved on: stale


def test_ledger_update_runs_the_chapter(toy_book):
    from minirepro.claims import page
    from minirepro.run import replicate

    _book_files(toy_book)
    path = replicate.update(get("toy"), scale="smoke")
    entry = json.loads(path.read_text())
    assert entry["claims"][0]["id"] == "positive" and entry["notebook_sha"]
    assert entry["claims"][0]["run_verdict"] == entry["claims"][0]["verdict"]  # no replications yet
    html = page.ledger_html(ledger.load(), {})
    assert entry["cpu_seconds"] > 0 and "(CPU " in html  # the cost without the load
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
    from html import escape

    from minirepro.claims import page

    entries = ledger.load(ROOT)
    text = page.ledger_html(entries, {})
    for entry in entries:
        assert escape(entry["title"]) in text
        for c in entry["claims"]:
            assert page.anchor(c["id"]) in text and escape(c["statement"]) in text


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
    from minirepro.claims import page as ledger_page

    assert tables.verdict_counts()["reproduced"] == 1  # the check is not counted as the paper's
    assert tables.verdict_counts(kind="check")["reproduced"] == 1
    page = ledger_page.ledger_html(ledger.load(), {"toy": "Toy"})
    assert page.index("The paper's claims") < page.index("Checks of the miniature")
    assert "<td>2</td><td>1</td><td></td><td></td><td>1</td><td></td><td>1/1</td>" in page


def test_code_sha_ignores_comments_but_not_code():
    cell = "```{{code-cell}} ipython3\n{}\n```\n"
    base = ledger.code_sha("# T\n\n" + cell.format("steps = 5  # steps per run"))
    assert ledger.code_sha("# T\n\n" + cell.format("steps = 5  # steps per run [1, inf]")) == base
    assert ledger.code_sha("# T\n\n" + cell.format("# a note\nsteps = 5")) == base
    assert ledger.code_sha("# T\n\n" + cell.format("steps = 6  # steps per run")) != base
    assert ledger.code_sha("# T\n\n" + cell.format("steps = '5 # not a comment'")) != base
    assert ledger.code_sha("# T\n\n" + cell.format("%time steps = 5")) != base  # magics: kept as text


def test_a_withdrawn_record_is_not_testable_until_its_artifact_exists(toy_book):
    """book/claims/withdrawn.yml: while an artifact the chapter needs is missing its claims are
    not testable (cause substrate, the recorded verdict kept); a malformed entry is refused."""
    import pytest

    _book_files(toy_book)
    ch = get("toy")
    entry = {"chapter": "toy", "slug": "01-toy", "title": "t", "scale": "book", "notebook_sha": "old",
             "claims": [{"id": "c", "statement": "s", "paper_value": "1", "measured": "2",
                         "verdict": "reproduced", "rule": "r"},
                        {"id": "k", "kind": "check", "statement": "s", "paper_value": "-",
                         "measured": "2", "verdict": "reproduced", "rule": "r"}]}
    ledger.claims_path(ch, toy_book).write_text(json.dumps(entry))
    path = ledger.withdrawals_path(toy_book)
    path.write_text("toy:\n  needs: [lm-book]\n  why: >-\n    the model it ran on is retired\n")
    (e,) = ledger.load()
    assert not e["current"] and e["withdrawn"]["missing"] == ["lm-book"]
    paper, check = e["claims"]
    assert paper["verdict"] == check["verdict"] == "not testable at this scale"
    assert paper["recorded_verdict"] == "reproduced"
    assert paper["why"] == {"cause": "substrate", "evidence": "the model it ran on is retired"}
    assert check["why"] is None
    assert tables.summary()["causes"]["substrate"] == 1
    assert tables.rows()[0]["robustness"].startswith("withdrawn")
    path.write_text("toy:\n  why: no artifact named\n")
    with pytest.raises(ValueError, match="needs"):
        ledger.load()
