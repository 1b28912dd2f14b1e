"""Every page of the built book in headless Chromium (``make browser``; ``make test`` runs it
on the smoke build it has just made).

The build read is ``_build/smoke/_build/html`` (``MINIREPRO_BROWSER_BUILD=_build/book``
reads the book-scale build). It is served from ``http.server`` on 127.0.0.1 for the
duration of the test. Each page is checked by :func:`pagecheck.check_page` (MathJax,
console, overflow, reprs, links, buttons) and :func:`pagecheck.layout_defects` (no
table header broken letter by letter, each verdict badge on one line) at 1280 px, and
again at 800 px (tables fit the column; headers and badges keep their words whole); a
build below book scale must show its scale banner on every page; the ledger and the
papers table again at phone width; the execution-status page must list every chapter
of ``_toc.yml``. Each chapter's first screen is saved as
``<build>/screenshots/<chapter>.png`` for a maintainer to look at.

Standalone (``pytest tests/browser``), a missing build or browser skips with a loud
message; under ``make browser`` (``MINIREPRO_BROWSER_REQUIRED=1``) it fails.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import pagecheck
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("MINIREPRO_BROWSER_BUILD", "_build/smoke")
HTML = BUILD / "_build" / "html"
REQUIRED = os.environ.get("MINIREPRO_BROWSER_REQUIRED") == "1"
PHONE_PAGES = ("book/ledger.html", "book/papers.html")
KNOWN = Path(__file__).with_name("known_defects.txt")


def known_defects() -> list[tuple[str, str]]:
    """``(page, text)`` pairs from ``known_defects.txt``: defects a chapter's owner has been
    told about (issue 27). They are reported as warnings, not failures; any other defect fails."""
    out = []
    for line in KNOWN.read_text(encoding="utf-8").splitlines() if KNOWN.is_file() else []:
        line = line.split(" #", 1)[0].rstrip()
        if line.strip() and not line.lstrip().startswith("#"):
            page, _, text = line.partition("\t")
            out.append((page.strip(), text.strip()))
    return out


def _missing() -> str | None:
    if not pagecheck.browser_available():
        return ("Debian's chromium and chromium-driver are not installed "
                "(apt-get install -y chromium chromium-driver; .ci/run does it)")
    if not (HTML / "index.html").is_file():
        return f"no built book at {HTML} (build it: .venv/bin/minirepro book --scale smoke)"
    return None


def _pages() -> list[str]:
    return [str(p.relative_to(HTML)) for p in pagecheck.html_pages(HTML)] if _missing() is None else []


def build_scale() -> str:
    """The scale the build was made at (its derived config; ``book`` if it does not say)."""
    cfg = BUILD / "_config.derived.yml"
    config = yaml.safe_load(cfg.read_text(encoding="utf-8")) if cfg.is_file() else {}
    return str((((config or {}).get("sphinx") or {}).get("config") or {}).get("minirepro_scale") or "book")


def toc_chapters() -> list[str]:
    """The chapters of ``_toc.yml`` (``notebooks/NN-slug/slug``)."""
    import re

    return re.findall(r"file:\s*(notebooks/\d{2}-[^/\s]+/[^/\s]+)", (ROOT / "_toc.yml").read_text())


def _triage(page: str, defects: list[str]) -> list[str]:
    """The defects not listed in known_defects.txt (those are warnings), and a warning for
    each listed defect that no longer occurs."""
    known = [text for p, text in known_defects() if p == page]
    new = [d for d in defects if not any(k in d for k in known)]
    for d in defects:
        if d not in new:
            warnings.warn(f"known defect (tests/browser/known_defects.txt) on {page}: {d}", stacklevel=2)
    return new


def repo_url() -> str:
    """The repository the build was made with (its derived config; the environment overrides)."""
    cfg = BUILD / "_config.derived.yml"
    if not cfg.is_file():
        cfg = ROOT / "_config.yml"
    config = yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}
    return os.environ.get("MINIREPRO_REPO_URL") or ((config.get("repository") or {}).get("url") or "")


@pytest.fixture(scope="module")
def browser():
    why = _missing()
    if why:
        msg = f"\n\n*** BROWSER CHECK NOT RUN: {why} ***\n"
        sys.stderr.write(msg)
        if REQUIRED:
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    driver = pagecheck.start_browser()
    try:
        with pagecheck.Server(HTML) as server:
            yield driver, server.url
    finally:
        pagecheck.stop_browser(driver)


def test_the_build_exists():
    why = _missing()
    if why and REQUIRED:
        pytest.fail(why, pytrace=False)
    if why:
        sys.stderr.write(f"\n\n*** BROWSER CHECK NOT RUN: {why} ***\n")
        pytest.skip(why)
    assert len(_pages()) >= 3


@pytest.mark.parametrize("page", _pages())
def test_page(browser, page):
    driver, base = browser
    shot = None
    parts = Path(page).parts
    if parts[0] == "notebooks" and len(parts) >= 2:
        shot = BUILD / "screenshots" / f"{parts[1]}.png"
    t0 = time.perf_counter()
    defects = pagecheck.check_page(driver, base + page, HTML, base, repo_url(), screenshot=shot)
    defects += pagecheck.layout_defects(driver, one_line_badges=True)
    if build_scale() != "book" and not pagecheck.scale_banner(driver).lower().startswith(
            f"{build_scale()}-scale build"):
        defects.append(f"banner: no {build_scale()}-scale banner on a {build_scale()}-scale build")
    if page in PHONE_PAGES:
        defects += pagecheck.check_phone(driver, base + page)
    print(f"{page}: {time.perf_counter() - t0:.1f} s")
    new = _triage(page, defects)
    for k in (text for p, text in known_defects() if p == page):
        if not any(k in d for d in defects) and not k.startswith("at 800 px"):
            warnings.warn(f"{page}: fixed? no defect matches {k!r}: remove it from known_defects.txt",
                          stacklevel=1)
    assert not new, f"{page}: {len(new)} defect(s)\n  " + "\n  ".join(new)


@pytest.mark.parametrize("page", _pages())
def test_page_at_800_px(browser, page):
    """At 800 px (a laptop, sidebar shown): tables fit the column, headers and badges keep
    their words whole (a badge may wrap between its words here)."""
    driver, base = browser
    defects = pagecheck.check_width(driver, base + page, HTML, base, pagecheck.LAPTOP[0])
    new = _triage(page, defects)
    assert not new, f"{page}: {len(new)} defect(s)\n  " + "\n  ".join(new)


def test_the_ledger_has_verdict_badges_to_check(browser):
    """The layout checks above have something to read on the ledger: its verdict badges."""
    driver, base = browser
    driver.get(base + "book/ledger.html")
    n = driver.execute_script("return document.querySelectorAll('article .mr-badge').length")
    heads = driver.execute_script("return [...document.querySelectorAll('article table th')].length")
    assert n > 100 and heads > 20, (n, heads)


def test_the_status_page_lists_every_chapter(browser):
    driver, base = browser
    driver.get(base + "book/status.html")
    rows = driver.execute_script(
        "return [...document.querySelectorAll('article table.mr-status tr[data-chapter]')]"
        ".map(r => [r.dataset.chapter, ...[...r.cells].map(c => c.textContent.replace(/\\s+/g, ' ').trim())]);")
    chapters = toc_chapters()
    assert len(chapters) == 19
    assert sorted(r[0] for r in rows) == sorted(c.split("/")[1] for c in chapters), rows
    for slug, _name, scale, seconds, _memory, status, *_counts in rows:
        assert scale == build_scale() and status in ("pass", "fail"), (slug, status)
        assert seconds.endswith(" s") or seconds == "-", (slug, seconds)
    assert all(r[5] == "pass" for r in rows), [r[:6] for r in rows if r[5] != "pass"]
