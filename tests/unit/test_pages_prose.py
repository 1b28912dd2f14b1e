"""A chapter's prose names only the models and artifacts its notebook loads.

A page that says "the book model ``lm-book``" while its code loads another model misleads
the reader about what the verdicts rest on. The names checked are every registered artifact
(:func:`minirepro.core.artifacts.registry`) and the substrate's models (``smollm2-135m``,
``lm-book``, ``lm-book-opt``, and the retired ``lm-v2`` family: ``lm-v2-book`` counts as
``lm-v2``). What a chapter loads is every such name in its code cells, or in its paper's
package (``src/minirepro/papers/<method>/``, which its code cells import): a string in its
code (``NAME = "ali-book"``, a default) or a value of its ``Config`` presets, where the
substrate preset (``substrate="book"``) stands for its artifact (``lm-book``).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from functools import cache
from pathlib import Path

import jupytext
import pytest

from minirepro.chapters import discover

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = discover(ROOT)
EXTRA = ("smollm2-135m", "lm-book", "lm-book-opt", "lm-v2")


@cache
def names() -> tuple[str, ...]:
    from minirepro.core import artifacts

    return tuple(sorted(set(artifacts.registry()) | set(EXTRA), key=len, reverse=True))


@cache
def pattern() -> re.Pattern:
    alts = "|".join(re.escape(n) + (r"(?:-[a-z0-9]+)*" if n == "lm-v2" else "") for n in names())
    return re.compile(rf"(?<![\w.-])({alts})(?![\w-])")


def mentioned(text: str) -> set[str]:
    """The artifact names in ``text`` (``lm-v2-*`` as ``lm-v2``)."""
    return {"lm-v2" if m.startswith("lm-v2") else m for m in pattern().findall(text)}


def _strings(path: Path) -> set[str]:
    """String constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs}


def _preset_names(pkg: str) -> set[str]:
    """Artifact names among the preset values of the package's configs (every ``ScaledConfig``
    its modules define: ``Config``, and a second setting's own, as TBPO's LM setting)."""
    from minirepro.core.lm.substrate import SUBSTRATES
    from minirepro.core.scale import ScaledConfig

    out = set()
    for path in sorted((ROOT / "src" / "minirepro" / "papers" / pkg).rglob("*.py")):
        rel = path.relative_to(ROOT / "src").with_suffix("")
        module = importlib.import_module(".".join(p for p in rel.parts if p != "__init__"))
        for config in vars(module).values():
            if not (isinstance(config, type) and issubclass(config, ScaledConfig)
                    and config.__module__ == module.__name__ and dataclasses.is_dataclass(config)):
                continue
            for scale in sorted(set(config.PRESETS) | {"book"}):
                cfg = config.preset(scale)
                for field in dataclasses.fields(cfg):
                    value = getattr(cfg, field.name)
                    if field.name == "substrate" and value in SUBSTRATES:
                        value = SUBSTRATES[value]
                    if isinstance(value, str) and pattern().fullmatch(value):
                        out |= mentioned(value)
    return out


def loaded(code: str) -> set[str]:
    """The artifact names a chapter's code cells (and the packages they import) can load."""
    out = mentioned(code)
    packages = set(re.findall(r"from minirepro\.papers import (\w+)", code))
    packages |= set(re.findall(r"minirepro\.papers\.(\w+)", code))
    for pkg in sorted(packages):
        folder = ROOT / "src" / "minirepro" / "papers" / pkg
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.py")):
            out |= {m for s in _strings(path) if pattern().fullmatch(s) for m in mentioned(s)}
        out |= _preset_names(pkg)
    return out


def prose_and_code(chapter) -> tuple[str, str]:
    nb = jupytext.read(chapter.path)
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return prose, code


def test_the_scan_finds_names_and_only_whole_names():
    assert mentioned("the book model `lm-book` and artifacts/ali-book/") == {"lm-book", "ali-book"}
    assert mentioned("lm-book-opt, not lm-book") == {"lm-book-opt", "lm-book"}
    assert mentioned("`lm-v2-book` (since renamed)") == {"lm-v2"}
    assert mentioned("xlm-book, lm-books, minirepro.lm-book") == set()
    prose, code = prose_and_code(next(c for c in CHAPTERS if c.name == "ali"))
    assert "ali-book" in loaded(code)  # through artifact.NAME, not a literal in a cell
    prose, code = prose_and_code(next(c for c in CHAPTERS if c.name == "relaycaching"))
    assert {"smollm2-135m", "lm-smoke"} <= loaded(code)  # through the presets' model names
    prose, code = prose_and_code(next(c for c in CHAPTERS if c.name == "tbpo"))
    assert "lm-smoke" in loaded(code) and "lm-book" not in loaded(code)  # the LM setting's config


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_the_prose_names_only_what_the_notebook_loads(chapter):
    prose, code = prose_and_code(chapter)
    extra = mentioned(prose) - loaded(code)
    assert not extra, (f"{chapter.slug}: the page names {sorted(extra)}, which its notebook does not "
                       f"load (it loads {sorted(loaded(code)) or 'none of them'})")
