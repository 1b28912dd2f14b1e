"""The chapter registry: chapters, their notebooks and their parameters.

A chapter is a folder ``notebooks/NN-slug/`` whose main notebook is
``notebooks/NN-slug/<slug>.md`` (MyST markdown, jupytext). Its name is the slug
(``caffnet``); ``07-caffnet`` is accepted too. The first code cell tagged
``parameters`` declares the parameters::

    scale = os.environ.get("MINIREPRO_SCALE", "book")  # size preset {smoke, book, full}
    seed = 0  # base random seed
    method = "mocl"  # the method to run {mocl, gpm, ewc}
    n_train: int | None = None  # training points (None: the scale's preset)

Each parameter's type comes from its literal default (or its annotation when the
default is ``None``); ``{a, b, c}`` at the end of its comment lists the allowed
values.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from minirepro.core.scale import SCALES


class ChapterError(ValueError):
    """An unknown chapter, an unknown parameter or a value of the wrong type."""


@dataclass(frozen=True)
class Parameter:
    """One parameter of a chapter's ``parameters`` cell."""

    name: str
    default: Any
    type: str  # "int", "float", "str", "bool", "list[int]", "list[float]", "list[str]"
    optional: bool = False  # None is allowed
    comment: str = ""
    choices: tuple[str, ...] | None = None

    def describe(self) -> str:
        kind = self.type + (" | None" if self.optional else "")
        extra = f" one of {{{', '.join(self.choices)}}}" if self.choices else ""
        return f"{self.name} ({kind}{extra}) = {self.default!r}"

    def coerce(self, value: Any) -> Any:
        """Check ``value`` (a Python value or a command-line string) and convert it."""
        if value is None or (isinstance(value, str) and value in {"None", "none"} and self.optional):
            if self.optional:
                return None
            raise ChapterError(f"parameter {self.name!r} cannot be None; expected {self.type}")
        try:
            out = _coerce(self.type, value)
        except (TypeError, ValueError) as exc:
            raise ChapterError(f"parameter {self.name!r} expects {self.type}, got {value!r}") from exc
        if self.choices is not None:
            items = out if isinstance(out, list) else [out]
            bad = [v for v in items if str(v) not in self.choices]
            if bad:
                raise ChapterError(f"parameter {self.name!r} must be one of "
                                   f"{', '.join(self.choices)}; got {bad[0]!r}")
        return out


_BOOL = {"true": True, "1": True, "yes": True, "on": True,
         "false": False, "0": False, "no": False, "off": False}


def _coerce(kind: str, value: Any) -> Any:
    if kind.startswith("list["):
        inner = kind[5:-1]
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                value = ast.literal_eval(text)
            else:
                value = [v for v in re.split(r"[,\s]+", text) if v]
        if not isinstance(value, (list, tuple)):
            raise TypeError("not a list")
        return [_coerce(inner, v) for v in value]
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _BOOL:
            return _BOOL[value.strip().lower()]
        raise TypeError("not a bool")
    if kind == "int":
        if isinstance(value, bool):
            raise TypeError("bool is not int")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            return int(value.strip())
        raise TypeError("not an int")
    if kind == "float":
        if isinstance(value, bool):
            raise TypeError("bool is not float")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
        raise TypeError("not a float")
    if kind == "str":
        if isinstance(value, str):
            return value
        raise TypeError("not a str")
    raise TypeError(f"unsupported parameter type {kind}")


@dataclass(frozen=True)
class Chapter:
    """A chapter of the book: its folder, main notebook, title and parameters."""

    number: int
    slug: str  # "07-caffnet"
    name: str  # "caffnet"
    path: Path  # the main notebook (.md)
    title: str
    parameters: dict[str, Parameter] = field(default_factory=dict)

    def validate(self, params: dict[str, Any] | None) -> dict[str, Any]:
        """Check names and types of ``params``; return them converted.

        Raises:
            ChapterError: a name that is not a parameter, or a value of the wrong type.
        """
        out: dict[str, Any] = {}
        for key, value in (params or {}).items():
            if key not in self.parameters:
                raise ChapterError(f"chapter {self.name!r} has no parameter {key!r}; "
                                   f"its parameters: {', '.join(self.parameters)}")
            out[key] = self.parameters[key].coerce(value)
        return out


def repo_root() -> Path:
    """The book's root folder: ``MINIREPRO_ROOT``, else the nearest parent of the
    working directory holding ``_toc.yml`` and ``notebooks/``, else the checkout
    this package was installed from."""
    env = os.environ.get("MINIREPRO_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for cand in (here, *here.parents):
        if (cand / "_toc.yml").is_file() and (cand / "notebooks").is_dir():
            return cand
    pkg = Path(__file__).resolve().parents[2]
    if (pkg / "notebooks").is_dir():
        return pkg
    raise ChapterError("cannot find the book (no _toc.yml and notebooks/ here or above); "
                       "run inside the checkout or set MINIREPRO_ROOT")


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind.__name__
    if isinstance(value, (list, tuple)) and value:
        inner = {_type_of(v) for v in value}
        if len(inner) == 1 and not next(iter(inner)).startswith("list"):
            return f"list[{inner.pop()}]"
    raise ChapterError(f"unsupported default {value!r}")


def _annotation_type(node: ast.expr) -> tuple[str, bool]:
    text = ast.unparse(node).replace(" ", "")
    optional = False
    parts = text.split("|")
    if "None" in parts:
        optional = True
        parts = [p for p in parts if p != "None"]
    if text.startswith("Optional[") and text.endswith("]"):
        optional, parts = True, [text[9:-1]]
    if len(parts) != 1 or parts[0] not in {"int", "float", "str", "bool", "list[int]",
                                           "list[float]", "list[str]"}:
        raise ChapterError(f"unsupported parameter annotation {text!r}")
    return parts[0], optional


def parse_parameters(source: str, where: str = "parameters cell") -> dict[str, Parameter]:
    """Parse a ``parameters`` cell's source into ``{name: Parameter}``."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ChapterError(f"{where}: not valid Python ({exc.msg}, line {exc.lineno})") from exc
    lines = source.splitlines()
    out: dict[str, Parameter] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value_node, ann = node.targets[0].id, node.value, None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value_node, ann = node.target.id, node.value, node.annotation
        else:
            continue
        line = lines[node.lineno - 1]
        comment = line.split("#", 1)[1].strip() if "#" in line else ""
        choices = None
        m = re.search(r"\{([^{}]+)\}\s*$", comment)
        if m:
            choices = tuple(c.strip() for c in m.group(1).split(",") if c.strip())
        if name == "scale":
            default = os.environ.get("MINIREPRO_SCALE", "book")
            out[name] = Parameter(name, default, "str", False, comment, tuple(SCALES))
            continue
        try:
            default = ast.literal_eval(value_node)
        except ValueError as exc:
            raise ChapterError(f"{where}: the default of {name!r} must be a literal") from exc
        if ann is not None:
            kind, optional = _annotation_type(ann)
        elif default is None:
            raise ChapterError(f"{where}: {name!r} defaults to None, so it needs an annotation "
                               f"such as `{name}: int | None = None`")
        else:
            kind, optional = _type_of(default), False
        if isinstance(default, tuple):
            default = list(default)
        out[name] = Parameter(name, default, kind, optional, comment, choices)
    return out


def _parameters_source(path: Path) -> str:
    import jupytext

    nb = jupytext.read(path)
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            return cell.source
    raise ChapterError(f"{path}: no code cell tagged `parameters`")


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


_FOLDER = re.compile(r"^(\d{2})-([a-z0-9][a-z0-9-]*)$")


@lru_cache(maxsize=8)
def _discover(root: Path, stamp: tuple) -> tuple[Chapter, ...]:
    chapters = []
    for folder in sorted((root / "notebooks").iterdir()):
        m = _FOLDER.match(folder.name)
        if not m or not folder.is_dir():
            continue
        main = folder / f"{m.group(2)}.md"
        if not main.is_file():
            continue
        params = parse_parameters(_parameters_source(main), where=str(main.relative_to(root)))
        chapters.append(Chapter(int(m.group(1)), folder.name, m.group(2), main, _title(main), params))
    return tuple(chapters)


def discover(root: Path | None = None) -> list[Chapter]:
    """Every chapter under ``root/notebooks``, in number order."""
    root = (root or repo_root()).resolve()
    if not (root / "notebooks").is_dir():
        raise ChapterError(f"{root} has no notebooks/ folder")
    stamp = tuple((p.name, p.stat().st_mtime_ns) for p in sorted((root / "notebooks").glob("*/*.md")))
    return list(_discover(root, stamp))


def get(name: str, root: Path | None = None) -> Chapter:
    """The chapter called ``name`` (``caffnet`` or ``07-caffnet``).

    Raises:
        ChapterError: no such chapter (the message lists the chapters).
    """
    chapters = discover(root)
    for ch in chapters:
        if name in (ch.name, ch.slug):
            return ch
    names = ", ".join(ch.name for ch in chapters) or "(none)"
    raise ChapterError(f"unknown chapter {name!r}; chapters: {names}")
