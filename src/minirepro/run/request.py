"""A run's request, checked before anything is written: the chapter's parameters, the
scale, the thread count and the runs folder (:func:`check_run`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minirepro.chapters import Chapter, ChapterError, show
from minirepro.core.scale import SCALES

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
    """Make the runs folder ``path`` (and its missing parents) and check it is writable."""
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


def check_run(chapter: Chapter, params: dict[str, Any] | None = None, scale: str | None = None,
              threads: int | None = None, runs_dir: Path | None = None) -> RunRequest:
    """The one validation of a run, before anything is written: every parameter of the
    chapter (names, types, ranges, paths), the scale, ``threads`` and the runs folder.

    ``scale`` is shorthand for ``params["scale"]`` (giving both, different, is refused).
    The runs folder defaults to ``runs/`` in the current folder (:func:`default_runs_dir`);
    the chapter's run folders go in its ``<chapter name>/`` sub-folder.

    Raises:
        ChapterError: one line naming what is wrong and the valid choices.
    """
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
