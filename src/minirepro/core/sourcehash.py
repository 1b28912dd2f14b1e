"""A hash of Python code that ignores docstrings, comments and formatting.

:func:`source_hash` is what a trained artifact (and the LM cache key) records about the
code that made it: edit a docstring, a comment or the line breaks and the hash stays;
change what the code does and it moves.

The code is parsed with :mod:`ast`, every bare string statement (module, class and
function docstrings, and attribute docstrings) is dropped, and the tree is written out
by a small serializer of our own rather than :func:`ast.dump`, whose output changed in
Python 3.13 (empty fields left out). Ours always leaves out ``None`` and empty-list
fields, so fields that newer Pythons add with empty defaults (``type_params`` in 3.12)
do not change the hash of code that does not use them. Every file of this repository
normalises to the same text under Python 3.11, 3.12 and 3.13 (a unit test pins one hash).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType


class SourceError(ValueError):
    """A module named to :func:`source_hash` cannot be found or has no source file."""


def normalised_source(code: str, filename: str = "<string>") -> str:
    """``code`` as a canonical string: its AST without docstrings, comments or layout."""
    tree = ast.parse(code, filename=filename)
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                kept = [s for s in body if not (isinstance(s, ast.Expr)
                                               and isinstance(s.value, ast.Constant)
                                               and isinstance(s.value.value, str))]
                setattr(node, field, kept)
    return _dump(tree)


def _dump(node: object) -> str:
    if isinstance(node, ast.AST):
        parts = [type(node).__name__]
        for name in node._fields:
            value = getattr(node, name, None)
            if value is None or (isinstance(value, list) and not value):
                continue
            parts.append(f"{name}={_dump(value)}")
        return "(" + " ".join(parts) + ")"
    if isinstance(node, list):
        return "[" + ",".join(_dump(x) for x in node) + "]"
    return repr(node)  # constants: str, bytes, int, float, complex, bool, Ellipsis


def module_files(module: str | ModuleType) -> dict[str, Path]:
    """The source files of ``module``, keyed by its dotted name (for a package: every ``.py``
    file below it, keyed ``package:relative/path.py``).

    ``module`` is a module object or a dotted name; a name is looked up in
    ``sys.modules`` first, else found (not executed) with :func:`importlib.util.find_spec`.
    """
    if isinstance(module, ModuleType):
        name, mod = module.__name__, module
    elif isinstance(module, str):
        name, mod = module, sys.modules.get(module)
    else:
        raise TypeError(f"source_hash takes module names or modules, got {type(module).__name__}")
    if mod is not None:
        file, pkg_dirs = getattr(mod, "__file__", None), getattr(mod, "__path__", None)
    else:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError) as exc:
            raise SourceError(f"cannot find module {name!r}: {exc}") from exc
        if spec is None:
            raise SourceError(f"cannot find module {name!r}")
        file, pkg_dirs = spec.origin, spec.submodule_search_locations
    if not file or not str(file).endswith(".py"):
        raise SourceError(f"module {name!r} has no Python source file (got {file!r})")
    if pkg_dirs:  # a package: all of its code
        root = Path(file).parent
        return {f"{name}:{p.relative_to(root).as_posix()}": p
                for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}
    return {name: Path(file)}


def source_hash(modules: str | ModuleType | Iterable[str | ModuleType]) -> str:
    """SHA-256 (hex) of the modules' code, docstrings and comments stripped.

    Args:
        modules: one module or several, each a dotted name (``"minirepro.core.lm.models"``)
            or a module object. A package counts with every ``.py`` file below it. The
            order and repetitions do not matter. Files are read from disk at each call,
            so an edit shows even before the module is re-imported.
    """
    if isinstance(modules, (str, ModuleType)):
        modules = [modules]
    entries: dict[str, str] = {}
    for module in modules:
        for key, path in module_files(module).items():
            entries[key] = normalised_source(path.read_text(encoding="utf-8"), str(path))
    digest = hashlib.sha256()
    for key in sorted(entries):
        digest.update(f"{key}\n{entries[key]}\n".encode())
    return digest.hexdigest()
