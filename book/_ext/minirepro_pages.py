"""Local Sphinx extension for the rendered book.

- Numbers (exercises, figures, tables, equations) restart in each chapter: Sphinx
  counts them across every page outside a numbered toctree, so the third chapter's
  first exercise was "Exercise 4".
- The theme's colour mode defaults to "auto" (empty, pydata's theme logs an error).
- Each inline script is included once per page: sphinx-thebe's inline
  ``const THEBE_JS_URL = ...`` (and sphinx-togglebutton's selector) reach the page
  twice (their ``env-before-read-docs`` handlers add them again, with another
  priority, so Sphinx's own de-duplication misses them); the second declaration is
  a console error on every page. The repeated line is dropped from the written HTML.
- Each chapter offers its executed notebook (``.ipynb``, from myst-nb's
  ``jupyter_execute`` folder) in the download menu.
- The style sheet ``book/_static/minirepro.css`` (wide tables wrap; the ledger's
  verdict column stays on screen at phone width).
- A build below book scale (``minirepro_scale``, set by ``minirepro book --scale``;
  else ``MINIREPRO_SCALE``) carries a banner on every page saying that its numbers are
  smoke-scale (the theme's announcement bar).
- ``{minirepro-status}`` (``book/status.md``): the execution status of this build, per
  chapter: scale, time, peak memory, pass or fail and this build's verdict counts. It is
  filled in when the page is written, after every notebook has executed, from myst-nb's
  execution data, the build's execution record (``minirepro_execution``) and the
  chapters' results records (``minirepro_results_dir``).
- ``{minirepro-verdicts}`` (at the top of each chapter): the chapter's verdicts from the
  ledger (``book/claims/<slug>.json``, read when the page is written): one row per paper
  claim with its verdict, units, power and the replications' tally, and in words a record
  that is withdrawn (``book/claims/withdrawn.yml``), out of date or missing, with what it
  waits for (:func:`minirepro.claims.page.verdicts_html`).
- ``{minirepro-summary}`` (the landing page): the book's results from the ledger, with links
  to the ledger and the status page (:func:`minirepro.claims.page.book_summary_html`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
from html import escape
from pathlib import Path

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective

BANNER = ("<b>Smoke-scale build.</b> Every number on these pages comes from the smallest "
          "preset (seconds a chapter, made to test the book), not from the book's runs: "
          "read the book-scale build for results.")


def _per_document_numbers(app, env):
    """Runs after Sphinx's own numbering (the toctree collector's ``env-get-updated``)."""
    for types in env.toc_fignumbers.values():
        for figtype, numbers in types.items():
            order = sorted(numbers, key=lambda k: numbers[k])
            types[figtype] = {k: (i + 1,) for i, k in enumerate(order)}
    return []


_INLINE_SCRIPT = re.compile(r"^\s*<script>.*</script>\s*$")


def _drop_repeated_inline_scripts(app, exc):
    """An inline ``<script>`` line repeated on a page is dropped (the second
    ``const THEBE_JS_URL`` is a SyntaxError in the console)."""
    if exc is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
        seen, out = set(), []
        for line in lines:
            if _INLINE_SCRIPT.match(line):
                if line.strip() in seen:
                    continue
                seen.add(line.strip())
            out.append(line)
        if len(out) != len(lines):
            page.write_text("".join(out), encoding="utf-8")


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    if not context.get("default_mode"):  # pydata's theme logs "Got invalid theme mode: ." otherwise
        context["default_mode"] = "auto"
    files = context.get("script_files")
    if not files:
        return
    seen, out = set(), []
    for js in files:
        key = (str(js.filename), str(js.attributes.get("body", "")) if hasattr(js, "attributes") else "")
        if key in seen:
            continue
        seen.add(key)
        out.append(js)
    files[:] = out


def _ipynb_download(app, pagename, templatename, context, doctree):
    if not pagename.startswith("notebooks/"):
        return
    buttons = context.get("header_buttons") or []
    depth = pagename.count("/")
    href = "../" * depth + f"_notebooks/{pagename}.ipynb"
    for b in buttons:
        if b.get("type") == "group" and "download" in str(b.get("label", "")).lower():
            b.setdefault("buttons", []).insert(0, {
                "type": "link", "url": href, "text": ".ipynb (executed)",
                "tooltip": "The executed notebook", "icon": "fas fa-code",
                "label": "download-notebook-button"})
            return


def _copy_notebooks(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    src = Path(app.outdir).parent / "jupyter_execute"
    dest = Path(app.outdir) / "_notebooks"
    if src.is_dir():
        for nb in src.rglob("*.ipynb"):
            rel = nb.relative_to(src)
            if rel.parts[0] == "notebooks":
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(nb, dest / rel)


def _scale(config) -> str:
    return str(config.minirepro_scale or os.environ.get("MINIREPRO_SCALE") or "book")


def _banner(app, config):
    """Below book scale, the theme's announcement bar (every page) says so."""
    scale = _scale(config)
    if scale == "book":
        return
    options = dict(config.html_theme_options or {})
    text = BANNER if scale == "smoke" else BANNER.replace("Smoke-scale", f"{scale.capitalize()}-scale", 1) \
        .replace("the smallest preset (seconds a chapter, made to test the book)", f"the {scale} preset")
    options["announcement"] = f'<span class="mr-scale-banner" data-scale="{escape(scale)}">{text}</span>'
    config.html_theme_options = options


# --------------------------------------------------------------------- the execution status page
class status_placeholder(nodes.General, nodes.Element):  # noqa: N801 - a docutils node
    """Where ``{minirepro-status}`` puts the table, once every notebook has executed."""


class StatusDirective(SphinxDirective):
    """``{minirepro-status}``: this build's execution status, per chapter."""

    has_content = False

    def run(self):
        self.env.minirepro_status_docs = getattr(self.env, "minirepro_status_docs", set()) | {self.env.docname}
        return [status_placeholder()]


def _status_docs(app, env):
    """The status page is written again in every build (its data is the build's)."""
    return sorted(getattr(env, "minirepro_status_docs", set()) & set(env.found_docs))


def _purge_status(app, env, docname):
    getattr(env, "minirepro_status_docs", set()).discard(docname)


def _merge_status(app, env, docnames, other):
    env.minirepro_status_docs = getattr(env, "minirepro_status_docs", set()) | (
        getattr(other, "minirepro_status_docs", set()) & set(docnames))


def _read_json(path: str | None) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        return {}


def status_rows(env, config) -> list[dict]:
    """One row per chapter of the build (``notebooks/NN-slug/slug``), in number order."""
    from myst_nb.sphinx_ import NbMetadataCollector

    meta = NbMetadataCollector.get_doc_data(env)
    record = _read_json(config.minirepro_execution).get("notebooks", {})
    results_dir = config.minirepro_results_dir or os.environ.get("MINIREPRO_RESULTS_DIR")
    rows = []
    for doc in sorted(d for d in env.found_docs if re.match(r"^notebooks/\d{2}-[^/]+/[^/]+$", d)):
        slug = doc.split("/")[1]
        exec_data = (meta.get(doc) or {}).get("exec_data") or {}
        rec = record.get(f"{doc}.md") or {}
        res = _read_json(str(Path(results_dir) / f"{slug}.json")) if results_dir else {}
        ok = exec_data.get("succeeded")
        if rec.get("status") == "failed":
            ok = False
        rows.append({"doc": doc, "slug": slug, "title": env.titles[doc].astext() if doc in env.titles else slug,
                     "seconds": exec_data.get("runtime") if exec_data.get("runtime") is not None else rec.get("seconds"),
                     "peak_mb": rec.get("peak_mb"), "ok": ok,
                     "how": rec.get("status") or exec_data.get("method"),
                     "executed": exec_data.get("mtime"), "claims": res.get("claims") or []})
    return rows


_WHOLE = "overflow-wrap: normal; word-break: normal"  # wrap between words, never inside one


def status_html(rows: list[dict], scale: str, href) -> str:
    """The status table: chapter, scale, time, peak memory, status, this build's verdicts of
    the paper's claims (a badge per verdict with its count) and the checks passed. Seven
    columns whose cells wrap between words only, so it fits the column at 800 px."""
    from minirepro.claims.page import CSS, SHORT, counts_of
    from minirepro.claims.rules import VERDICTS

    cols = ("chapter", "scale", "time", "peak memory", "status", "verdicts of the paper's claims",
            "checks passed")
    head = "<tr>" + "".join(f'<th style="{_WHOLE}">{c}</th>' for c in cols) + "</tr>"
    body = []
    totals = {v: 0 for v in VERDICTS}
    for r in rows:
        paper = [c for c in r["claims"] if c.get("kind", "paper") == "paper"]
        checks = [c for c in r["claims"] if c.get("kind", "paper") == "check"]
        cnt = counts_of(paper)
        when = (_dt.datetime.fromtimestamp(r["executed"]).strftime("%Y-%m-%d %H:%M")
                if r["executed"] else "")
        how = {"executed": "executed in this build", "cached": f"from the cache (executed {when})",
               "cache": f"executed {when}"}.get(r["how"] or "", r["how"] or "")
        secs = f'<span title="{escape(how)}">{r["seconds"]:.0f}&nbsp;s</span>' if r["seconds"] is not None else "-"
        mem = f'{r["peak_mb"]:.0f}&nbsp;MB' if r["peak_mb"] else "-"
        state = ('<span class="mr-badge mr-rep">pass</span>' if r["ok"] is True else
                 '<span class="mr-badge mr-notrep">fail</span>' if r["ok"] is False else "not run")
        verdicts = " ".join(f'<span class="mr-badge mr-{CSS[v]}" style="white-space: nowrap">'
                            f"{cnt[v]}&nbsp;{escape(SHORT[v])}</span>" for v in VERDICTS if cnt[v])
        for v in VERDICTS:
            totals[v] += cnt[v]
        passed = sum(c.get("verdict") == VERDICTS[0] for c in checks)
        cells = [f'<a href="{escape(href(r["doc"]))}">{escape(r["title"].split(":")[0])}</a>',
                 escape(scale), secs, mem, state, verdicts or ("-" if not r["claims"] else "none"),
                 f"{passed}/{len(checks)}" if checks else "-"]
        body.append(f'<tr data-chapter="{escape(r["slug"])}">'
                    + "".join(f'<td style="{_WHOLE}">{c}</td>' for c in cells) + "</tr>")
    n_ok = sum(r["ok"] is True for r in rows)
    total = sum(r["seconds"] or 0 for r in rows)
    all_verdicts = " ".join(f'<span class="mr-badge mr-{CSS[v]}" style="white-space: nowrap">'
                            f"{n}&nbsp;{escape(SHORT[v])}</span>" for v, n in totals.items() if n)
    foot = (f"<tr class='mr-total'><td style=\"{_WHOLE}\">{len(rows)} chapters</td><td></td>"
            f"<td>{total:.0f}&nbsp;s</td><td></td><td>{n_ok}&nbsp;pass</td>"
            f"<td style=\"{_WHOLE}\">{all_verdicts}</td><td></td></tr>")
    return (f'<table class="mr-ledger mr-status"><thead>{head}</thead>'
            f'<tbody>{"".join(body)}{foot}</tbody></table>')


class StatusTransform(SphinxPostTransform):
    """Replace ``{minirepro-status}``'s placeholder when the page is written."""

    default_priority = 8

    def run(self, **kwargs) -> None:
        for node in list(self.document.findall(status_placeholder)):
            rows = status_rows(self.env, self.config)
            builder = self.app.builder
            here = self.env.docname

            def href(doc, builder=builder, here=here):
                return builder.get_relative_uri(here, doc) if hasattr(builder, "get_relative_uri") else doc

            html = status_html(rows, _scale(self.config), href)
            node.replace_self(nodes.raw("", html, format="html"))


# --------------------------------------------------------- verdict boxes and the book's summary
class ledger_placeholder(nodes.General, nodes.Element):  # noqa: N801 - a docutils node
    """Where ``{minirepro-verdicts}`` or ``{minirepro-summary}`` puts its HTML, when the page is written."""


_LEDGER: dict[str, list] = {}


def load_entries(root: str | None = None) -> list[dict]:
    """The ledger's entries (:func:`minirepro.claims.ledger.load`), read once per build."""
    key = root or ""
    if key not in _LEDGER:
        from minirepro.claims import ledger

        _LEDGER[key] = ledger.load(Path(root) if root else None)
    return _LEDGER[key]


def _short_names(root: str | None = None) -> dict[str, str]:
    """Chapter -> the paper's short name (``book/papers.yml``), for the landing page."""
    try:
        from minirepro.claims import ledger

        return {p["doc"].split("/")[-1]: str(p["name"]) for p in ledger.papers(Path(root) if root else None)
                if p.get("doc")}
    except (OSError, ValueError, KeyError):
        return {}


def _forget_ledger(app):
    _LEDGER.clear()


def _chapter_of(docname: str) -> str | None:
    """``notebooks/07-caffnet/caffnet`` -> ``caffnet``."""
    m = re.match(r"^notebooks/\d{2}-[^/]+/([^/]+)$", docname)
    return m.group(1) if m else None


class _LedgerDirective(SphinxDirective):
    kind = ""

    def run(self):
        env = self.env
        env.minirepro_ledger_docs = getattr(env, "minirepro_ledger_docs", set()) | {env.docname}
        node = ledger_placeholder()
        node["kind"] = self.kind
        node["chapter"] = self.arguments[0] if self.arguments else _chapter_of(env.docname)
        if self.kind == "verdicts" and not node["chapter"]:
            raise self.error("{minirepro-verdicts} outside a chapter page (notebooks/NN-slug/name) "
                             "needs the chapter's name as its argument")
        return [node]


class VerdictsDirective(_LedgerDirective):
    """``{minirepro-verdicts}``: the chapter's verdicts from the ledger (argument: the chapter's
    name; default, the page's chapter)."""

    kind = "verdicts"
    optional_arguments = 1
    has_content = False


class SummaryDirective(_LedgerDirective):
    """``{minirepro-summary}``: the book's results from the ledger."""

    kind = "summary"
    has_content = False


def _ledger_docs(app, env):
    """Pages with a verdict box are written again in every build (the ledger may have changed)."""
    return sorted(getattr(env, "minirepro_ledger_docs", set()) & set(env.found_docs))


def _purge_ledger(app, env, docname):
    getattr(env, "minirepro_ledger_docs", set()).discard(docname)


def _merge_ledger(app, env, docnames, other):
    env.minirepro_ledger_docs = getattr(env, "minirepro_ledger_docs", set()) | (
        getattr(other, "minirepro_ledger_docs", set()) & set(docnames))


class LedgerTransform(SphinxPostTransform):
    """Fill in the verdict boxes and the summary when the page is written."""

    default_priority = 8

    def run(self, **kwargs) -> None:
        from minirepro.claims import page

        builder, here = self.app.builder, self.env.docname

        def href(doc):
            return builder.get_relative_uri(here, doc) if hasattr(builder, "get_relative_uri") else doc

        for node in list(self.document.findall(ledger_placeholder)):
            entries = load_entries(self.config.minirepro_root or None)
            if node["kind"] == "summary":
                html = page.book_summary_html(entries, href("book/ledger"), href("book/status"),
                                              _short_names(self.config.minirepro_root or None))
            else:
                name = node["chapter"]
                entry = next((e for e in entries if e["chapter"] == name), None)
                html = page.verdicts_html(entry, f"{href('book/ledger')}#ledger-{name}", name)
            node.replace_self(nodes.raw("", html, format="html"))


def setup(app):
    app.add_config_value("minirepro_scale", "", "html")
    app.add_config_value("minirepro_results_dir", "", "html")
    app.add_config_value("minirepro_execution", "", "html")
    app.add_config_value("minirepro_root", "", "html")  # the ledger's repository (tests); default: this one
    app.connect("config-inited", _banner)
    app.add_node(status_placeholder, html=(lambda self, node: None, lambda self, node: None))
    app.add_directive("minirepro-status", StatusDirective)
    app.add_post_transform(StatusTransform)
    app.add_node(ledger_placeholder, html=(lambda self, node: None, lambda self, node: None))
    app.add_directive("minirepro-verdicts", VerdictsDirective)
    app.add_directive("minirepro-summary", SummaryDirective)
    app.add_post_transform(LedgerTransform)
    app.connect("env-updated", _ledger_docs)
    app.connect("env-purge-doc", _purge_ledger)
    app.connect("env-merge-info", _merge_ledger)
    app.connect("builder-inited", _forget_ledger)
    app.connect("env-updated", _status_docs)
    app.connect("env-purge-doc", _purge_status)
    app.connect("env-merge-info", _merge_status)
    app.connect("builder-inited", _static_path)
    app.connect("env-get-updated", _per_document_numbers, priority=900)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("html-page-context", _ipynb_download, priority=900)
    app.connect("build-finished", _copy_notebooks)
    app.connect("build-finished", _drop_repeated_inline_scripts)
    app.add_css_file("minirepro.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def _static_path(app):
    app.config.html_static_path.append(str(Path(__file__).resolve().parents[1] / "_static"))
