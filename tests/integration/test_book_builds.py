"""``minirepro book -j N``: notebooks executed in parallel into the cache, then one Sphinx build.

The integration stage: whole Jupyter Book builds of a toy book. The serial and the parallel
smoke builds that two tests compare are made once for the module (``smoke_builds``); they
cannot be the smoke stage's build, which is the real book built once, in parallel only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fixtures import DATA

from minirepro import book

pytestmark = pytest.mark.integration

FRONT = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# Front matter

```{code-cell} ipython3
import os
print("scale", os.environ["MINIREPRO_SCALE"], "hashseed", os.environ["PYTHONHASHSEED"])
```
"""


def _toy_book(root: Path) -> None:
    """Two chapters (the toy, and a variant with other code cells) and an executing front page."""
    src = root / "notebooks" / "01-toy" / "toy.md"
    (root / "notebooks" / "02-toy").mkdir()
    (root / "notebooks" / "02-toy" / "toy2.md").write_text(
        src.read_text().replace("n = 5  #", "n = 7  #"))
    (root / "book").mkdir()
    (root / "book" / "intro.md").write_text("# A toy book\n\nNothing to execute here.\n")
    (root / "book" / "front.md").write_text(FRONT)
    (root / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: book/front\n"
        "  - file: notebooks/01-toy/toy\n  - file: notebooks/02-toy/toy2\n")
    (root / "_config.yml").write_text(
        "title: toy\nonly_build_toc_files: true\n"
        "exclude_patterns: ['_build/*', 'src/*', '**.ipynb_checkpoints']\n"
        "execute:\n  execute_notebooks: cache\n  timeout: 120\n  run_in_temp: false\n"
        "parse:\n  myst_enable_extensions: [colon_fence, dollarmath]\n"
        "sphinx:\n  config:\n    nb_merge_streams: true\n")


def _outputs(root: Path) -> dict[str, list]:
    """Each notebook's code cells and outputs as the build's cache holds them.

    (myst-nb's ``jupyter_execute/`` copies are written before a cache hit is merged,
    so the cache is where a build's executed notebooks are.)
    """
    from jupyter_cache import get_cache

    (cache_path,) = (root / "_build" / ".jupyter_cache").glob("smoke-*")
    cache = get_cache(str(cache_path))
    found = {}
    for path in sum(book.executable_notebooks(root), []):
        _, nb = cache.merge_match_into_notebook(book.read_notebook(path, book._md_config(root)))
        cells = []
        for c in nb.cells:
            if c.cell_type != "code":
                continue
            outs = [{k: v for k, v in o.items() if k not in ("execution_count", "metadata")}
                    for o in c.outputs]
            cells.append((c.source, outs))
        found[path.name] = cells
    return found


def test_toc_notebooks_split_into_chapters_then_front_matter(toy_book):
    _toy_book(toy_book)
    chapters, front = book.executable_notebooks(toy_book)
    assert [p.name for p in chapters] == ["toy.md", "toy2.md"]
    assert [p.name for p in front] == ["front.md"]  # intro.md has no code cell
    assert book.default_jobs(3) <= 3 and book.default_jobs(1) == 1


def test_parallel_build_is_cached_and_equals_the_serial_build(in_shared_book):
    toy_book, built = in_shared_book["root"], in_shared_book
    serial_log = built["serial_log"]
    assert serial_log.count("Executing notebook") == 3  # Sphinx executed all three itself
    serial = built["serial_outputs"]
    assert built["serial_index_existed"]

    index = built["index"]
    out = toy_book / "_build" / "smoke"
    log = built["log"]
    assert built["index_existed"]
    # every notebook came from the cache: Sphinx executed none
    assert log.count("Using cached notebook") == 3, log
    assert "Executing notebook" not in log
    record = built["record"]
    assert record["jobs"] == 2
    nbs = record["notebooks"]
    assert {v["status"] for v in nbs.values()} == {"executed"} and len(nbs) == 3
    # the front matter started only after both chapters had ended
    chapters_end = max(v["ended"] for k, v in nbs.items() if k.startswith("notebooks/"))
    assert nbs["book/front.md"]["started"] >= chapters_end
    # the same results as the serial build, cell by cell
    parallel = built["outputs"]
    assert parallel == serial and len(parallel) == 3
    assert any("stat = " in json.dumps(cells) for cells in parallel.values())
    assert "scale smoke hashseed 0" in json.dumps(parallel["front.md"])
    assert "stat = " in built["pages"][Path("notebooks") / "01-toy" / "toy.html"]
    assert index.parent == out / "_build" / "html"

    # a second build finds everything cached and executes nothing (Sphinx re-reads nothing)
    book.build("smoke", root=toy_book, strict=True, jobs=2)
    record = json.loads((out / "execution.json").read_text())
    assert {v["status"] for v in record["notebooks"].values()} == {"cached"}


def test_a_failing_chapter_fails_the_build_and_names_it(toy_book):
    _toy_book(toy_book)
    nb = toy_book / "notebooks" / "02-toy" / "toy2.md"
    nb.write_text(nb.read_text().replace("fail = False  #", "fail = True  #"))
    with pytest.raises(RuntimeError, match="toy2.md"):
        book.build("smoke", root=toy_book, jobs=2)
    reports = list((toy_book / "_build" / "smoke" / "reports").glob("*.err.log"))
    assert reports and "failing on purpose" in reports[0].read_text()
    # the front matter did not run after a failed chapter
    assert not (toy_book / "_build" / "smoke" / "build.log").exists()


# ------------------------------------------------------------------ the scale banner and the status page
def _toy_book_with_pages(root: Path) -> None:
    """The toy book with the book's own Sphinx extension and an execution-status page."""
    _toy_book(root)
    repo = Path(__file__).resolve().parents[2]
    (root / "book" / "status.md").write_text("# Execution status\n\n```{minirepro-status}\n```\n")
    toc = (root / "_toc.yml").read_text().replace("  - file: book/front\n",
                                                  "  - file: book/front\n  - file: book/status\n")
    (root / "_toc.yml").write_text(toc)
    (root / "_config.yml").write_text((root / "_config.yml").read_text().replace(
        "sphinx:\n  config:\n", f"sphinx:\n  local_extensions:\n    minirepro_pages: {repo / 'book' / '_ext'}\n"
        "  config:\n"))


def _status_rows(html: str) -> dict[str, list[str]]:
    import re

    table = html[html.index('class="mr-ledger mr-status"'):]
    table = table[:table.index("</table>")]
    rows = {}
    for m in re.finditer(r'<tr data-chapter="([^"]+)">(.*?)</tr>', table, flags=re.S):
        rows[m.group(1)] = [re.sub(r"<[^>]+>", "", c).replace("&nbsp;", " ").strip()
                            for c in re.findall(r"<td[^>]*>(.*?)</td>", m.group(2), flags=re.S)]
    return rows


@pytest.fixture(scope="module")
def smoke_builds(tmp_path_factory):
    """The toy book with pages (and a 320 MB array held by the toy chapter) built at smoke scale
    twice, as two tests of this module read it: serially (Sphinx executes), then, from scratch,
    with ``-j 2`` (pre-executed into the cache). What each build left is read at once, so a test
    that builds again later changes nothing the other reads. Set up as the ``toy_book`` fixture is.
    """
    root = tmp_path_factory.mktemp("book")
    (root / "notebooks" / "01-toy").mkdir(parents=True)
    shutil.copy(DATA / "toy.md", root / "notebooks" / "01-toy" / "toy.md")
    _toy_book_with_pages(root)
    toy = root / "notebooks" / "01-toy" / "toy.md"
    toy.write_text(toy.read_text().replace("import numpy as np\n",
                                           "import numpy as np\nballast = np.ones(40_000_000)  # 320 MB\n"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("MINIREPRO_ROOT", str(root))
        mp.delenv("MINIREPRO_SCALE", raising=False)
        mp.setenv("TQDM_DISABLE", "1")
        built = {"root": root}
        serial_index = book.build("smoke", root=root, strict=True, jobs=0)
        built["serial_index_existed"] = serial_index.exists()
        built["serial_log"] = (root / "_build" / "smoke" / "build.log").read_text()
        built["serial_outputs"] = _outputs(root)
        shutil.rmtree(root / "_build")

        index = book.build("smoke", root=root, strict=True, jobs=2)
        out = root / "_build" / "smoke"
        built["index"], built["index_existed"] = index, index.exists()
        built["log"] = (out / "build.log").read_text()
        built["record"] = json.loads((out / "execution.json").read_text())
        built["outputs"] = _outputs(root)
        built["pages"] = {p.relative_to(index.parent): p.read_text() for p in index.parent.rglob("*.html")
                          if "_static" not in p.relative_to(index.parent).parts}
        yield built


@pytest.fixture
def in_shared_book(smoke_builds, monkeypatch):
    """The environment ``toy_book`` sets, for the shared book of :func:`smoke_builds`."""
    root = smoke_builds["root"]
    monkeypatch.chdir(root)
    monkeypatch.setenv("MINIREPRO_ROOT", str(root))
    monkeypatch.delenv("MINIREPRO_SCALE", raising=False)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return smoke_builds


def test_a_smoke_build_has_a_banner_on_every_page_and_a_status_page(in_shared_book):
    import re

    smoke_builds = in_shared_book
    toy_book = smoke_builds["root"]
    pages = {rel: text for rel, text in smoke_builds["pages"].items()  # as the smoke build left them
             if 'http-equiv="Refresh"' not in text}  # not index.html's redirect
    assert len(pages) >= 5
    for rel, text in pages.items():
        assert 'class="mr-scale-banner" data-scale="smoke"' in text, rel
    rows = _status_rows(pages[Path("book") / "status.html"])
    assert list(rows) == ["01-toy", "02-toy"]
    record = smoke_builds["record"]
    for slug, cells in rows.items():
        name, scale, seconds, memory, status, verdicts, checks = cells
        assert scale == "smoke" and status == "pass" and seconds.endswith(" s")
        entry = record["notebooks"][f"notebooks/{slug}/{'toy' if slug == '01-toy' else 'toy2'}.md"]
        assert memory == f"{entry['peak_mb']:.0f} MB"
        counts = re.findall(r"(\d+) (reproduced|partly|not reproduced|not testable)", verdicts)
        assert sum(int(n) for n, _ in counts) == 2 and checks == "-", verdicts  # the toy's two claims
    big, small = (float(rows[s][3].split()[0]) for s in ("01-toy", "02-toy"))
    assert big - small > 250, (big, small)  # each notebook's own peak, not the pool's

    # a book-scale build has no banner; a cached notebook keeps its time and memory
    index = book.build("book", root=toy_book, strict=True, jobs=2)
    assert "mr-scale-banner" not in index.read_text()
    book.build("book", root=toy_book, strict=True, jobs=2)
    record = json.loads((toy_book / "_build" / "book" / "execution.json").read_text())
    entry = record["notebooks"]["notebooks/01-toy/toy.md"]
    assert entry["status"] == "cached" and entry["peak_mb"] > 300 and entry["seconds"] > 0
    rows = _status_rows((index.parent / "book" / "status.html").read_text())
    assert rows["01-toy"][1] == "book" and rows["01-toy"][3] == f"{entry['peak_mb']:.0f} MB"
