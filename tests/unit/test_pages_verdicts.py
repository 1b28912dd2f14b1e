"""The verdict box at the top of each chapter (``{minirepro-verdicts}``) and the landing
page's summary (``{minirepro-summary}``): rendered from a ledger entry, current, withdrawn,
out of date or missing, by the functions and through a Sphinx build of a toy book."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from minirepro.claims import page

ROOT = Path(__file__).resolve().parents[2]


def _claim(cid, verdict, kind="paper", **extra):
    base = {"id": cid, "statement": f"Statement of {cid}.", "kind": kind, "verdict": verdict,
            "paper_value": "paper", "measured": "here", "rule": "a rule", "n_units": 25, "unit": "seed",
            "k": 5, "replications": {verdict: 4, "partly": 1}, "fragile": False}
    return {**base, **extra}


ENTRY = {
    "chapter": "toy", "slug": "01-toy", "title": "Toy: a paper in miniature", "current": True,
    "date": "2026-12-01", "replication": {"param": "data_seed", "values": [0, 1, 2, 3, 4], "current": True},
    "claims": [
        _claim("beats-base", "reproduced",
               power={"value": 0.91, "design": "true improvement 0.1"}),
        _claim("on-par", "not reproduced", fragile=True,
               power={"value": 0.42, "design": "true difference 0"},
               why={"cause": "scale", "evidence": "the gap closes with training"}),
        _claim("pipeline-ok", "reproduced", kind="check", power=None),
        _claim("cost", "not reproduced", kind="check", power=None),
    ],
}


def _withdrawn(entry):
    e = copy.deepcopy(entry)
    e["withdrawn"] = {"why": "its model was retired.", "needs": ["lm-book"], "missing": ["lm-book"]}
    for c in e["claims"]:
        c["recorded_verdict"], c["verdict"] = c["verdict"], "not testable at this scale"
        c["replications"], c["k"], c["fragile"] = {}, 0, False
        c["why"] = {"cause": "substrate", "evidence": "its model was retired."}
    return e


def test_a_current_entry_shows_each_paper_claim_once_with_n_power_and_tally():
    html = page.verdicts_html(ENTRY, "../../book/ledger.html#ledger-toy")
    assert 'data-state="current"' in html
    assert html.count("<tr>") == 1 + 2  # the head, then one row per paper claim; no check rows
    assert "Statement of beats-base." in html and "Statement of on-par." in html
    assert "Statement of pipeline-ok." not in html
    assert 'href="#claim-beats-base"' in html  # to the claim's row at the end of the page
    assert "25&nbsp;seeds" in html and ">0.91<" in html and ">0.42<" in html
    assert "4/5&nbsp;reproduced, 1/5&nbsp;partly" in html
    assert "4/5&nbsp;not&nbsp;reproduced" in html
    assert 'class="mr-fragile"' in html and '<span class="mr-cause">scale</span>' in html
    assert '<span class="mr-badge mr-rep">1&nbsp;reproduced</span>' in html  # the head's counts
    assert "2 checks of the miniature: 1 passed." in html
    assert "<code>data_seed</code>" in html
    assert 'href="../../book/ledger.html#ledger-toy"' in html
    assert "withdrawn" not in html and "Out of date" not in html


def test_a_withdrawn_entry_says_so_and_what_it_waits_for():
    html = page.verdicts_html(_withdrawn(ENTRY), "ledger.html#ledger-toy")
    assert 'data-state="withdrawn"' in html
    assert "These verdicts are withdrawn:</b> its model was retired." in html
    assert "<code>minirepro artifacts build lm-book</code>" in html
    assert "<code>minirepro claims --update toy</code>" in html
    assert '<span class="mr-badge mr-nottest">2&nbsp;not testable</span>' in html
    assert "was reproduced" in html and "was not reproduced" in html  # the recorded verdicts, beside
    assert "withdrawn with the rest" in html and "passed" not in html
    built = _withdrawn(ENTRY)
    built["withdrawn"]["missing"] = []
    assert "What they need is built now" in page.verdicts_html(built, "x")


def test_an_out_of_date_entry_says_so_and_what_it_waits_for():
    stale = {**ENTRY, "current": False}
    html = page.verdicts_html(stale, "x")
    assert 'data-state="stale"' in html
    assert "Out of date:" in html and "(2026-12-01)" in html
    assert "minirepro claims --update toy" in html and "--robustness K --only toy" in html
    assert "Statement of beats-base." in html  # the last recorded verdicts still show


def test_a_chapter_without_a_record_says_what_it_waits_for():
    for entry in (None, {"chapter": "toy", "slug": "01-toy", "title": "Toy", "claims": [], "missing": True}):
        html = page.verdicts_html(entry, "x", "toy")
        assert 'data-state="missing"' in html and "No verdicts are recorded" in html
        assert "minirepro claims --update toy" in html and "<table" not in html


def test_the_book_summary_counts_the_papers_claims_checks_and_fragile_ones():
    other = {**_withdrawn(ENTRY), "chapter": "toy2", "slug": "02-toy2", "title": "Toy2: another"}
    stale = {**ENTRY, "chapter": "toy3", "slug": "03-toy3", "title": "Toy3: old", "current": False}
    html = page.book_summary_html([ENTRY, other, stale], "book/ledger.html", "book/status.html")
    assert "<b>6 claims of 3 papers</b>" in html
    assert '<span class="mr-badge mr-rep">2&nbsp;reproduced</span>' in html
    assert '<span class="mr-badge mr-nottest">2&nbsp;not testable</span>' in html
    assert "<b>6 checks of the miniature</b>: 2 passed" in html
    assert "<b>2</b> verdicts fragile" in html
    assert "1 chapter withdrawn</b> (Toy2)" in html and "1 out of date</b> (Toy3)" in html
    short = page.book_summary_html([ENTRY, other], "l", "s", {"toy2": "T2"})
    assert "1 chapter withdrawn</b> (T2)" in short
    assert 'href="book/ledger.html"' in html and 'href="book/status.html"' in html


@pytest.fixture()
def pages_ext(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "book" / "_ext"))
    sys.modules.pop("minirepro_pages", None)
    import minirepro_pages

    return minirepro_pages


def test_the_directives_render_in_a_sphinx_build(pages_ext, monkeypatch, tmp_path):
    """A toy book: a chapter page with ``{minirepro-verdicts}`` (its chapter from the page's
    path), one naming a withdrawn chapter, and a landing page with ``{minirepro-summary}``."""
    from sphinx.application import Sphinx

    entries = [ENTRY, {**_withdrawn(ENTRY), "chapter": "toy2", "slug": "02-toy2", "title": "Toy2: x"}]
    monkeypatch.setattr(pages_ext, "load_entries", lambda root=None: entries)
    src = tmp_path / "src"
    (src / "notebooks" / "01-toy").mkdir(parents=True)
    (src / "book").mkdir()
    (src / "conf.py").write_text("extensions = ['minirepro_pages']\nroot_doc = 'book/intro'\n")
    (src / "book" / "intro.rst").write_text(
        "Intro\n=====\n\n.. minirepro-summary::\n\n.. toctree::\n\n   ledger\n   status\n"
        "   ../notebooks/01-toy/toy\n")
    (src / "book" / "ledger.rst").write_text("Ledger\n======\n")
    (src / "book" / "status.rst").write_text("Status\n======\n")
    (src / "notebooks" / "01-toy" / "toy.rst").write_text(
        "Toy\n===\n\n.. minirepro-verdicts::\n\nText.\n\n.. minirepro-verdicts:: toy2\n")
    out = tmp_path / "html"
    app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html",
                 status=None, warning=None, freshenv=True)
    app.build()
    chapter = (out / "notebooks" / "01-toy" / "toy.html").read_text()
    assert 'data-chapter="toy" data-state="current"' in chapter
    assert 'href="../../book/ledger.html#ledger-toy"' in chapter
    assert 'data-chapter="toy2" data-state="withdrawn"' in chapter
    intro = (out / "book" / "intro.html").read_text()
    assert 'class="mr-book-summary"' in intro
    assert 'href="ledger.html"' in intro and 'href="status.html"' in intro


def test_the_verdicts_directive_outside_a_chapter_needs_a_name(pages_ext):
    assert pages_ext._chapter_of("notebooks/07-caffnet/caffnet") == "caffnet"
    assert pages_ext._chapter_of("book/intro") is None
