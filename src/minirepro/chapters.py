"""The chapter registry: chapters, their notebooks and their parameters.

A chapter is a folder ``notebooks/NN-slug/`` whose main notebook is
``notebooks/NN-slug/<slug>.md`` (MyST markdown, jupytext). Its name is the slug
(``caffnet``); ``07-caffnet`` is accepted too. The first code cell tagged
``parameters`` declares the parameters, in the language of :mod:`minirepro.core.params`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from minirepro.core.params import ChapterError, Parameter, parse_parameters, show
from minirepro.core.paths import repo_root


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
