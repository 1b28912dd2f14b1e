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
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from minirepro.core.paths import repo_root
from minirepro.core.scale import SCALES


class ChapterError(ValueError):
    """An unknown chapter, an unknown parameter or a value of the wrong type."""


from minirepro.core.seed import SEED_RANGE  # noqa: E402 - the one seed range (core.seed.check_seed)

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


@dataclass(frozen=True)
class Chapter:
    """A chapter of the book: its folder, main notebook, title and parameters."""

    number: int
    slug: str  # "07-caffnet"
    name: str  # "caffnet"
    path: Path  # the main notebook (.md)
    title: str
    parameters: dict[str, Parameter] = field(default_factory=dict)

    def config_class(self) -> type | None:
        """The ``Config`` of the paper package the page imports (``None`` if it has none).

        Imports that package, so it can take seconds (torch); ``minirepro list <chapter>``
        uses it, the plain ``minirepro list`` does not.
        """
        import importlib

        text = self.path.read_text(encoding="utf-8")
        for pkg in dict.fromkeys(re.findall(r"from minirepro\.papers(?:\.| import )(\w+)", text)):
            cfg = getattr(importlib.import_module(f"minirepro.papers.{pkg}"), "Config", None)
            if cfg is not None:
                return cfg
        return None

    def presets(self) -> dict[str, dict[str, Any]]:
        """For each parameter named like a config field: its value at each scale.

        A parameter left at ``None`` takes this value from ``Config.PRESETS`` (so the
        notebook's comments need not restate it, and cannot drift from it).
        """
        from minirepro.core.scale import SCALES

        cfg = self.config_class()
        if cfg is None:
            return {}
        at = {scale: cfg.preset(scale) for scale in SCALES}
        return {name: {scale: getattr(at[scale], name) for scale in SCALES}
                for name in self.parameters if hasattr(at["book"], name)}

    def validate(self, params: dict[str, Any] | None, cwd: Path | None = None) -> dict[str, Any]:
        """Check names, types and ranges of ``params``; return them converted.

        A path parameter's value is made absolute against ``cwd`` (default: the
        working directory) and must exist (see :meth:`Parameter.resolve_path`).

        Raises:
            ChapterError: a name that is not a parameter, a value of the wrong type,
                out of range, or a path that does not exist.
        """
        out: dict[str, Any] = {}
        for key, value in (params or {}).items():
            if key not in self.parameters:
                raise ChapterError(f"chapter {self.name!r} has no parameter {show(key)}; "
                                   f"its parameters: {', '.join(self.parameters)}")
            par = self.parameters[key]
            out[key] = par.coerce(value)
            if par.is_path and out[key] is not None:
                out[key] = par.resolve_path(out[key], cwd)
        return out


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
    raise ChapterError(f"unknown chapter {show(name)}{did_you_mean(name, [ch.name for ch in chapters])}; "
                       f"chapters: {names}")


def did_you_mean(name: Any, choices: list[str]) -> str:
    """``" (did you mean 'caffnet'?)"`` for a near miss of one of ``choices`` (difflib), else ``""``."""
    import difflib

    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name.lower(), choices, n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


MAX_THREADS = 1024


def check_threads(threads: int | None) -> None:
    """``threads`` is ``None`` or an int in [1, MAX_THREADS]."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise ChapterError(f"--threads must be an int in [1, {MAX_THREADS}]; got {show(threads)}")


RUNS_RULE = ("runs/ in the current folder (at the book's root that is the book's runs/; "
             "from a lab's folder, the runs/ beside its notebook, where its grader looks)")


def default_runs_dir() -> Path:
    """Where run folders go when no ``--runs-dir`` is given: ``runs/`` in the current folder.

    The rule is the working directory, never the book's checkout: a student who runs
    ``minirepro run`` in a terminal in a lab's folder gets ``runs/`` beside the lab's
    notebook (where ``lab_checks.latest_run`` and the grader look), also on a JupyterHub
    whose install of the book is read-only; at the book's root it is the book's ``runs/``.
    """
    return Path.cwd() / "runs"


def check_runs_dir(path: Path) -> Path:
    """Check, writing nothing, that the runs folder ``path`` can be created and written to.

    Returns it absolute. Raises :class:`ChapterError` (one line) if it or its parent is a
    file, if neither it nor its parent exists (a mistyped ``--runs-dir /nonexistent/x`` is
    refused, not made with every missing folder above it), or if it is not writable.
    """
    try:
        path = Path(path).expanduser().absolute()
        probe = path if path.exists() or path.is_symlink() else path.parent
        if not probe.exists() and not probe.is_symlink():
            raise ChapterError(f"runs folder {show(str(path), 80)} cannot be made: its parent "
                               f"{show(str(probe), 80)} does not exist (give a folder that exists, "
                               "or one inside a folder that exists)")
        if not probe.is_dir():
            raise ChapterError(f"runs folder {show(str(path), 80)} cannot be made: "
                               f"{show(str(probe), 80)} is not a folder")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise ChapterError(f"runs folder {show(str(path), 80)} is not writable "
                               f"({show(str(probe), 80)} is read-only to this user)")
    except OSError as exc:
        raise ChapterError(f"runs folder {show(str(path), 80)} cannot be used: "
                           f"{exc.strerror or type(exc).__name__}") from exc
    return path


def make_runs_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise ChapterError(f"runs folder {show(str(path), 80)} cannot be made or written: "
                           f"{exc.strerror or type(exc).__name__}") from exc



@dataclass(frozen=True)
class RunRequest:
    """A run's inputs once checked: the chapter, the given parameters (converted), every
    parameter's value (defaults filled in) and the chapter's runs folder (absolute)."""

    chapter: Chapter
    params: dict[str, Any]
    full_params: dict[str, Any]
    runs_dir: Path


def check_run(name: str, params: dict[str, Any] | None = None, scale: str | None = None,
              threads: int | None = None, runs_dir: Path | None = None,
              root: Path | None = None) -> RunRequest:
    """The one validation of a run, before anything is written: the chapter, every
    parameter (names, types, ranges, paths), the scale, ``threads`` and the runs folder.

    ``scale`` is shorthand for ``params["scale"]`` (giving both, different, is refused).
    The runs folder defaults to ``runs/`` in the current folder (:func:`default_runs_dir`);
    the chapter's run folders go in its ``<chapter name>/`` sub-folder.

    Raises:
        ChapterError: one line naming what is wrong and the valid choices.
    """
    root = (root or repo_root()).resolve()
    chapter = get(name, root)
    params = dict(params or {})
    if scale is not None:
        if "scale" in params and params["scale"] != scale:
            raise ChapterError("give the scale once: --scale or -p scale, not both")
        params["scale"] = scale
    params = chapter.validate(params)
    if "scale" in chapter.parameters:
        params.setdefault("scale", os.environ.get("MINIREPRO_SCALE", "book"))
        if params["scale"] not in SCALES:
            raise ChapterError(f"unknown scale {show(params['scale'])}; expected one of {', '.join(SCALES)}")
    check_threads(threads)
    full_params = {k: p.default for k, p in chapter.parameters.items()}
    full_params.update(params)
    folder = check_runs_dir(runs_dir or default_runs_dir()).resolve() / chapter.name
    return RunRequest(chapter, params, full_params, folder)


def toc_files(node: Any) -> list[str]:
    """The ``file`` and ``root`` entries of a parsed ``_toc.yml``, in order."""
    out: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("file", "root") and isinstance(v, str):
                out.append(v)
            else:
                out += toc_files(v)
    elif isinstance(node, list):
        for v in node:
            out += toc_files(v)
    return out


def toc_docs(root: Path | None = None) -> set[str]:
    """The documents of the book's table of contents (paths without ``.md``)."""
    import yaml

    toc = (root or repo_root()) / "_toc.yml"
    if not toc.is_file():
        return set()
    return {f.removesuffix(".md") for f in toc_files(yaml.safe_load(toc.read_text(encoding="utf-8")) or {})}
