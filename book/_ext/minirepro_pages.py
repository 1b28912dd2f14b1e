"""Local Sphinx extension for the rendered book (issue 27).

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
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path


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


def setup(app):
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
