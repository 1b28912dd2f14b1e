"""Building the book with Jupyter Book 1.x, with a cache that follows the code.

jupyter-cache keys a notebook only on its code cells and kernel, so a change in
``src/`` would leave the book showing results of old code. ``build`` therefore
keeps one cache folder per scale and per hash of everything the notebooks read
besides their own cells (``src/``, ``book/claims/``, ``book/papers.yml``), and
removes the stale folders of that scale.

Parallel execution (``jobs``): before Sphinx runs, the notebooks of the table of
contents are executed in ``jobs`` processes into that same cache, read exactly
as myst-nb reads them (``read_myst_markdown_notebook``) and executed as myst-nb
executes them (``single_nb_execution``, in the notebook's folder, the same
timeout and environment), so that Sphinx then finds every notebook in the cache
("Using cached notebook") and executes none itself. The chapters
(``notebooks/``) run first; the front-matter pages that execute code
(``book/ledger.md``, ``book/papers.md``, ...) run after them. Thread counts are
not touched: a chapter runs with the same environment as in a serial build. Each
notebook runs in a fresh worker process, whose finished children (the kernel and what
it started) give the notebook's peak resident memory (``peak_mb``, kept in
``execution.json`` and in the cache record, so a cached notebook keeps its figure).

The build tells the book's Sphinx extension (``book/_ext/minirepro_pages.py``) its
scale, its results folder and its execution record (``minirepro_scale``,
``minirepro_results_dir``, ``minirepro_execution``): a build below book scale shows a
banner on every page, and the execution-status page (``book/status.md``) lists each
chapter's scale, time, peak memory, pass or fail and verdict counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import yaml

from minirepro.chapters import repo_root
from minirepro.core.scale import resolve_scale
from minirepro.core.toc import toc_files

CELL_TIMEOUT = 300  # seconds a cell may take in the book build


def inputs_hash(root: Path) -> str:
    """Hash of the files whose change must re-execute the notebooks."""
    h = hashlib.sha256()
    files = sorted([*(root / "src").rglob("*.py"), *(root / "book" / "claims").rglob("*.json"),
                    root / "book" / "papers.yml"])
    for f in files:
        if f.is_file() and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def default_jobs(n_notebooks: int) -> int:
    """The cores this process may use, at most ``n_notebooks`` (and at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, n_notebooks))


def _md_config(root: Path):
    from myst_parser.config.main import MdParserConfig

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")) or {}
    exts = (config.get("parse") or {}).get("myst_enable_extensions") or []
    return MdParserConfig(enable_extensions=set(exts))


def read_notebook(path: Path, md_config=None):
    """Read a MyST-markdown notebook exactly as myst-nb does for the build (and its cache)."""
    from myst_nb.core.read import read_myst_markdown_notebook

    return read_myst_markdown_notebook(path.read_text("utf8"), config=md_config,
                                       add_source_map=True, path=str(path))


def executable_notebooks(root: Path) -> tuple[list[Path], list[Path]]:
    """The toc's notebooks with code cells: ``(chapters, front_matter)``, in toc order.

    Chapters are the files under ``notebooks/``; every other executing page (the
    ledger, the list of papers) is front matter and runs after the chapters.
    """
    from myst_nb.core.read import is_myst_markdown_notebook

    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8")) or {}
    chapters, front = [], []
    for name in dict.fromkeys(toc_files(toc)):
        path = root / name if name.endswith(".md") else root / f"{name}.md"
        if not path.is_file():
            continue
        text = path.read_text("utf8")
        if not is_myst_markdown_notebook(text) or "{code-cell}" not in text:
            continue
        (chapters if Path(name).parts[0] == "notebooks" else front).append(path.resolve())
    return chapters, front


def _execute_one(path: str, env: dict[str, str], timeout: int, exts: list[str]) -> dict[str, Any]:
    """Run in a worker process: execute one notebook as myst-nb would; return it as JSON."""
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution
    from myst_parser.config.main import MdParserConfig

    os.environ.clear()
    os.environ.update(env)
    started = time.time()
    peak0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    nb = read_notebook(Path(path), MdParserConfig(enable_extensions=set(exts)))
    from minirepro.kernels import SHUTDOWN, AsyncIPCKernelManager

    try:
        result = single_nb_execution(nb, cwd=str(Path(path).parent), timeout=timeout,
                                     allow_errors=False, meta_override=True,
                                     kernel_manager_class=AsyncIPCKernelManager,
                                     shutdown_kernel=SHUTDOWN)
    except Exception:  # noqa: BLE001 - a kernel that would not start: report, don't crash the pool
        return {"path": path, "seconds": round(time.time() - started, 2), "started": started,
                "ended": time.time(), "error": traceback.format_exc(), "notebook": None,
                "peak_mb": None}
    return {"path": path, "seconds": result.time, "started": started, "ended": time.time(),
            "error": result.exc_string if result.err is not None else None,
            "notebook": None if result.err is not None else nbformat.writes(nb),
            "peak_mb": _peak_mb(peak0)}


def _peak_mb(before_kb: int) -> float | None:
    """The peak resident memory (MB) of this process's largest finished child (the kernel),
    if it ran in this process alone (``ru_maxrss`` of children is a maximum, not a sum)."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    if peak <= 0 or peak < before_kb:
        return None
    return round(peak / 1024, 1)


def preexecute(root: Path, cache_path: Path, env: dict[str, str], jobs: int,
               timeout: int = CELL_TIMEOUT, report_dir: Path | None = None) -> dict[str, Any]:
    """Execute the book's notebooks missing from the cache in ``jobs`` processes; cache them.

    The chapters run first, then the front matter. Notebooks already cached (same code
    cells and kernel) are skipped. Returns a record: per notebook its seconds, start and
    end times, and whether it was executed, cached already, or failed.

    Raises:
        RuntimeError: a notebook raised; its traceback is in ``report_dir``.
    """
    from jupyter_cache import get_cache

    md_config = _md_config(root)
    exts = sorted(md_config.enable_extensions)
    cache = get_cache(str(cache_path))
    chapters, front = executable_notebooks(root)
    record: dict[str, Any] = {"jobs": jobs, "notebooks": {}}
    failed = []
    t0 = time.perf_counter()
    for phase in (chapters, front):
        # The front matter (the ledger) reads what the chapters computed in this build:
        # when any chapter ran, it runs again even if its own cells are cached.
        rerun = phase is front and any(e.get("status") == "executed"
                                       for e in record["notebooks"].values())
        todo = _not_cached(phase, rerun, cache, md_config, root, record)
        if not todo:
            continue
        _execute_phase(todo, root, cache, env, jobs, timeout, exts, report_dir, record, failed)
        if failed:
            break  # the front matter runs only after every chapter succeeded
    record["seconds"] = round(time.perf_counter() - t0, 2)
    if failed:
        where = f"; tracebacks in {report_dir}" if report_dir is not None else ""
        raise RuntimeError(f"the book build failed: {', '.join(failed)} raised during execution{where}")
    return record


def _not_cached(phase: list[Path], rerun: bool, cache: Any, md_config: Any, root: Path,
                record: dict[str, Any]) -> list[Path]:
    """The notebooks of ``phase`` to execute (all if ``rerun``); the cached ones are recorded."""
    todo = []
    for path in phase:
        if rerun:
            todo.append(path)
            continue
        try:
            hit = cache.match_cache_notebook(read_notebook(path, md_config))
        except KeyError:
            todo.append(path)
            continue
        data = hit.data or {}
        record["notebooks"][str(path.relative_to(root))] = {
            "status": "cached", "seconds": data.get("execution_seconds"),
            "peak_mb": data.get("peak_mb"), "executed_at": hit.created.isoformat(timespec="seconds")}
    return todo


def _execute_phase(todo: list[Path], root: Path, cache: Any, env: dict[str, str], jobs: int,
                   timeout: int, exts: list[str], report_dir: Path | None,
                   record: dict[str, Any], failed: list[str]) -> None:
    """Execute ``todo`` in a pool of spawned processes; record, cache or report each result."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    # a fresh worker per notebook: its children's peak memory is that notebook's alone
    with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx,
                             max_tasks_per_child=1) as pool:
        futures = [pool.submit(_execute_one, str(p), env, timeout, exts) for p in todo]
        for fut in futures:
            res = fut.result()
            rel = str(Path(res["path"]).relative_to(root))
            record["notebooks"][rel] = _executed_entry(res, rel, cache, report_dir, failed)


def _executed_entry(res: dict[str, Any], rel: str, cache: Any, report_dir: Path | None,
                    failed: list[str]) -> dict[str, Any]:
    """One executed notebook's record entry: cached if it ran, its traceback reported if it failed."""
    import nbformat
    from jupyter_cache.base import CacheBundleIn

    entry = {k: res[k] for k in ("seconds", "started", "ended", "peak_mb")}
    if res["error"] is not None:
        entry["status"] = "failed"
        failed.append(rel)
        if report_dir is not None:
            report_dir.mkdir(parents=True, exist_ok=True)
            log = report_dir / (rel.replace("/", "_") + ".err.log")
            log.write_text(res["error"], encoding="utf-8")
            entry["report"] = str(log)
        print(f"minirepro book: {rel} failed", flush=True)
    else:
        nb = nbformat.reads(res["notebook"], as_version=4)
        cache.cache_notebook_bundle(
            CacheBundleIn(nb, res["path"], data={"execution_seconds": res["seconds"],
                                                 "peak_mb": res["peak_mb"]}),
            check_validity=False, overwrite=True)
        entry["status"] = "executed"
        print(f"minirepro book: executed {rel} in {res['seconds']:.1f} s", flush=True)
    return entry


def apply_repository(config: dict[str, Any], url: str | None = None) -> dict[str, Any]:
    """The repository is one setting: ``repository.url`` in ``_config.yml``, or
    ``MINIREPRO_REPO_URL`` (``url``), which wins. Set, the pages get the Repository,
    Open issue and Binder buttons; unset (empty), none of them, so that no button
    points at a repository that does not exist. Colab is never offered: it cannot
    open the chapters' MyST-markdown sources."""
    repo = config.setdefault("repository", {}) or {}
    config["repository"] = repo
    url = (url if url is not None else repo.get("url") or "").strip()
    repo["url"] = url
    html = config.setdefault("html", {}) or {}
    config["html"] = html
    for button in ("use_repository_button", "use_issues_button"):
        html[button] = bool(url)
    html["use_edit_page_button"] = False
    launch = config.setdefault("launch_buttons", {}) or {}
    config["launch_buttons"] = launch
    launch["binderhub_url"] = "https://mybinder.org" if url else ""
    launch.setdefault("notebook_interface", "jupyterlab")
    for other in ("colab_url", "jupyterhub_url", "deepnote_url"):
        launch[other] = ""
    launch["thebe"] = False
    return config


def build(scale: str | None = None, root: Path | None = None, strict: bool = True,
          timeout: int = CELL_TIMEOUT, jobs: int | None = None) -> Path:
    """Build the whole book at ``scale``; return the path of ``index.html``.

    Args:
        jobs: notebooks executed at once before Sphinx renders (default: the cores,
            at most the number of notebooks); ``0`` leaves execution to Sphinx (serial).

    The Sphinx log is kept in ``_build/<scale>/build.log``, the record of the
    parallel execution in ``_build/<scale>/execution.json``.

    Raises:
        ValueError: a page of the table of contents has two sources (``caffnet.md`` and a
            stray ``caffnet.ipynb``); nothing is built.
        RuntimeError: the build failed (a notebook raised, a warning under ``strict``).
    """
    root = (root or repo_root()).resolve()
    scale = resolve_scale(scale)
    check_sources(root)
    out = root / "_build" / scale
    cache = _current_cache(root, scale)
    derived = _derived_config(root, out, cache, timeout, scale)
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(root),
           "--config", str(derived), "--path-output", str(out), "--keep-going"]
    if strict:
        cmd += ["-W", "-n"]
    env = _build_env(root, out, scale, cache)
    if jobs is None:
        jobs = default_jobs(sum(map(len, executable_notebooks(root))))
    if jobs < 0:
        raise ValueError(f"-j must be 0 or more, got {jobs}")
    if jobs > 0:
        record = preexecute(root, cache, env, jobs, timeout, report_dir=out / "reports")
        (out / "execution.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    returncode = _run_sphinx(cmd, root, env, out)
    return _built_index(out, returncode)


SOURCE_SUFFIXES = (".md", ".ipynb", ".myst", ".rst")


def check_sources(root: Path) -> None:
    """Each page of ``_toc.yml`` has exactly one source file.

    A ``notebooks/07-caffnet/caffnet.ipynb`` beside ``caffnet.md`` (``jupytext --to
    ipynb`` without ``-o`` writes one there) is a second source for the same page: Sphinx
    then warns, and under ``-W`` fails, after minutes of execution. Refused at once.

    Raises:
        ValueError: one line naming the stray file.
    """
    toc = root / "_toc.yml"
    if not toc.is_file():
        return
    for name in dict.fromkeys(toc_files(yaml.safe_load(toc.read_text(encoding="utf-8")) or {})):
        stem = root / (name[: -len(Path(name).suffix)] if Path(name).suffix in SOURCE_SUFFIXES else name)
        found = [stem.with_name(stem.name + sfx) for sfx in SOURCE_SUFFIXES
                 if stem.with_name(stem.name + sfx).is_file()]
        if len(found) > 1:  # found[0] is the .md when there is one (SOURCE_SUFFIXES' order)
            stray = found[1]
            raise ValueError(f"{stray.relative_to(root)} beside {found[0].name}: two sources for one "
                             f"page; delete {stray.name} (convert a chapter into a folder of your "
                             "own: README.md, 'Plain papermill works too')")


def _current_cache(root: Path, scale: str) -> Path:
    """The execution cache of this scale and these inputs; the scale's older caches are removed."""
    cache_root = root / "_build" / ".jupyter_cache"
    key = f"{scale}-{inputs_hash(root)}"
    cache = cache_root / key
    if cache_root.exists():
        for old in cache_root.glob(f"{scale}-*"):
            if old.name != key:
                shutil.rmtree(old, ignore_errors=True)
    return cache


def _derived_config(root: Path, out: Path, cache: Path, timeout: int, scale: str = "book") -> Path:
    """Write ``_config.yml`` with this build's repository, cache, timeout and scale to ``out``;
    its path. The scale, results folder and execution record go to the book's Sphinx
    extension as ``minirepro_scale``, ``minirepro_results_dir`` and ``minirepro_execution``."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    apply_repository(config, os.environ.get("MINIREPRO_REPO_URL"))
    local = (config.get("sphinx") or {}).get("local_extensions") or {}
    for name, folder in local.items():  # the derived config lives elsewhere: absolute paths
        local[name] = str((root / folder).resolve())
    config.setdefault("execute", {})
    config["execute"].update({"execute_notebooks": "cache", "cache": str(cache),
                              "timeout": timeout, "allow_errors": False})
    if "minirepro_pages" in local:  # the extension that declares these values (else: a warning)
        sphinx = config.setdefault("sphinx", {}) or {}
        config["sphinx"] = sphinx
        sphinx_config = sphinx.setdefault("config", {}) or {}
        sphinx["config"] = sphinx_config
        sphinx_config.update({"minirepro_scale": scale, "minirepro_results_dir": str(out / "results"),
                              "minirepro_execution": str(out / "execution.json")})
    out.mkdir(parents=True, exist_ok=True)
    derived = out / "_config.derived.yml"
    derived.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return derived


def _build_env(root: Path, out: Path, scale: str, cache: Path) -> dict[str, str]:
    """The kernels' environment: the scale, no progress bars, and this build's results folder."""
    # HF_HUB_DISABLE_PROGRESS_BARS: transformers' own "Loading weights" bar ignores TQDM_DISABLE
    # and, with ipywidgets installed (otter-grader brings it), would embed a widget whose page
    # then fetches require.js from a CDN.
    env = dict(os.environ, MINIREPRO_SCALE=scale, TQDM_DISABLE="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               PYTHONHASHSEED="0", MINIREPRO_ROOT=str(root))
    env.pop("MINIREPRO_RESULTS", None)
    # Each chapter's kernel writes its results record to _build/<scale>/results/<slug>.json
    # (minirepro.claims.results); the ledger page of this build reads them. A new cache (the code
    # changed) re-executes every chapter, so the records of the old one go.
    results_dir = out / "results"
    if not cache.exists():
        shutil.rmtree(results_dir, ignore_errors=True)
    results_dir.mkdir(parents=True, exist_ok=True)
    env["MINIREPRO_RESULTS_DIR"] = str(results_dir)
    env.pop("MINIREPRO_FIGDIR", None)
    return env


def _run_sphinx(cmd: list[str], root: Path, env: dict[str, str], out: Path) -> int:
    """Run ``jupyter-book build``, its output both shown and kept in ``build.log``; its exit code."""
    t0 = time.perf_counter()
    with open(out / "build.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        proc.wait()
    print(f"minirepro book: Sphinx took {time.perf_counter() - t0:.1f} s", flush=True)
    return proc.returncode


def _built_index(out: Path, returncode: int) -> Path:
    """The built ``index.html``; raise, naming the execution reports, if the build failed."""
    index = out / "_build" / "html" / "index.html"
    reports = sorted((out / "_build" / "html" / "reports").glob("**/*.err.log")) \
        if (out / "_build" / "html" / "reports").exists() else []
    if returncode != 0 or not index.exists():
        where = "; execution reports: " + ", ".join(str(r) for r in reports) if reports else ""
        raise RuntimeError(f"the book build failed (exit {returncode}){where}")
    return index
