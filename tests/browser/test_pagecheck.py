"""The checker fails on pages with a deliberate defect, one defect a page (no book build).

Each page is a few lines of HTML laid out like a book page (an ``article.bd-article``
column 784 px wide); the clean page must give no defect, each broken page exactly
its own kind.
"""

from __future__ import annotations

import pagecheck
import pytest

pytestmark = pytest.mark.skipif(not pagecheck.browser_available(),
                                reason="Debian's chromium and chromium-driver are not installed")

PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title>
<style>body {{ margin: 0 }} article.bd-article {{ width: 784px; margin-left: 40px }}</style></head>
<body><main><article class="bd-article">
<section id="intro"><h1>A page</h1>
<p>Prose with inline code <code>price = $5</code> and a <a href="#intro">link to itself</a>,
another page <a href="other.html#there">there</a> and an external one <a href="https://example.org/">here</a>.</p>
<div style="overflow-x: auto"><table style="width: 1500px"><tr><td>wide table in a scroll box</td></tr></table></div>
<div class="cell_output"><pre>{{'a': 1, 'b': 2}}  value(3)  max |CAffNet(w=0) - fixed| f(x=1)</pre></div>
{defect}
</section></article></main></body></html>"""

DEFECTS = {
    "mathjax": '<p>The layer adds <mjx-merror data-mjx-error="Missing close brace">x</mjx-merror>.</p>',
    "raw-tex": "<ul><li><p>b_2$ so the core neurons \\(W_1 x\\) stay</p></li></ul>",
    "console": "<script>const THEBE_JS_URL = 1;</script><script>const THEBE_JS_URL = 2;</script>",
    "overflow": '<div class="cell_output"><table style="width: 1200px"><tr><td>13 columns</td></tr></table></div>',
    "clipped": '<div style="overflow: hidden"><div style="width: 1100px">soft Bellman</div></div>',
    "repr": "<div class=\"cell_output\"><pre>[Claim(id='lm-reward', statement='TBPO wins')]</pre></div>",
    "repr-claim": "<div class=\"cell_output\"><pre>[&lt;claim lm-reward-kl: reproduced&gt;]</pre></div>",
    "repr-at": '<div class="cell_output"><pre>&lt;minirepro.claims.results.Claim object at 0x7f3a2b&gt;</pre></div>',
    "link-file": '<p><a href="missing-page.html">a page that is not there</a></p>',
    "link-anchor": '<p><a href="other.html#nowhere">an anchor that is not there</a></p>',
    "image": '<p><img src="_images/none.png" alt="x" width="10" height="10"></p>',
    "button": '<div class="article-header-buttons"><a class="btn" href="https://github.com/minirepro/minirepro">Repository</a></div>',
    "binder": '<div class="article-header-buttons"><a class="btn" href="https://mybinder.org/v2/gh/x/y/main">Binder</a></div>',
}
KIND = {"raw-tex": "mathjax", "repr-claim": "repr", "clipped": "overflow", "repr-at": "repr", "link-file": "link",
        "link-anchor": "link", "image": "link", "binder": "button"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    (root / "other.html").write_text('<html><body><p id="there">x</p></body></html>')
    (root / "clean.html").write_text(PAGE.format(defect=""))
    for name, html in DEFECTS.items():
        (root / f"{name}.html").write_text(PAGE.format(defect=html))
    driver = pagecheck.start_browser()
    try:
        with pagecheck.Server(root) as server:
            yield root, server.url, driver
    finally:
        pagecheck.stop_browser(driver)


def test_a_clean_page_has_no_defect(site, tmp_path):
    root, base, driver = site
    shot = tmp_path / "clean.png"
    assert pagecheck.check_page(driver, base + "clean.html", root, base, screenshot=shot) == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_each_deliberate_defect_is_found(site, name):
    root, base, driver = site
    defects = pagecheck.check_page(driver, base + f"{name}.html", root, base)
    kinds = {d.split(":", 1)[0] for d in defects}
    expected = {KIND.get(name, name)} | ({"console"} if name == "image" else set())  # a 404 logs too
    assert kinds == expected, defects


def test_a_set_repository_allows_its_own_button(site):
    root, base, driver = site
    defects = pagecheck.check_page(driver, base + "button.html", root, base,
                                   repo_url="https://github.com/minirepro/minirepro")
    assert defects == []


def test_phone_width_finds_an_off_screen_verdict_column(site):
    root, base, driver = site
    cols = "".join(f"<th>column {i}</th>" for i in range(6))
    (root / "wide.html").write_text(PAGE.format(defect=(
        '<div style="overflow-x: auto"><table><thead><tr>' + cols + "<th>verdict</th></tr></thead>"
        "<tbody><tr>" + "<td>some long measured value</td>" * 7 + "</tr></tbody></table></div>")))
    (root / "narrow.html").write_text(PAGE.format(defect=(
        "<table><thead><tr><th>claim</th><th>verdict</th></tr></thead>"
        "<tbody><tr><td>x</td><td>reproduced</td></tr></tbody></table>")).replace("width: 784px", "max-width: 784px").replace("margin-left: 40px", ""))
    assert pagecheck.check_phone(driver, base + "wide.html")
    assert pagecheck.check_phone(driver, base + "narrow.html") == []


# ------------------------------------------------------------------ issue 47: tables read at a glance
BADGE_CSS = ("<style>.mr-badge { display: inline-block; padding: 0 6px; border-radius: 8px; }"
             " .nowrap .mr-badge { white-space: nowrap; }</style>")


def _table(th_style: str = "", badge_cell: str = "", table_class: str = "", first: str = "90%") -> str:
    return (BADGE_CSS + f'<table class="{table_class}" style="table-layout: fixed; width: 100%">'
            f'<thead><tr><th style="width: {first}">claim</th>'
            f'<th style="{th_style}">verdict</th></tr></thead><tbody><tr><td>a claim</td>'
            f'<td>{badge_cell or "<span class=mr-badge>reproduced</span>"}</td></tr></tbody></table>')


def test_a_header_squeezed_letter_by_letter_is_found(site):
    root, base, driver = site
    (root / "squeezed.html").write_text(PAGE.format(defect=_table(
        th_style="overflow-wrap: anywhere", table_class="nowrap", first="97%")))
    driver.get(base + "squeezed.html")
    found = pagecheck.layout_defects(driver)
    assert any(d.startswith('header: "verdict" breaks "verdict"') for d in found), found
    (root / "roomy.html").write_text(PAGE.format(defect=_table(th_style="width: 10%", table_class="nowrap")))
    driver.get(base + "roomy.html")
    assert pagecheck.layout_defects(driver) == []


def test_a_verdict_badge_on_two_lines_is_found_at_desktop_width_only(site):
    root, base, driver = site
    badge = '<span class="mr-badge" style="width: 70px">not reproduced</span>'
    (root / "badge.html").write_text(PAGE.format(defect=_table(th_style="width: 10%", badge_cell=badge)))
    driver.get(base + "badge.html")
    assert pagecheck.layout_defects(driver, one_line_badges=True) == [
        'badge: "not reproduced" wraps onto 2 lines in section #intro']
    assert pagecheck.layout_defects(driver, one_line_badges=False) == []  # between words: fine at 800 px
    broken = '<span class="mr-badge" style="width: 20px; overflow-wrap: anywhere">partly</span>'
    (root / "badge2.html").write_text(PAGE.format(defect=_table(th_style="width: 10%", badge_cell=broken)))
    driver.get(base + "badge2.html")
    assert any('breaks "partly"' in d for d in pagecheck.layout_defects(driver, one_line_badges=False))


def test_a_table_wider_than_the_column_at_800_px(site):
    root, base, driver = site
    fluid = PAGE.replace("width: 784px", "max-width: 784px").replace("margin-left: 40px", "margin: 0 8px")
    (root / "fixed.html").write_text(fluid.format(defect='<table style="width: 760px"><tr><td>x</td></tr></table>'))
    assert pagecheck.check_width(driver, base + "fixed.html", root, base, 1280) == []
    found = pagecheck.check_width(driver, base + "fixed.html", root, base, 600)
    assert found and all(d.startswith("at 600 px: overflow: table") for d in found), found
    assert driver.get_window_size()["width"] == pagecheck.DESKTOP[0]  # restored


def test_the_scale_banner_is_read(site):
    root, base, driver = site
    banner = ('<aside class="bd-header-announcement"><div class="bd-header-announcement__content">'
              '<span class="mr-scale-banner" data-scale="smoke"><b>Smoke-scale build.</b> x</span></div></aside>')
    (root / "banner.html").write_text(PAGE.format(defect="").replace("<main>", banner + "<main>"))
    driver.get(base + "banner.html")
    assert pagecheck.scale_banner(driver).startswith("Smoke-scale build.")
    driver.get(base + "clean.html")
    assert pagecheck.scale_banner(driver) == ""


def test_a_break_after_a_hyphen_is_not_a_broken_word(site):
    root, base, driver = site
    head = ('<table style="width: 100%; table-layout: fixed"><thead><tr><th>claim</th>'
            '<th style="width: 48px; padding: 0">zero-init</th></tr></thead><tbody><tr><td>x</td><td>1</td>'
            '</tr></tbody></table>')
    (root / "hyphen.html").write_text(PAGE.format(defect=head))
    driver.get(base + "hyphen.html")
    assert pagecheck.layout_defects(driver) == []
    assert driver.execute_script("return document.querySelectorAll('th')[1].getBoundingClientRect().height") > 30
