"""Run folders: one chapter run, staged, then renamed into place (or marked FAILED).

A run executes a chapter's notebook in a fresh kernel (papermill, in a
subprocess with its own environment) inside a hidden staging folder
``runs/<chapter>/.incomplete-<run-id>/``, where ``runs/`` is ``--runs-dir`` or, by
default, ``runs/`` in the current folder (:func:`minirepro.run.request.default_runs_dir`). Only when it finishes is the folder
renamed to ``runs/<chapter>/<run-id>/``; a failed run is renamed to
``runs/<chapter>/<run-id>-FAILED/`` holding ``<chapter>-FAILED.ipynb`` (the
partial notebook) and ``error.txt``. So a folder without ``-FAILED`` and with
``results.json`` is always a finished run.

Every value is checked before anything is written (names, types, ranges, path
parameters, ``threads``, the runs folder): by :func:`minirepro.run.request.check_run`,
the one validation. A run stopped by SIGINT, SIGTERM or SIGHUP is marked FAILED
with ``error.txt`` saying which signal interrupted it, and :class:`Interrupted`
is raised.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import itertools
import json
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minirepro.chapters import Chapter, repo_root
from minirepro.run.notebook import cell_timeout, execute, kernel_env, to_ipynb
from minirepro.run.process import Interrupted, children_cpu, signals_ignored, stop_signals_raise
from minirepro.run.progress import cell_progress
from minirepro.run.request import check_run, make_runs_dir


class RunFailed(RuntimeError):
    """A chapter's notebook raised; ``.folder`` is where its partial notebook is."""

    def __init__(self, message: str, folder: Path):
        super().__init__(message)
        self.folder = folder


@dataclass(frozen=True)
class Run:
    """A finished run: its folder and the contents of its ``results.json``."""

    folder: Path
    results: dict[str, Any]


def _params_hash(params: dict[str, Any]) -> str:
    blob = json.dumps(params, sort_keys=True, default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:6]


_RUN_COUNTER = itertools.count()


def make_run_id(params: dict[str, Any]) -> str:
    """``YYYYmmdd-HHMMSS-<6 hex of the parameters>-<pid><counter>-<4 random hex>``.

    Sortable by time, and unique: the counter separates the calls of one process,
    the process id (and the random bits) separate processes and hosts.
    """
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return (f"{stamp}-{_params_hash(params)}-{os.getpid() % 10000:04d}"
            f"{next(_RUN_COUNTER):04d}-{secrets.token_hex(2)}")



def run_chapter(chapter: Chapter, params: dict[str, Any] | None = None, scale: str | None = None,
                runs_dir: Path | None = None, root: Path | None = None,
                threads: int | None = None, quiet_bars: bool = False, progress: bool = False) -> Run:
    """Run one chapter with ``params`` and return the finished run.

    Args:
        chapter: the chapter (resolved once, by the caller: :func:`minirepro.chapters.get`).
        params: parameter overrides, validated against the ``parameters`` cell.
        scale: shorthand for ``params["scale"]``.
        runs_dir: where run folders go (default ``runs/`` in the current folder,
            :func:`minirepro.run.request.default_runs_dir`).
        threads: torch threads inside the kernel (``MINIREPRO_THREADS``).
        quiet_bars: set ``TQDM_DISABLE=1`` in the kernel.
        progress: show a bar of the notebook's finished cells on standard error.

    Raises:
        ChapterError: unknown parameter or value, out-of-range value, missing
            path, bad ``threads`` or an unusable runs folder (nothing is written).
        RunFailed: the notebook raised; the partial notebook is kept and named.
        Interrupted: SIGINT, SIGTERM or SIGHUP (a ``KeyboardInterrupt``): the process
            tree was stopped and the run marked ``-FAILED``, ``error.txt`` saying so.
    """
    root = (root or repo_root()).resolve()
    req = check_run(chapter, params, scale, threads, runs_dir)
    params, full_params, runs_dir = req.params, req.full_params, req.runs_dir
    with stop_signals_raise():
        make_runs_dir(runs_dir)
        run_id = make_run_id(full_params)
        stage = Path(tempfile.mkdtemp(prefix=f".incomplete-{run_id}-", dir=runs_dir))
        t0 = time.perf_counter()
        output = stage / f"{chapter.name}.ipynb"
        try:
            return _run_in(stage, chapter, params, full_params, run_id, runs_dir, root,
                           threads, quiet_bars, progress)
        except BaseException as exc:
            with signals_ignored():
                failed = _mark_failed(stage, output, chapter, run_id, runs_dir, exc,
                                      time.perf_counter() - t0)
            if isinstance(exc, KeyboardInterrupt):
                exc.folder = failed  # for the caller's one-line message
            if isinstance(exc, RuntimeError) and not isinstance(exc, RunFailed):
                raise RunFailed(f"chapter {chapter.name!r} failed: {exc}; partial notebook in "
                                f"{failed / (chapter.name + '-FAILED.ipynb')}", failed) from exc
            raise


def _mark_failed(stage: Path, output: Path, chapter: Chapter, run_id: str, runs_dir: Path,
                 exc: BaseException, seconds: float) -> Path:
    """Rename the staging folder to ``<run-id>-FAILED`` with ``error.txt`` saying why."""
    failed = runs_dir / f"{run_id}-FAILED"
    if isinstance(exc, KeyboardInterrupt):
        sig = exc.signame if isinstance(exc, Interrupted) else "SIGINT"
        what = {"SIGINT": "interrupted (SIGINT, Ctrl-C)", "SIGTERM": "terminated (SIGTERM)",
                "SIGHUP": "hung up (SIGHUP)"}.get(sig, f"stopped by {sig}")
        message = (f"{what} after {seconds:.1f} s: the run did not finish; papermill, the "
                   f"kernel and its child processes were stopped")
    elif isinstance(exc, RuntimeError):
        message = str(exc) or type(exc).__name__
    else:
        message = f"{type(exc).__name__}: {exc}"
    if not stage.exists():
        return failed
    try:
        if output.exists():
            output.rename(stage / f"{chapter.name}-FAILED.ipynb")
        (stage / "results.json").unlink(missing_ok=True)
        (stage / "error.txt").write_text(f"{message}\n", encoding="utf-8")
        (stage / ".source.ipynb").unlink(missing_ok=True)
        (stage / OWNER).unlink(missing_ok=True)
        stage.rename(failed)
    except OSError:  # the disk is full or gone: leave the staging folder (never looks finished)
        return stage
    return failed


OWNER = ".owner.pid"  # in a staging folder: the process running that run


def mark_abandoned(runs_dir: Path, chapter: Chapter, known: set[Path], reason: str,
                   wait: float = 15.0) -> list[Path]:
    """Mark FAILED the staging folders under ``runs_dir`` (not in ``known``) whose owning
    process is gone, e.g. sweep workers killed when the sweep was interrupted.

    A folder whose owner is still alive after ``wait`` seconds is left alone (it may
    be another sweep's). Returns the ``-FAILED`` folders made.
    """
    import psutil

    def alive(folder: Path) -> bool:
        try:
            pid = int((folder / OWNER).read_text().strip())
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except (OSError, ValueError, psutil.Error):
            return False

    stages = [f for f in runs_dir.glob(".incomplete-*") if f.is_dir() and f not in known]
    deadline = time.monotonic() + wait
    while any(alive(f) for f in stages) and time.monotonic() < deadline:
        time.sleep(0.2)
    made = []
    for stage in stages:
        if alive(stage) or not stage.exists():
            continue
        run_id = stage.name[len(".incomplete-"):].rsplit("-", 1)[0]
        (stage / OWNER).unlink(missing_ok=True)
        made.append(_mark_failed(stage, stage / f"{chapter.name}.ipynb", chapter, run_id, runs_dir,
                                 RuntimeError(reason), 0.0))
    return made


def _run_in(stage: Path, chapter: Chapter, params: dict[str, Any], full_params: dict[str, Any],
            run_id: str, runs_dir: Path, root: Path, threads: int | None, quiet_bars: bool,
            progress: bool = False) -> Run:
    stage.chmod(0o755)
    (stage / OWNER).write_text(f"{os.getpid()}\n", encoding="utf-8")  # see mark_abandoned
    ipynb = to_ipynb(chapter, stage / ".source.ipynb")
    output = stage / f"{chapter.name}.ipynb"
    extra = {"MINIREPRO_RESULTS": str(stage / ".kernel-results.json"),
             "MINIREPRO_CONFIG": str(stage / ".kernel-config.json"),
             "MINIREPRO_FIGDIR": str(stage / "figures"),
             "MINIREPRO_ROOT": str(root),
             "MINIREPRO_SCALE": str(full_params.get("scale", "book"))}
    if threads is not None:
        extra["MINIREPRO_THREADS"] = str(threads)
        extra["OMP_NUM_THREADS"] = str(threads)
    if quiet_bars:
        extra["TQDM_DISABLE"] = "1"
    t0, cpu0, load = time.perf_counter(), children_cpu(), os.getloadavg()[0]
    n_cells = sum(1 for c in json.loads(ipynb.read_text(encoding="utf-8"))["cells"]
                  if c.get("cell_type") == "code") + (1 if params else 0)  # papermill's injected cell
    with cell_progress(output, n_cells, chapter.name, progress):
        execute(ipynb, output, params, kernel_env(extra), cwd=stage, log=stage / "papermill.log",
                timeout=cell_timeout(str(full_params.get("scale", "book"))))
    seconds, cpu_seconds = time.perf_counter() - t0, children_cpu() - cpu0
    kernel_results = stage / ".kernel-results.json"
    recorded = json.loads(kernel_results.read_text()) if kernel_results.exists() else {}
    resolved = _resolved(full_params, stage / ".kernel-config.json")
    results = {"chapter": chapter.name, "params": full_params, "given": params, "resolved": resolved,
               "headline": recorded.get("headline"),
               "metrics": recorded.get("metrics", {}), "tolerances": recorded.get("tolerances", {}),
               "seeds": recorded.get("seeds", {}), "claims": recorded.get("claims", []),
               "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
               "load": round(load, 2), "run_id": run_id}
    (stage / "params.json").write_text(json.dumps(resolved, indent=2, default=str) + "\n")
    (stage / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (stage / "README.md").write_text(run_readme(chapter, params, run_id, runs_dir), encoding="utf-8")
    kernel_results.unlink(missing_ok=True)
    (stage / ".kernel-config.json").unlink(missing_ok=True)
    (stage / OWNER).unlink(missing_ok=True)
    ipynb.unlink(missing_ok=True)
    final = runs_dir / run_id
    _log_names_final(stage / "papermill.log", stage, final)
    stage.rename(final)
    return Run(final, results)

def _log_names_final(log: Path, stage: Path, final: Path) -> None:
    """papermill's log names the staging folder; once the run is finished, name the folder
    it is renamed to."""
    try:
        text = log.read_text(encoding="utf-8")
        log.write_text(text.replace(str(stage), str(final)), encoding="utf-8")
    except OSError:
        pass


def _resolved(full_params: dict[str, Any], config_file: Path) -> dict[str, Any]:
    """Every parameter's value as the run used it: a parameter left at ``None`` takes the
    value the notebook's ``Config.from_params`` resolved it to (its scale's preset), as the
    kernel wrote it to ``config_file``; a parameter the config does not hold stays as given."""
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    return {k: config.get(k) if v is None and isinstance(config, dict) else v
            for k, v in full_params.items()}


def rerun_command(chapter: Chapter, params: dict[str, Any], runs_dir: Path | None = None) -> str:
    """The ``minirepro run`` command that repeats a run with the parameters it was given."""
    import shlex

    words = ["minirepro", "run", chapter.name]
    for k, v in params.items():
        if k == "scale":
            words += ["--scale", str(v)]
            continue
        values = v if isinstance(v, list) else [v]
        words += ["-p", k, *(str(x).lower() if isinstance(x, bool) else str(x) for x in values)]
    if runs_dir is not None:
        words += ["--runs-dir", str(runs_dir)]
    return " ".join(shlex.quote(w) for w in words)


def run_readme(chapter: Chapter, params: dict[str, Any], run_id: str, runs_dir: Path) -> str:
    """The ``README.md`` of a finished run folder: what each file is, and how to re-run it."""
    base = runs_dir.parent  # runs_dir is <runs>/<chapter>
    return f"""# Run {run_id} of {chapter.name}

A finished `minirepro run` of the chapter `{chapter.slug}` ({chapter.title}).

| file | what it is |
|---|---|
| `{chapter.name}.ipynb` | the chapter's notebook, executed with this run's parameters (papermill) |
| `params.json` | every parameter's value as the run used it (a preset value where none was given) |
| `results.json` | the metrics, the claims with their verdicts, the seeds, the parameters given (`given`), the time taken |
| `figures/` | the figures the notebook saved (if any) |
| `papermill.log` | papermill's log of the execution |

To re-run it with the same parameters (a new folder beside this one; the seeds are the
same, so the numbers are too, up to timings and floating-point differences between machines):

```console
{rerun_command(chapter, params, base)}
```
"""


def run_record(chapter: Chapter, params: dict[str, Any], scale: str | None, runs_dir: Path | None,
               root: Path) -> dict[str, Any]:
    """One run of a sweep, as a record; thread counts are left as in a single run."""
    try:
        run = run_chapter(chapter, params, scale=scale, runs_dir=runs_dir, root=root, quiet_bars=True)
        return {"params": params, "ok": True, "folder": str(run.folder),
                "metrics": run.results["metrics"], "seconds": run.results["seconds"],
                "headline": run.results.get("headline"),
                "scale": run.results["params"].get("scale"), "n_seeds": reported_seeds(run.results),
                "verdicts": {c["id"]: c.get("verdict") for c in run.results["claims"]}}
    except RunFailed as exc:
        return {"params": params, "ok": False, "folder": str(exc.folder), "error": str(exc),
                "metrics": {}, "seconds": None, "verdicts": {}}


def reported_seeds(results: dict[str, Any]) -> int | None:
    """How many seeds a run reports on (``declare_seeds``), or ``None`` if it declared none."""
    reported = (results.get("seeds") or {}).get("reported")
    return len(reported) if isinstance(reported, list) and reported else None
