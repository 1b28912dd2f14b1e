"""Sweeps: a chapter over a grid of parameter values, through joblib (or Dask, :mod:`.cluster`).

Every combination is validated before any run starts; a failing run does not stop
the others; a summary table and plot are written (:mod:`.summary`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from pathlib import Path
from typing import Any

from minirepro.chapters import Chapter, ChapterError, repo_root
from minirepro.core.params import show
from minirepro.run.cluster import sweep_dask
from minirepro.run.folder import make_run_id, mark_abandoned, run_record
from minirepro.run.process import Interrupted, signals_ignored, stop_signals_raise
from minirepro.run.progress import SweepProgress
from minirepro.run.request import check_runs_dir, default_runs_dir
from minirepro.run.summary import declared_headline, write_summary


def expand_grid(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the values in ``grid``, in order (the last name varies fastest)."""
    if not grid:
        return [{}]
    names = list(grid)
    for n in names:
        if not grid[n]:
            raise ChapterError(f"parameter {n!r} was given no values")
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]



def sweep(chapter: Chapter, grid: dict[str, list[Any]], jobs: int = 1, scale: str | None = None,
          backend: str = "loky", runs_dir: Path | None = None, root: Path | None = None,
          metric: str | None = None, scheduler: str | None = None,
          timeout: float | None = None, progress: bool = False) -> Path:
    """Run a chapter (resolved once, by the caller) over the grid of parameter values and
    write a summary.

    Every run is validated before any starts. Runs go through joblib (``backend``:
    ``loky`` for local processes, or any registered joblib backend such as
    ``dask`` or ``ray``). A failing run does not stop the others. Writes
    ``runs/<chapter>/sweep-<id>/`` (``runs/`` is ``runs_dir``, by default ``runs/`` in
    the current folder) with ``summary.csv``, ``summary.md``, ``summary.json``,
    ``summary.txt`` (the headline metric per grid point: :mod:`.summary`) and
    ``sweep.png`` (the headline metric, or ``metric``, against the first swept
    parameter, mean and spread over the others). ``progress`` shows a bar and a line
    per finished run on standard error.

    ``scheduler`` sends the runs to a Dask cluster instead (the ``cluster`` extra):
    ``tcp://HOST:PORT`` for a running scheduler, ``local:N`` for a ``LocalCluster``
    of N worker processes started here (see :func:`sweep_dask`); ``timeout`` bounds
    the whole sweep there.

    Returns:
        The sweep folder.
    """
    root = (root or repo_root()).resolve()
    grid, combos = _checked_grid(chapter, grid, scale)
    _check_sweep_options(chapter, jobs, timeout, metric, root)
    runs_dir = check_runs_dir(runs_dir if runs_dir is not None else default_runs_dir())
    base = runs_dir.resolve() / chapter.name
    known = set(base.glob(".incomplete-*")) if base.is_dir() else set()
    failed_before = set(base.glob("*-FAILED")) if base.is_dir() else set()
    t0 = time.perf_counter()
    bar = SweepProgress(len(combos), chapter.name, show=progress,
                        headline=metric or declared_headline(chapter, root))
    try:
        with stop_signals_raise():  # SIGTERM/SIGHUP end the sweep like Ctrl-C
            if scheduler is not None:
                rows = sweep_dask(chapter, combos, scale, scheduler, base, root, timeout=timeout,
                                  on_done=bar.done)
            else:
                rows = _sweep_joblib(chapter, combos, jobs, backend, scale, runs_dir, root,
                                     on_done=bar.done)
    except KeyboardInterrupt as exc:  # the workers (and their kernels) were killed: say so
        bar.close()
        _mark_interrupted_sweep(exc, time.perf_counter() - t0, base, chapter, known, failed_before)
        raise
    finally:
        bar.close()
    folder = base / f"sweep-{make_run_id({'grid': grid, 'scale': scale})}"
    folder.mkdir(parents=True)
    write_summary(folder, rows, list(grid), metric, seconds=time.perf_counter() - t0,
                  chapter=chapter)
    return folder


def _checked_grid(chapter: Chapter, grid: dict[str, list[Any]], scale: str | None
                  ) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
    """Validate every combination before running any; the grid converted, and its combinations."""
    for combo in expand_grid(grid):  # validate everything before running anything
        checked = dict(combo)
        if scale is not None:
            checked["scale"] = scale
        chapter.validate(checked)
    # converted, path parameters made absolute (the runs may execute elsewhere)
    grid = {k: [chapter.validate({k: v})[k] for v in vs] for k, vs in grid.items()}
    return grid, expand_grid(grid)


def _check_sweep_options(chapter: Chapter, jobs: int, timeout: float | None, metric: str | None,
                         root: Path) -> None:
    """Refuse a bad job count, timeout or metric name before anything runs."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ChapterError(f"-j must be at least 1, got {show(jobs)}")
    if timeout is not None and not (isinstance(timeout, (int, float)) and 0 < timeout < float("inf")):
        raise ChapterError(f"--timeout must be a positive number of seconds, got {show(timeout)}")
    if metric is not None:
        check_metric(chapter, metric, root)


def _indexed_record(i: int, chapter: Chapter, params: dict[str, Any], scale: str | None,
                    runs_dir: Path | None, root: Path) -> tuple[int, dict[str, Any]]:
    return i, run_record(chapter, params, scale, runs_dir, root)


def _sweep_joblib(chapter: Chapter, combos: list[dict[str, Any]], jobs: int, backend: str,
                  scale: str | None, runs_dir: Path | None, root: Path,
                  on_done: Any = None) -> list[dict[str, Any]]:
    """Run the combinations through joblib (``backend``), one record per run, in grid order;
    ``on_done(record)`` is called as each run finishes."""
    from joblib import Parallel, delayed

    rows: list[dict[str, Any] | None] = [None] * len(combos)
    results = Parallel(n_jobs=jobs, backend=backend, return_as="generator_unordered")(
        delayed(_indexed_record)(i, chapter, combo, scale, runs_dir, root)
        for i, combo in enumerate(combos))
    for i, row in results:
        rows[i] = row
        if on_done is not None:
            on_done(row)
    return [r for r in rows if r is not None]


def _mark_interrupted_sweep(exc: KeyboardInterrupt, elapsed: float, base: Path, chapter: Chapter,
                            known: set[Path], failed_before: set[Path]) -> None:
    """After Ctrl-C or a stop signal: mark the unfinished runs abandoned and say why in the FAILED ones."""
    sig = exc.signame if isinstance(exc, Interrupted) else "SIGINT"
    reason = (f"the sweep was interrupted ({sig}) after {elapsed:.1f} s; "
              f"this run did not finish")
    with signals_ignored():
        if base.is_dir():
            mark_abandoned(base, chapter, known, reason)
            # a worker may have marked its own run FAILED first (its kernel died with the
            # sweep): its error.txt then says why the kernel died, so say the cause first
            for folder in set(base.glob("*-FAILED")) - failed_before:
                note = folder / "error.txt"
                with contextlib.suppress(OSError):
                    old = note.read_text(encoding="utf-8") if note.exists() else ""
                    if reason not in old:
                        note.write_text(f"{reason}\n{old}", encoding="utf-8")


def known_metrics(chapter: Chapter, root: Path | None = None) -> set[str] | None:
    """The metric names the chapter is known to record, or ``None`` if nothing says.

    They come from its smoke golden (``tests/goldens/<slug>.results.json``) and its
    ledger entry (``book/claims/<slug>.json``, book scale): the names a chapter records
    hardly depend on its parameters, but a few do depend on the scale, hence both.
    """
    root = (root or repo_root()).resolve()
    names: set[str] = set()
    found = False
    for path in (root / "tests" / "goldens" / f"{chapter.slug}.results.json",
                 root / "book" / "claims" / f"{chapter.slug}.json"):
        try:
            recorded = json.loads(path.read_text(encoding="utf-8")).get("metrics")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(recorded, dict):
            found = True
            names.update(recorded)
    return names if found else None


def check_metric(chapter: Chapter, metric: str, root: Path | None = None) -> None:
    """Refuse ``sweep --metric`` before any run when the chapter is known not to record it.

    Known means: in the chapter's golden or ledger entry (:func:`known_metrics`), or
    written as a quoted literal in its notebook (a metric recorded only for some
    parameter values). A chapter with neither golden nor ledger entry cannot be
    checked in advance: then the sweep plots its first metric if ``metric`` is missing.
    """
    known = known_metrics(chapter, root)
    if known is None or metric in known:
        return
    text = chapter.path.read_text(encoding="utf-8")
    if f'"{metric}"' in text or f"'{metric}'" in text:
        return
    listed = sorted(known)
    more = f" and {len(listed) - 10} more" if len(listed) > 10 else ""
    raise ChapterError(f"chapter {chapter.name!r} records no metric {show(metric)}; it records "
                       f"{', '.join(listed[:10]) or '(none)'}{more}")

