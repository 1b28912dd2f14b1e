"""Every page of the built book in headless Chromium (``make browser``; ``make test`` runs it
on the smoke build it has just made).

The build read is ``_build/smoke/_build/html`` (``MINIREPRO_BROWSER_BUILD=_build/book``
reads the book-scale build). It is served from ``http.server`` on 127.0.0.1 for the
duration of the test. Each page is checked by :func:`pagecheck.check_page` (MathJax,
console, overflow, reprs, links, buttons); the ledger and the papers table again at
phone width; each chapter's first screen is saved as
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
    if page in PHONE_PAGES:
        defects += pagecheck.check_phone(driver, base + page)
    print(f"{page}: {time.perf_counter() - t0:.1f} s")
    known = [text for p, text in known_defects() if p == page]
    new = [d for d in defects if not any(k in d for k in known)]
    for d in defects:
        if d not in new:
            warnings.warn(f"known defect (tests/browser/known_defects.txt) on {page}: {d}", stacklevel=1)
    for k in known:
        if not any(k in d for d in defects):
            warnings.warn(f"{page}: fixed? no defect matches {k!r}: remove it from known_defects.txt",
                          stacklevel=1)
    assert not new, f"{page}: {len(new)} defect(s)\n  " + "\n  ".join(new)
