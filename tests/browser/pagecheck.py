"""The rendered book read in a real browser: Debian's headless Chromium through selenium.

``check_page(driver, url, html_root, repo_url)`` loads one page, waits for MathJax,
and returns its defects, one line each (empty: the page is fine):

- ``mathjax``: a MathJax error (``mjx-merror``), or raw ``$``, ``\\(``, ``\\[`` left
  in the visible text outside code and outputs (math that was never typeset);
- ``console``: an error in the browser console (a script error, a missing file);
- ``overflow``: an element wider than the content column that is not inside a
  scroll container (it is cut off or pushes the page sideways);
- ``repr``: an object's repr (``Claim(id=...``, ``<... object at 0x...>``) in a cell output;
- ``link``: a local link or anchor (``a[href]``, ``img[src]``) that does not resolve;
- ``button``: a button (link) to a repository, Binder or Colab while the book's
  repository is unset, or to another repository than the one set.

``check_phone(driver, url)`` reloads a page at phone width and reports a table
column headed "verdict" that lies outside the screen.

``layout_defects(driver, one_line_badges)`` reads the loaded page's tables (issue 47):

- ``header``: a table header with a word broken across lines (a column squeezed until
  its header wraps letter by letter: "not / re / pr / od..."); a break after a hyphen
  or a slash is a line break, not a broken word;
- ``badge``: a verdict badge (``.mr-badge``) with a word broken across lines, or, with
  ``one_line_badges`` (the desktop width), a badge on more than one line.

``check_width(driver, url, ..., width)`` reloads a page at another window width (800 px:
a laptop with the sidebar shown) and returns its overflow and layout defects.
``scale_banner(driver)`` is the text of the loaded page's scale banner (empty if none).

The browser is started by :func:`start_browser` (chromedriver at
``/usr/bin/chromedriver``; never a downloaded browser).
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import tempfile
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1"]
DESKTOP = (1280, 900)
PHONE = (390, 844)
# Where a launch or repository button leads: none of these may appear while the repository is unset.
REPO_HOSTS = ("github.com", "gitlab.com", "mybinder.org", "colab.research.google.com",
              "binder", "jupyterhub")
PLACEHOLDER_REPO = "github.com/minirepro/minirepro"
# a dataclass or namedtuple repr (two keyword fields at least: ``Claim(id='x', statement=...``),
# or the default ``<module.Class object at 0x...>``
REPR_RE = re.compile(r"\b[A-Z][A-Za-z0-9_]*\([a-z_][a-z0-9_]*=[^,()\n]*, ?[a-z_][a-z0-9_]*="
                     r"|<[A-Za-z_][\w.]* object at 0x[0-9a-f]+>"
                     r"|<claim [\w.-]+: [\w ]+>")  # minirepro.claims.results.Claim's short repr
TEX_RE = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$")


def browser_available() -> bool:
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


def start_browser(width: int = DESKTOP[0], height: int = DESKTOP[1]):
    """Headless Debian Chromium with a fresh profile; ``driver.profile_dir`` is removed by
    :func:`stop_browser`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="minirepro-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument(f"--window-size={width},{height}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    driver.profile_dir = profile
    return driver


def stop_browser(driver) -> None:
    try:
        driver.quit()
    finally:
        shutil.rmtree(getattr(driver, "profile_dir", ""), ignore_errors=True)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request log on the test's output
        pass


class Server:
    """``http.server`` on 127.0.0.1 (a free port) serving ``root``, in a thread."""

    def __init__(self, root: Path):
        handler = functools.partial(_Quiet, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("id", "name") and v:
                self.ids.add(v)


@functools.cache
def _page_ids(path: str) -> frozenset[str]:
    p = _Ids()
    p.feed(Path(path).read_text(encoding="utf-8", errors="replace"))
    return frozenset(p.ids)


# Run in the page: everything measured in one pass, returned as JSON-able data.
_PAGE_JS = r"""
const done = arguments[arguments.length - 1];
const measure = () => {
  const col = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const out = {merror: [], text: [], overflow: [], repr: [], links: [], buttons: []};
  const colRect = col.getBoundingClientRect();
  const describe = (el) => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    if (el.classList.length) s += '.' + [...el.classList].slice(0, 3).join('.');
    let sec = el.closest('section[id]');
    return s + (sec ? ' in section #' + sec.id : '');
  };
  for (const e of col.querySelectorAll('mjx-merror, .MathJax_Error, [data-mjx-error]'))
    out.merror.push(describe(e) + ': ' + (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 120));
  // visible prose text: not code, not outputs, not typeset math, not hidden
  const skip = 'pre, code, kbd, samp, script, style, textarea, mjx-container, .MathJax, .highlight, ' +
               '.cell_output, .output, .math, .headerlink, .toggle-details__container';
  const walker = document.createTreeWalker(col, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const p = n.parentElement;
    if (!p || p.closest(skip)) continue;
    if (!/\\\(|\\\)|\\\[|\\\]|\$/.test(n.textContent)) continue;
    if (!p.getClientRects().length) continue;
    out.text.push(describe(p) + ': "' + n.textContent.trim().slice(0, 120) + '"');
  }
  // elements wider than the column, outside a scroll container
  const scrolls = (el) => {
    for (let a = el.parentElement; a && a !== col.parentElement; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if ((ox === 'auto' || ox === 'scroll') && a.getBoundingClientRect().right <= colRect.right + 2
          && a.getBoundingClientRect().left >= colRect.left - 2) return true;
    }
    return false;
  };
  const clips = (el) => {
    for (let a = el.parentElement; a && a !== col.parentElement; a = a.parentElement)
      if (getComputedStyle(a).overflowX === 'hidden' || getComputedStyle(a).overflowX === 'clip') return a;
    return null;
  };
  const reported = [];
  for (const el of col.querySelectorAll('*')) {
    if (reported.some(r => r.contains(el))) continue;
    if (el.closest('mjx-assistive-mml')) continue;  // MathJax's hidden copy for screen readers
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if (r.right <= colRect.right + 2 && r.left >= colRect.left - 2) continue;
    if (getComputedStyle(el).position === 'fixed') continue;
    if (scrolls(el)) continue;
    const c = clips(el);
    out.overflow.push(describe(el) + ': ' + Math.round(r.width) + ' px wide, column ' +
                      Math.round(colRect.width) + ' px' + (c ? ' (cut off by ' + describe(c) + ')' : ''));
    reported.push(el);
  }
  for (const e of col.querySelectorAll('.cell_output, .output')) {
    if (e.parentElement && e.parentElement.closest('.cell_output, .output')) continue;
    out.repr.push([describe(e), e.textContent]);
  }
  for (const a of document.querySelectorAll('a[href]'))
    out.links.push([a.getAttribute('href'), a.href, describe(a),
                    !!a.closest('.article-header-buttons, .header-article-items, .bd-header-article, .dropdown-menu, .btn')]);
  for (const i of document.querySelectorAll('img[src]'))
    out.links.push([i.getAttribute('src'), i.src, describe(i), false]);
  done(out);
};
const ready = () => (window.MathJax && MathJax.startup && MathJax.startup.promise)
  ? MathJax.startup.promise.then(measure, (e) => { measure(); }) : measure();
if (document.readyState === 'complete') setTimeout(ready, 50);
else window.addEventListener('load', () => setTimeout(ready, 50));
"""


def _link_problem(href: str, absolute: str, base: str, html_root: Path, here: Path) -> str | None:
    """Why a local link does not resolve (None when it does or is not local)."""
    if not absolute.startswith(base):
        return None  # external, mailto:, javascript: ...
    parts = urlsplit(absolute)
    rel = unquote(parts.path[len(urlsplit(base).path):])
    target = html_root / rel if rel else html_root / "index.html"
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return f"{href} -> no file {target.relative_to(html_root) if target.is_relative_to(html_root) else target}"
    if parts.fragment and target.suffix == ".html":
        frag = unquote(parts.fragment)
        if frag not in _page_ids(str(target)):
            return f"{href} -> no anchor #{frag} in {target.relative_to(html_root)}"
    return None


def _button_problem(absolute: str, repo_url: str, is_button: bool = True) -> str | None:
    """A header button (repository, issues, launchers) that leads nowhere real. Links in
    the text (a cited project's repository) are not buttons and may point anywhere."""
    if PLACEHOLDER_REPO in absolute and PLACEHOLDER_REPO not in (repo_url or ""):
        return "points at the placeholder repository"
    if not is_button:
        return None
    host = urlsplit(absolute).netloc
    if not repo_url:
        if any(h in host for h in REPO_HOSTS):
            return "points at a repository or launcher while the repository is unset"
        return None
    if "github.com" in host or "gitlab.com" in host:
        return None if absolute.startswith(repo_url.rstrip("/")) else f"is not under {repo_url}"
    return None


def console_errors(driver) -> list[str]:
    try:
        logs = driver.get_log("browser")
    except Exception:  # noqa: BLE001 - a driver without logs: nothing to report
        return []
    return [e["message"] for e in logs if e.get("level") == "SEVERE"
            and "/favicon.ico " not in e["message"]]  # the browser asks for one on its own


def check_page(driver, url: str, html_root: Path, base: str, repo_url: str = "",
               screenshot: Path | None = None) -> list[str]:
    """Load ``url`` (a page under ``base``, served from ``html_root``); return its defects."""
    console_errors(driver)  # drop what an earlier page left
    driver.get(url)
    data = driver.execute_async_script(_PAGE_JS)
    here = html_root / unquote(urlsplit(url).path[len(urlsplit(base).path):])
    defects = [f"mathjax: MathJax error at {m}" for m in data["merror"]]
    defects += [f"mathjax: raw TeX in the text at {t}" for t in data["text"]]
    defects += [f"console: {m}" for m in console_errors(driver)]
    defects += [f"overflow: {o}" for o in data["overflow"]]
    for where, text in data["repr"]:
        for m in REPR_RE.finditer(text):
            s = text[max(0, m.start() - 20):m.end() + 40].replace("\n", " ")
            defects.append(f"repr: object repr in the output {where}: ...{s}...")
            break
    seen = set()
    for href, absolute, where, is_button in data["links"]:
        if (href, absolute) in seen:
            continue
        seen.add((href, absolute))
        p = _link_problem(href, absolute, base, html_root, here)
        if p:
            defects.append(f"link: {where}: {p}")
        b = _button_problem(absolute, repo_url, is_button)
        if b:
            defects.append(f"button: {where} ({absolute}) {b}")
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(str(screenshot))
    return defects


_PHONE_JS = r"""
const done = arguments[arguments.length - 1];
const go = () => {
  const bad = [];
  const vw = document.documentElement.clientWidth;
  for (const table of document.querySelectorAll('article table')) {
    const heads = [...table.querySelectorAll('thead th, tr:first-child th')];
    heads.forEach((th) => {
      if (!/verdict/i.test(th.textContent)) return;
      const r = th.getBoundingClientRect();
      if (r.right > vw + 1 || r.left < -1 || r.width < 4)
        bad.push('column "' + th.textContent.trim() + '" at ' + Math.round(r.left) + '-' +
                 Math.round(r.right) + ' px, screen ' + vw + ' px');
    });
  }
  done(bad);
};
if (document.readyState === 'complete') setTimeout(go, 50);
else window.addEventListener('load', () => setTimeout(go, 50));
"""


def check_phone(driver, url: str) -> list[str]:
    """At phone width: a "verdict" column that lies off-screen (the reader must find it)."""
    driver.set_window_size(*PHONE)
    try:
        driver.get(url)
        return [f"phone: {b}" for b in driver.execute_async_script(_PHONE_JS)]
    finally:
        driver.set_window_size(*DESKTOP)


def html_pages(html_root: Path) -> list[Path]:
    """Every HTML page of the build (not Sphinx's own search/genindex pages' assets)."""
    skip = {"_static", "_sources", "_images", "_sphinx_design_static", "reports", "_downloads"}
    return sorted(p for p in html_root.rglob("*.html") if not skip & set(p.relative_to(html_root).parts))


# Run in the page: table headers and verdict badges, word by word (Range rectangles).
_LAYOUT_JS = r"""
const done = arguments[arguments.length - 1];
const oneLine = arguments[0];
const go = () => {
  const col = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const out = [];
  const lines = (node, start, end) => {
    const r = document.createRange();
    r.setStart(node, start); r.setEnd(node, end);
    const tops = new Set();
    for (const q of r.getClientRects()) if (q.width > 0.5) tops.add(Math.round(q.top));
    return tops.size;
  };
  const brokenWords = (el) => {
    const bad = [];
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (!n.parentElement || !n.parentElement.getClientRects().length) continue;
      for (const m of n.textContent.matchAll(/[^\s\-\u2010\u2013\/]+[\-\u2010\u2013\/]?/g))  // a break after a hyphen or slash is fine
        if (m[0].length > 1 && lines(n, m.index, m.index + m[0].length) > 1) bad.push(m[0]);
    }
    return bad;
  };
  const where = (el) => { const s = el.closest('section[id]'); return s ? ' in section #' + s.id : ''; };
  for (const th of col.querySelectorAll('table th')) {
    const bad = brokenWords(th);
    if (bad.length) out.push('header: "' + th.textContent.trim().slice(0, 40) + '" breaks "' + bad[0] +
                             '" across lines (' + Math.round(th.getBoundingClientRect().width) + ' px wide)' + where(th));
  }
  for (const b of col.querySelectorAll('.mr-badge')) {
    if (!b.getClientRects().length) continue;
    const bad = brokenWords(b);
    const text = b.textContent.trim();
    if (bad.length) { out.push('badge: "' + text + '" breaks "' + bad[0] + '" across lines' + where(b)); continue; }
    if (oneLine) {
      const walker = document.createTreeWalker(b, NodeFilter.SHOW_TEXT);
      let n = walker.nextNode();
      while (n && !n.textContent.trim()) n = walker.nextNode();
      if (n && lines(n, 0, n.textContent.length) > 1)
        out.push('badge: "' + text + '" wraps onto ' + lines(n, 0, n.textContent.length) + ' lines' + where(b));
    }
  }
  done(out);
};
const ready = () => (window.MathJax && MathJax.startup && MathJax.startup.promise)
  ? MathJax.startup.promise.then(go, (e) => { go(); }) : go();
if (document.readyState === 'complete') setTimeout(ready, 50);
else window.addEventListener('load', () => setTimeout(ready, 50));
"""


def layout_defects(driver, one_line_badges: bool = True) -> list[str]:
    """Table headers and verdict badges of the loaded page (see the module's docstring)."""
    return list(driver.execute_async_script(_LAYOUT_JS, bool(one_line_badges)))


def scale_banner(driver) -> str:
    """The text of the loaded page's scale banner (the theme's announcement bar), or ``""``."""
    return driver.execute_script(
        "const b = document.querySelector('.bd-header-announcement .mr-scale-banner');"
        "return b && b.getClientRects().length ? b.textContent.trim() : '';")


LAPTOP = (800, 900)


def check_width(driver, url: str, html_root: Path, base: str, width: int = LAPTOP[0],
                one_line_badges: bool = False) -> list[str]:
    """Reload ``url`` at ``width`` px: its overflow defects (tables that do not fit the
    column) and its layout defects, each prefixed with the width."""
    driver.set_window_size(width, DESKTOP[1])
    try:
        console_errors(driver)
        driver.get(url)
        data = driver.execute_async_script(_PAGE_JS)
        found = [f"overflow: {o}" for o in data["overflow"]] + layout_defects(driver, one_line_badges)
        return [f"at {width} px: {d}" for d in found]
    finally:
        driver.set_window_size(*DESKTOP)
