"""Running chapters: jupytext -> papermill, run folders, sweeps, goldens.

A run executes a chapter's notebook in a fresh kernel (papermill, in a
subprocess with its own environment) inside a hidden staging folder
``runs/<chapter>/.incomplete-<run-id>/``. Only when it finishes is the folder
renamed to ``runs/<chapter>/<run-id>/``; a failed run is renamed to
``runs/<chapter>/<run-id>-FAILED/`` holding ``<chapter>-FAILED.ipynb`` (the
partial notebook) and ``error.txt``. So a folder without ``-FAILED`` and with
``results.json`` is always a finished run.

Every value is checked before anything is written (names, types, ranges, path
parameters, ``threads``, the runs folder). While a run executes, SIGTERM and
SIGHUP are handled like SIGINT: the notebook's process tree (papermill, the
kernel and whatever the kernel started) is stopped, the run is marked FAILED with
``error.txt`` saying which signal interrupted it, and :class:`Interrupted` (a
``KeyboardInterrupt``) is raised.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io
import itertools
import json
import os
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from minirepro.chapters import Chapter, ChapterError, get, repo_root, show
from minirepro.core.scale import SCALES

CELL_TIMEOUT = 600  # seconds a cell may take under `minirepro run` at smoke and book scale
# Per scale: at smoke and book a cell over 10 minutes is a hang (their budgets are 20 and
# 120 s a chapter); a full-scale cell may legitimately take longer (ALI trains its models),
# so it has no per-cell limit: Ctrl-C, SIGTERM, `sweep --timeout` and `bench --cap` still stop it.
CELL_TIMEOUTS: dict[str, int | None] = {"smoke": CELL_TIMEOUT, "book": CELL_TIMEOUT, "full": None}
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b:?")


class RunFailed(RuntimeError):
    """A chapter's notebook raised; ``.folder`` is where its partial notebook is."""

    def __init__(self, message: str, folder: Path):
        super().__init__(message)
        self.folder = folder


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal (SIGINT, SIGTERM or SIGHUP); ``.signum`` says which."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside: SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (in the main thread;
    a signal that is ignored, as ``nohup`` ignores SIGHUP, stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for sig in _STOP_SIGNALS:
        current = signal.getsignal(sig)
        if current in (signal.SIG_DFL, signal.default_int_handler):
            old[sig] = signal.signal(sig, _raise_interrupted)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """Inside: the stop signals are ignored (cleanup after an interrupt is not interrupted)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def stop_process_tree(pid: int, timeout: float = 10.0) -> None:
    """Stop process ``pid`` and all its descendants, for sure.

    The tree is frozen first (SIGSTOP, repeated until no new descendant appears),
    so nothing can fork away, then every process is killed (SIGKILL). The kernel
    papermill starts is in its own session, so killing a process group would miss it.
    """
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    seen: dict[int, psutil.Process] = {}
    for _ in range(20):
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        for q in seen.values():  # the descendants of the already-frozen ones too
            try:
                procs += q.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        new = [q for q in procs if q.pid not in seen]
        if not new:
            break
        for q in new:
            seen[q.pid] = q
            try:
                q.suspend()
            except psutil.NoSuchProcess:
                pass
    for q in seen.values():
        try:
            q.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(seen.values()), timeout=timeout)


@dataclass(frozen=True)
class Run:
    """A finished run: its folder and the contents of its ``results.json``."""

    folder: Path
    results: dict[str, Any]


def to_ipynb(chapter: Chapter, target: Path) -> Path:
    """Write the chapter's MyST notebook as an ``.ipynb`` (jupytext) at ``target``."""
    import jupytext

    nb = jupytext.read(chapter.path)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    for i, cell in enumerate(nb.cells):  # stable ids, so re-made goldens diff only where outputs moved
        cell["id"] = f"cell-{i:03d}"
    jupytext.write(nb, target, fmt="ipynb")
    return target


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


MAX_THREADS = 1024


def check_threads(threads: int | None) -> None:
    """``threads`` is ``None`` or an int in [1, MAX_THREADS]."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise ChapterError(f"--threads must be an int in [1, {MAX_THREADS}]; got {show(threads)}")


def check_runs_dir(path: Path) -> Path:
    """Check, writing nothing, that the runs folder ``path`` can be created and written to.

    Returns it absolute. Raises :class:`ChapterError` (one line) if a part of it is a
    file, or the nearest existing folder is not writable.
    """
    try:
        path = Path(path).expanduser().absolute()
        probe = path
        while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
            probe = probe.parent
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


def _make_runs_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise ChapterError(f"runs folder {show(str(path), 80)} cannot be made or written: "
                           f"{exc.strerror or type(exc).__name__}") from exc


def kernel_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment for a chapter's kernel: this one, plus ``extra``."""
    env = dict(os.environ)
    env.update(extra)
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def cell_timeout(scale: str) -> int | None:
    """Seconds one cell may run at ``scale`` under ``minirepro run`` (``None``: no limit)."""
    return CELL_TIMEOUTS.get(scale, CELL_TIMEOUT)


def failure_line(log_text: str, timeout: int | None) -> str:
    """The one line that says why papermill failed: a cell timeout said plainly, else the
    last exception line of the log (not a separator or a code preview), else its last line."""
    lines = [ln for ln in log_text.splitlines() if ln.strip()]
    if any("CellTimeoutError" in ln for ln in lines):
        return (f"a cell ran longer than {timeout} s, the per-cell limit of `minirepro run` at this "
                f"scale (see papermill.log for the cell)")
    exc = [ln.strip() for ln in lines if _EXCEPTION_LINE.match(ln.strip())]
    return exc[-1] if exc else (lines[-1] if lines else "")


def execute(ipynb: Path, output: Path, params: dict[str, Any], env: dict[str, str],
            cwd: Path, timeout: int | None = CELL_TIMEOUT, log: Path | None = None) -> None:
    """Execute ``ipynb`` with papermill into ``output``; raise ``RuntimeError`` on failure.

    ``timeout``: seconds a cell may take (``None``: no limit).
    """
    pfile = output.parent / ".params.yaml"
    pfile.write_text(yaml.safe_dump(params), encoding="utf-8")
    cmd = [sys.executable, "-m", "papermill", str(ipynb), str(output), "-f", str(pfile),
           "-k", "python3", "--engine", "minirepro", "--cwd", str(cwd), "--no-progress-bar",
           *(["--execution-timeout", str(timeout)] if timeout is not None else []),
           "--log-level", "ERROR"]
    with open(log or os.devnull, "w", encoding="utf-8") as fh:
        # A session of its own: a Ctrl-C in the terminal reaches this process only, which
        # then stops the whole tree (papermill, the kernel, the kernel's children).
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait()
        except BaseException:
            with _signals_ignored():
                stop_process_tree(proc.pid)
                proc.wait()
            raise
    pfile.unlink(missing_ok=True)
    if proc.returncode != 0:
        tail = ""
        if log and log.exists():
            tail = failure_line(log.read_text(encoding="utf-8", errors="replace"), timeout)
        raise RuntimeError(tail or f"papermill exited with status {proc.returncode}")


def run_chapter(name: str, params: dict[str, Any] | None = None, scale: str | None = None,
                runs_dir: Path | None = None, root: Path | None = None,
                threads: int | None = None, quiet_bars: bool = False) -> Run:
    """Run one chapter with ``params`` and return the finished run.

    Args:
        name: chapter name (``caffnet``) or folder name (``07-caffnet``).
        params: parameter overrides, validated against the ``parameters`` cell.
        scale: shorthand for ``params["scale"]``.
        runs_dir: where run folders go (default ``<root>/runs``).
        threads: torch threads inside the kernel (``MINIREPRO_THREADS``).
        quiet_bars: set ``TQDM_DISABLE=1`` in the kernel.

    Raises:
        ChapterError: unknown chapter, parameter or value, out-of-range value, missing
            path, bad ``threads`` or an unusable runs folder (nothing is written).
        RunFailed: the notebook raised; the partial notebook is kept and named.
        Interrupted: SIGINT, SIGTERM or SIGHUP (a ``KeyboardInterrupt``): the process
            tree was stopped and the run marked ``-FAILED``, ``error.txt`` saying so.
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

    runs_dir = check_runs_dir(runs_dir or root / "runs").resolve() / chapter.name
    with stop_signals_raise():
        _make_runs_dir(runs_dir)
        run_id = make_run_id(full_params)
        stage = Path(tempfile.mkdtemp(prefix=f".incomplete-{run_id}-", dir=runs_dir))
        t0 = time.perf_counter()
        output = stage / f"{chapter.name}.ipynb"
        try:
            return _run_in(stage, chapter, params, full_params, run_id, runs_dir, root,
                           threads, quiet_bars)
        except BaseException as exc:
            with _signals_ignored():
                failed = _mark_failed(stage, output, chapter, run_id, runs_dir, exc,
                                      time.perf_counter() - t0)
            if isinstance(exc, KeyboardInterrupt):
                exc.folder = failed  # for the caller's one-line message
            if isinstance(exc, RuntimeError) and not isinstance(exc, RunFailed):
                raise RunFailed(f"chapter {chapter.name!r} failed: {exc}; partial notebook in "
                                f"{failed / (chapter.name + '-FAILED.ipynb')}", failed) from exc
            raise


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children: papermill, and through
    it the kernel and the kernel's workers. A run's difference is its CPU time, which is
    what its cost is on a quiet machine when other work shares the cores."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


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
            run_id: str, runs_dir: Path, root: Path, threads: int | None, quiet_bars: bool) -> Run:
    stage.chmod(0o755)
    (stage / OWNER).write_text(f"{os.getpid()}\n", encoding="utf-8")  # see mark_abandoned
    ipynb = to_ipynb(chapter, stage / ".source.ipynb")
    output = stage / f"{chapter.name}.ipynb"
    extra = {"MINIREPRO_RESULTS": str(stage / ".kernel-results.json"),
             "MINIREPRO_FIGDIR": str(stage / "figures"),
             "MINIREPRO_ROOT": str(root),
             "MINIREPRO_SCALE": str(full_params.get("scale", "book"))}
    if threads is not None:
        extra["MINIREPRO_THREADS"] = str(threads)
        extra["OMP_NUM_THREADS"] = str(threads)
    if quiet_bars:
        extra["TQDM_DISABLE"] = "1"
    t0, cpu0, load = time.perf_counter(), _children_cpu(), os.getloadavg()[0]
    execute(ipynb, output, params, kernel_env(extra), cwd=stage, log=stage / "papermill.log",
            timeout=cell_timeout(str(full_params.get("scale", "book"))))
    seconds, cpu_seconds = time.perf_counter() - t0, _children_cpu() - cpu0
    kernel_results = stage / ".kernel-results.json"
    recorded = json.loads(kernel_results.read_text()) if kernel_results.exists() else {}
    results = {"chapter": chapter.name, "params": full_params,
               "metrics": recorded.get("metrics", {}), "tolerances": recorded.get("tolerances", {}),
               "seeds": recorded.get("seeds", {}), "claims": recorded.get("claims", []),
               "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
               "load": round(load, 2), "run_id": run_id}
    (stage / "params.json").write_text(json.dumps(full_params, indent=2, default=str) + "\n")
    (stage / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    kernel_results.unlink(missing_ok=True)
    (stage / OWNER).unlink(missing_ok=True)
    ipynb.unlink(missing_ok=True)
    final = runs_dir / run_id
    stage.rename(final)
    return Run(final, results)


def expand_grid(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the values in ``grid``, in order (the last name varies fastest)."""
    if not grid:
        return [{}]
    names = list(grid)
    for n in names:
        if not grid[n]:
            raise ChapterError(f"parameter {n!r} was given no values")
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def _sweep_one(name: str, params: dict[str, Any], scale: str | None, runs_dir: Path | None,
               root: Path) -> dict[str, Any]:
    """One run of a sweep, as a record; thread counts are left as in a single run."""
    try:
        run = run_chapter(name, params, scale=scale, runs_dir=runs_dir, root=root, quiet_bars=True)
        return {"params": params, "ok": True, "folder": str(run.folder),
                "metrics": run.results["metrics"], "seconds": run.results["seconds"],
                "verdicts": {c["id"]: c.get("verdict") for c in run.results["claims"]}}
    except RunFailed as exc:
        return {"params": params, "ok": False, "folder": str(exc.folder), "error": str(exc),
                "metrics": {}, "seconds": None, "verdicts": {}}


def sweep(name: str, grid: dict[str, list[Any]], jobs: int = 1, scale: str | None = None,
          backend: str = "loky", runs_dir: Path | None = None, root: Path | None = None,
          metric: str | None = None, scheduler: str | None = None,
          timeout: float | None = None) -> Path:
    """Run a chapter over the grid of parameter values and write a summary.

    Every run is validated before any starts. Runs go through joblib (``backend``:
    ``loky`` for local processes, or any registered joblib backend such as
    ``dask`` or ``ray``). A failing run does not stop the others. Writes
    ``runs/<chapter>/sweep-<id>/`` with ``summary.csv``, ``summary.md``,
    ``summary.json`` and ``sweep.png`` (``metric`` against the first swept
    parameter, mean and spread over the others).

    ``scheduler`` sends the runs to a Dask cluster instead (the ``cluster`` extra):
    ``tcp://HOST:PORT`` for a running scheduler, ``local:N`` for a ``LocalCluster``
    of N worker processes started here (see :func:`sweep_dask`); ``timeout`` bounds
    the whole sweep there.

    Returns:
        The sweep folder.
    """
    root = (root or repo_root()).resolve()
    chapter = get(name, root)
    grid, combos = _checked_grid(chapter, grid, scale)
    _check_sweep_options(chapter, jobs, timeout, metric, root)
    runs_dir = check_runs_dir(runs_dir) if runs_dir is not None else None
    base = check_runs_dir(runs_dir or root / "runs").resolve() / chapter.name
    known = set(base.glob(".incomplete-*")) if base.is_dir() else set()
    failed_before = set(base.glob("*-FAILED")) if base.is_dir() else set()
    t0 = time.perf_counter()
    try:
        with stop_signals_raise():  # SIGTERM/SIGHUP end the sweep like Ctrl-C
            if scheduler is not None:
                rows = sweep_dask(chapter, combos, scale, scheduler, base, root, timeout=timeout)
            else:
                rows = _sweep_joblib(chapter, combos, jobs, backend, scale, runs_dir, root)
    except KeyboardInterrupt as exc:  # the workers (and their kernels) were killed: say so
        _mark_interrupted_sweep(exc, time.perf_counter() - t0, base, chapter, known, failed_before)
        raise
    folder = base / f"sweep-{make_run_id({'grid': grid, 'scale': scale})}"
    folder.mkdir(parents=True)
    write_summary(folder, rows, list(grid), metric)
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


def _sweep_joblib(chapter: Chapter, combos: list[dict[str, Any]], jobs: int, backend: str,
                  scale: str | None, runs_dir: Path | None, root: Path) -> list[dict[str, Any]]:
    """Run the combinations through joblib (``backend``), one record per run."""
    from joblib import Parallel, delayed

    return Parallel(n_jobs=jobs, backend=backend)(
        delayed(_sweep_one)(chapter.name, combo, scale, runs_dir, root)
        for combo in combos)


def _mark_interrupted_sweep(exc: KeyboardInterrupt, elapsed: float, base: Path, chapter: Chapter,
                            known: set[Path], failed_before: set[Path]) -> None:
    """After Ctrl-C or a stop signal: mark the unfinished runs abandoned and say why in the FAILED ones."""
    sig = exc.signame if isinstance(exc, Interrupted) else "SIGINT"
    reason = (f"the sweep was interrupted ({sig}) after {elapsed:.1f} s; "
              f"this run did not finish")
    with _signals_ignored():
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


def _pack(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return buf.getvalue()


def _unpack(payload: bytes, base: Path) -> Path:
    """Write a run folder sent back by a worker under ``base``; return its path."""
    base.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as tar:
        names = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        if len(names) != 1 or any(m.name.startswith("/") or ".." in Path(m.name).parts
                                  for m in tar.getmembers()):
            raise ValueError(f"a worker sent back an unexpected archive: {sorted(names)}")
        tar.extractall(base, filter="data")
    return base / names.pop()


def _remote_one(name: str, params: dict[str, Any], scale: str | None,
                root: str | None) -> dict[str, Any]:
    """Run on a Dask worker: one run in a private folder, sent back as a tar.gz payload.

    The worker may be on another host: nothing is shared but this return value. The
    worker uses its own copy of the book (``root``, else ``MINIREPRO_ROOT`` or the
    installed repository) and reports which notebook it ran (``notebook_sha``).
    """
    import socket

    book_root = Path(root) if root else repo_root()
    chapter = get(name, book_root)
    with tempfile.TemporaryDirectory(prefix="minirepro-worker-") as tmp:
        row = _sweep_one(chapter.name, params, scale, Path(tmp), book_root)
        folder = Path(row["folder"])
        row["payload"] = _pack(folder)
    row["host"] = socket.gethostname()
    row["notebook_sha"] = hashlib.sha256(chapter.path.read_bytes()).hexdigest()[:12]
    return row


def _lost_run(base: Path, params: dict[str, Any], error: str) -> dict[str, Any]:
    """A run whose worker died (or that timed out): a local ``-FAILED`` folder says so."""
    folder = base / f"{make_run_id(params)}-FAILED"
    folder.mkdir(parents=True)
    (folder / "params.json").write_text(json.dumps(params, indent=2, default=str) + "\n")
    (folder / "error.txt").write_text(f"{error}\n", encoding="utf-8")
    return {"params": params, "ok": False, "folder": str(folder), "error": error,
            "metrics": {}, "seconds": None, "verdicts": {}}


def sweep_dask(chapter: Chapter, combos: list[dict[str, Any]], scale: str | None, scheduler: str,
               base: Path, root: Path, timeout: float | None = None) -> list[dict[str, Any]]:
    """Run ``combos`` on a Dask cluster; every run's folder comes back under ``base``.

    ``scheduler`` is ``tcp://HOST:PORT`` (a running ``dask scheduler``; its workers
    use their own install of the book) or ``local:N`` (a ``LocalCluster`` of N worker
    processes on 127.0.0.1, using this book). A worker that dies mid-run has its run
    re-scheduled on another worker by the Dask scheduler (up to its
    ``allowed-failures``); a run that is still lost, or not done within ``timeout``
    seconds, is reported FAILED with a local folder saying why, never dropped.
    """
    try:
        from distributed import Client, as_completed
    except ImportError as exc:
        raise ChapterError("--scheduler needs the cluster extra: pip install 'minirepro[cluster]'") from exc

    cluster, address, worker_root = _dask_scheduler(scheduler, root)
    local_sha = hashlib.sha256(chapter.path.read_bytes()).hexdigest()[:12]
    rows: list[dict[str, Any] | None] = [None] * len(combos)
    try:
        with Client(address, timeout="30s") as client:
            futures = {client.submit(_remote_one, chapter.name, combo, scale, worker_root,
                                     pure=False, key=f"{chapter.name}-{i}-{make_run_id(combo)}"): i
                       for i, combo in enumerate(combos)}
            done = as_completed(list(futures), with_results=False, timeout=timeout)
            try:
                for fut in done:
                    rows[futures[fut]] = _dask_row(fut, combos[futures[fut]], base, local_sha)
            except TimeoutError:
                pass
            for fut, i in futures.items():
                if rows[i] is None:
                    fut.cancel()
                    rows[i] = _lost_run(base, combos[i], f"not finished within the sweep's "
                                                         f"timeout of {timeout} s")
    finally:
        if cluster is not None:
            cluster.close()
    return [r for r in rows if r is not None]


def _dask_scheduler(scheduler: str, root: Path) -> tuple[Any, str, str | None]:
    """``(cluster, address, worker_root)`` for ``--scheduler``; ``local:N`` starts a LocalCluster here."""
    from distributed import LocalCluster

    cluster = None
    if scheduler.startswith("local:"):
        try:
            n = int(scheduler.split(":", 1)[1])
        except ValueError:
            n = 0
        if n < 1:
            raise ChapterError(f"--scheduler local:N needs N >= 1 workers, got {scheduler!r}")
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               host="127.0.0.1", dashboard_address=None)
        address, worker_root = cluster.scheduler_address, str(root)
    elif scheduler.startswith(("tcp://", "tls://")):
        address, worker_root = scheduler, None
    else:
        raise ChapterError(f"--scheduler expects tcp://HOST:PORT or local:N, got {scheduler!r}")
    return cluster, address, worker_root


def _dask_row(fut: Any, params: dict[str, Any], base: Path, local_sha: str) -> dict[str, Any]:
    """A finished future's record, its run folder unpacked under ``base`` (a lost run if it failed)."""
    try:
        row = fut.result()
    except Exception as exc:  # the worker died too often, or the task raised
        return _lost_run(base, params, f"the run was lost on the cluster: "
                                       f"{type(exc).__name__}: {exc}")
    folder = _unpack(row.pop("payload"), base)
    row["folder"] = str(folder)
    if row.get("notebook_sha") != local_sha:
        row["warning"] = (f"the worker on {row.get('host')} ran another version of "
                          f"the notebook ({row.get('notebook_sha')} here {local_sha})")
        print(f"minirepro: {row['warning']}", file=sys.stderr)
    return row


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


def write_summary(folder: Path, rows: list[dict[str, Any]], swept: list[str],
                  metric: str | None = None) -> None:
    """Write the sweep table (csv, md, json) and a plot of ``metric``."""
    import pandas as pd

    records = []
    for row in rows:
        rec = {**row["params"], "status": "ok" if row["ok"] else "FAILED",
               "seconds": row["seconds"], **{f"metric:{k}": v for k, v in row["metrics"].items()},
               **{f"claim:{k}": v for k, v in row["verdicts"].items()}, "folder": row["folder"]}
        records.append(rec)
    df = pd.DataFrame(records)
    df.to_csv(folder / "summary.csv", index=False)
    (folder / "summary.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")
    shown = df.drop(columns=["folder"]).rename(columns=lambda c: c.split(":", 1)[-1])
    (folder / "summary.md").write_text(_markdown_table(shown) + "\n")
    numeric = [c for c in df.columns if c.startswith("metric:") and pd.api.types.is_numeric_dtype(df[c])]
    if metric is not None and f"metric:{metric}" not in df.columns:  # not checkable in advance
        print(f"minirepro: metric {show(metric)} was not recorded (recorded: "
              f"{', '.join(c[7:] for c in numeric[:10]) or '(none)'}); plotting "
              f"{numeric[0][7:] if numeric else 'nothing'}", file=sys.stderr)
        metric = None
    if metric is not None:
        col = f"metric:{metric}"
    elif numeric:
        col = numeric[0]
    else:
        return
    _plot_sweep(df[df.status == "ok"], swept, col, folder / "sweep.png")


def _markdown_table(df) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join("" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
                                       for v in r.tolist()) + " |")
    return "\n".join(lines)


def _plot_sweep(df, swept: list[str], col: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from minirepro.core.plotting import use_style

    if df.empty or not swept:
        return
    use_style()
    x = next((p for p in swept if p != "seed"), swept[0])
    hue = [p for p in swept if p not in (x, "seed")]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    groups = df.groupby(hue) if hue else [("all", df)]
    for key, sub in groups:
        stats = sub.groupby(x)[col].agg(["mean", "std", "count"]).reset_index()
        label = ", ".join(f"{h}={k}" for h, k in zip(hue, key if isinstance(key, tuple) else (key,))) or col[7:]
        categorical = x == "seed" or not pd.api.types.is_numeric_dtype(stats[x])
        xs = stats[x].astype(str) if categorical else stats[x]
        ax.errorbar(xs, stats["mean"], yerr=stats["std"].fillna(0), marker="o", capsize=3,
                    linestyle="none" if categorical else "-", label=label)
    if x == "seed" and len(df) > 1:  # seeds are replicates: show their mean and spread
        mean, std = df[col].mean(), df[col].std()
        ax.axhline(mean, color="0.3", linestyle="--", linewidth=1, label=f"mean {mean:.4g} (std {std:.2g})")
    ax.set_xlabel(x)
    ax.set_ylabel(col[7:])
    ax.set_title(f"{col[7:]} against {x}" + (" (mean and std over seeds)" if "seed" in swept and x != "seed" else ""))
    ax.legend()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


GOLDEN_SCALE = "smoke"


def make_golden(name: str, root: Path | None = None) -> Path:
    """Execute a chapter at smoke scale and store it as ``tests/goldens/<slug>.ipynb``.

    Beside it goes ``<slug>.results.json``: the metrics (with their declared
    tolerances) and claims of that execution, which the golden test compares with a
    fresh execution (:mod:`minirepro.goldens`). Bars are off (``TQDM_DISABLE=1``) and
    one thread count is fixed, so the stored outputs are what nbval will see. A failed
    execution is kept in ``runs/goldens/<chapter>-FAILED/`` with its log.
    """
    import nbformat

    from minirepro.goldens import results_path

    root = (root or repo_root()).resolve()
    chapter = get(name, root)
    target = root / "tests" / "goldens" / f"{chapter.slug}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        ipynb = to_ipynb(chapter, tmpdir / "source.ipynb")
        out = tmpdir / "golden.ipynb"
        record = tmpdir / "results.json"
        env = kernel_env({"MINIREPRO_SCALE": GOLDEN_SCALE, "TQDM_DISABLE": "1",
                          "MINIREPRO_ROOT": str(root), "MINIREPRO_RESULTS": str(record)})
        env.pop("MINIREPRO_FIGDIR", None)
        try:
            with stop_signals_raise():  # SIGTERM/SIGHUP: the kernel's tree is stopped, no golden
                execute(ipynb, out, {"scale": GOLDEN_SCALE} if "scale" in chapter.parameters else {},
                        env, cwd=target.parent, log=tmpdir / "papermill.log")
        except RuntimeError as exc:
            kept = root / "runs" / "goldens" / f"{chapter.name}-FAILED"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(tmpdir, kept)
            raise RunFailed(f"golden for {chapter.name!r} failed: {exc}; log and partial notebook "
                            f"in {kept}", kept) from exc
        nb = nbformat.read(out, as_version=4)
        recorded = json.loads(record.read_text(encoding="utf-8")) if record.exists() else {}
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:  # timings would make every re-made golden differ
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
    nbformat.write(nb, target)
    stored = {"chapter": chapter.name, "metrics": recorded.get("metrics", {}),
              "tolerances": recorded.get("tolerances", {}), "claims": recorded.get("claims", [])}
    results_path(target).write_text(json.dumps(stored, indent=2, default=str) + "\n", encoding="utf-8")
    return target
