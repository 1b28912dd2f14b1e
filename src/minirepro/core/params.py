"""The parameter language of a chapter's ``parameters`` cell: each parameter's type,
allowed values and range, read from its default and its comment.

The first code cell tagged ``parameters`` declares the parameters::

    scale = os.environ.get("MINIREPRO_SCALE", "book")  # size preset {smoke, book, full}
    seed = 0  # base random seed
    method = "mocl"  # the method to run {mocl, gpm, ewc}
    n_train: int | None = None  # training points (None: the scale's preset)

Each parameter's type comes from its literal default (or its annotation when the
default is ``None``); ``{a, b, c}`` at the end of its comment lists the allowed
values, and ``[lo, hi]`` (numbers, ``inf`` or ``-inf``; before any ``{...}``)
the allowed range of a number (of each number of a list), bounds included (on a
``str`` or ``bool`` parameter such an ending is just text)::

    lr = 0.1  # step size [0, 1]
    n_seeds: int | None = None  # seeds per arm (None: the preset) [1, 100]

Some constraints hold for every chapter, whatever the comment says: a seed (a
parameter named ``seed`` or ``*_seed``) is an int in ``[0, 2**32 - 1]``, a count
(an int named ``n_*``) is at least 0 and ``n_seeds`` at least 1, a float is finite
(no ``nan``, no ``inf``), and a path parameter (a ``str`` parameter whose
name ends in ``_csv``, ``_path``, ``_dir`` or ``_file``) given a value is resolved
against the caller's working directory and must exist (a ``_dir`` a folder, the
others a file). Error messages cut echoed values to about 40 characters.
"""

from __future__ import annotations

import ast
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minirepro.core.scale import SCALES
from minirepro.core.seed import SEED_RANGE  # the one seed range (core.seed.check_seed)


class ChapterError(ValueError):
    """An unknown chapter, an unknown parameter or a value of the wrong type."""


PATH_SUFFIXES = ("_csv", "_path", "_dir", "_file")
SHOW_CHARS = 40  # at most this many characters of a bad value are echoed


def show(value: Any, limit: int = SHOW_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters (a hostile value may be huge)."""
    size = len(value) if isinstance(value, str) else None
    if size is not None and size > 4 * limit:
        value = value[:4 * limit]  # the repr of a huge string is never built
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 16 * limit:
        return f"<an int of {value.bit_length()} bits>"
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 3]}... ({size if size is not None else len(text)} characters)"


def is_seed_name(name: str) -> bool:
    return name == "seed" or name.endswith("_seed")


def _fmt_bound(x: float) -> str:
    return str(int(x)) if isinstance(x, int) or (math.isfinite(x) and float(x).is_integer()) else str(x)


@dataclass(frozen=True)
class Parameter:
    """One parameter of a chapter's ``parameters`` cell."""

    name: str
    default: Any
    type: str  # "int", "float", "str", "bool", "list[int]", "list[float]", "list[str]"
    optional: bool = False  # None is allowed
    comment: str = ""
    choices: tuple[str, ...] | None = None
    lo: float | None = None  # the allowed range of a number, from a ``[lo, hi]`` comment marker
    hi: float | None = None
    lo_open: bool = False  # ``(lo, ...``: lo itself is refused
    hi_open: bool = False  # ``..., hi)``: hi itself is refused

    @property
    def is_path(self) -> bool:
        """A ``str`` parameter named ``*_csv``, ``*_path``, ``*_dir`` or ``*_file``."""
        return self.type == "str" and self.name.endswith(PATH_SUFFIXES)

    def bounds(self) -> tuple[float, float] | None:
        """The allowed ``(lo, hi)`` of a number (the seed range for a seed), else ``None``."""
        lo = -math.inf if self.lo is None else self.lo
        hi = math.inf if self.hi is None else self.hi
        if is_seed_name(self.name) and self.type in ("int", "list[int]"):
            lo, hi = max(lo, SEED_RANGE[0]), min(hi, SEED_RANGE[1])
        if self.type in ("int", "list[int]") and self.name.startswith("n_"):  # a count
            lo = max(lo, 1)
        if lo == -math.inf and hi == math.inf:
            return None
        return lo, hi

    def range_text(self, lo: float | None = None, hi: float | None = None) -> str:
        """The allowed range, e.g. ``(0, 1]`` or ``[1, inf)``: an infinite end is always open,
        since a value must be finite (a comment's ``[1, inf]`` means "no upper bound")."""
        lo = (self.lo if self.lo is not None else -math.inf) if lo is None else lo
        hi = (self.hi if self.hi is not None else math.inf) if hi is None else hi
        left = "(" if self.lo_open or lo == -math.inf else "["
        right = ")" if self.hi_open or hi == math.inf else "]"
        return f"{left}{_fmt_bound(lo)}, {_fmt_bound(hi)}{right}"

    @property
    def help(self) -> str:
        """The comment without its trailing ``[lo, hi]`` and ``{a, b}`` markers, which
        :meth:`describe` already shows (as they are enforced)."""
        text = re.sub(r"\s*\{[^{}]*\}\s*$", "", self.comment) if self.choices else self.comment
        if self.type in ("int", "float", "list[int]", "list[float]"):  # elsewhere it is just text
            text = _RANGE_TAIL.sub("", text)
        return text.strip()

    def describe(self) -> str:
        """``name (type one of {...} in [lo, hi]) = default``: the range enforced, implicit
        ones (seeds, counts) included."""
        kind = self.type + (" | None" if self.optional else "")
        extra = f" one of {{{', '.join(self.choices)}}}" if self.choices else ""
        bounds = self.bounds()
        if bounds is not None and self.type in ("int", "float", "list[int]", "list[float]"):
            extra += f" in {self.range_text(*bounds)}"
        return f"{self.name} ({kind}{extra}) = {self.default!r}"

    def coerce(self, value: Any) -> Any:
        """Check ``value`` (a Python value or a command-line string) and convert it."""
        if value is None or (isinstance(value, str) and value in {"None", "none"} and self.optional):
            if self.optional:
                return None
            raise ChapterError(f"parameter {self.name!r} cannot be None; expected {self.type}")
        try:
            out = _coerce(self.type, value)
        except (TypeError, ValueError, SyntaxError, RecursionError, MemoryError) as exc:
            raise ChapterError(f"parameter {self.name!r} expects {self.type}, got {show(value)}") from exc
        items = out if isinstance(out, list) else [out]
        if self.choices is not None:
            bad = [v for v in items if str(v) not in self.choices]
            if bad:
                raise ChapterError(f"parameter {self.name!r} must be one of "
                                   f"{', '.join(self.choices)}; got {show(bad[0])}")
        if self.type in ("float", "list[float]"):
            bad = [v for v in items if not math.isfinite(v)]
            if bad:
                raise ChapterError(f"parameter {self.name!r} must be a finite number; got {show(bad[0])}")
        bounds = self.bounds()
        if bounds is not None and self.type in ("int", "float", "list[int]", "list[float]"):
            lo, hi = bounds
            bad = [v for v in items if not (lo < v if self.lo_open else lo <= v)
                   or not (v < hi if self.hi_open else v <= hi)]
            if bad:
                what = "a seed" if is_seed_name(self.name) else "a value"
                raise ChapterError(f"parameter {self.name!r} must be {what} in "
                                   f"{self.range_text(lo, hi)}; got {show(bad[0])}")
        return out

    def resolve_path(self, value: str, cwd: Path | None = None) -> str:
        """A path parameter's value made absolute against ``cwd`` (default: the working
        directory) and checked to exist: a folder for ``*_dir``, else a file."""
        base = Path(cwd) if cwd is not None else Path.cwd()
        try:
            path = (base / Path(value).expanduser()).resolve()
            kind_ok = path.is_dir() if self.name.endswith("_dir") else path.is_file()
            exists = path.exists()
        except (OSError, RuntimeError, ValueError) as exc:
            raise ChapterError(f"parameter {self.name!r}: cannot use the path {show(value)} "
                               f"({type(exc).__name__})") from exc
        want = "folder" if self.name.endswith("_dir") else "file"
        if not exists:
            raise ChapterError(f"parameter {self.name!r}: no such {want} {show(value)} "
                               f"(looked for {show(str(path), 80)})")
        if not kind_ok:
            raise ChapterError(f"parameter {self.name!r}: {show(value)} is not a {want} "
                               f"(resolved to {show(str(path), 80)})")
        return str(path)


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
        lo = hi = None
        lo_open = hi_open = False
        r = _RANGE.search(comment)
        if r:
            lo, hi = _bound(r.group(2)), _bound(r.group(3))
            lo_open, hi_open = r.group(1) == "(", r.group(4) == ")"
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
        if kind not in ("int", "float", "list[int]", "list[float]"):
            lo = hi = None  # a `[x, y]` ending a str or bool's comment is just text
            lo_open = hi_open = False
        if lo is not None and (lo > hi or (lo == hi and (lo_open or hi_open))):
            raise ChapterError(f"{where}: the range of {name!r} is empty: {r.group(0).strip()}")
        par = Parameter(name, default, kind, optional, comment, choices,
                        None if lo == -math.inf else lo, None if hi == math.inf else hi,
                        lo_open, hi_open)
        if default is not None:
            try:
                par.coerce(default)
            except ChapterError as exc:
                raise ChapterError(f"{where}: the default of {name!r} is refused: {exc}") from exc
        out[name] = par
    return out


_NUM = r"-?inf|[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"([\[(])\s*({_NUM})\s*,\s*({_NUM})\s*([\])])\s*(?:\{{[^{{}}]*\}}\s*)?$")
_RANGE_TAIL = re.compile(rf"\s*[\[(]\s*(?:{_NUM})\s*,\s*(?:{_NUM})\s*[\])]\s*$")


def _bound(text: str) -> float:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value
