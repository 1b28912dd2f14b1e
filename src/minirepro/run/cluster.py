"""Sweeps on a Dask cluster: every run's folder comes back to the submitting machine.

``tcp://HOST:PORT`` (a running scheduler whose workers use their own install of the
book) or ``local:N`` (a ``LocalCluster`` of N worker processes on 127.0.0.1).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from minirepro import chapters
from minirepro.chapters import Chapter, ChapterError, repo_root
from minirepro.run.folder import make_run_id, run_record


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
    installed repository) and reports which notebook it ran (``notebook_sha``). The chapter
    is resolved here, by name, in the worker's own book: a separate process, maybe on another host.
    """
    import socket

    book_root = Path(root) if root else repo_root()
    chapter = chapters.get(name, book_root)
    with tempfile.TemporaryDirectory(prefix="minirepro-worker-") as tmp:
        row = run_record(chapter, params, scale, Path(tmp), book_root)
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


CONNECT_TIMEOUT = "5s"  # to reach a scheduler (dask's own default, 30 s, hangs on a typo'd address)


def connect_timeout() -> str:
    """How long to try to reach a scheduler: dask's ``distributed.comm.timeouts.connect``
    when set in the environment (``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=30s``),
    else :data:`CONNECT_TIMEOUT`."""
    return os.environ.get("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT") or CONNECT_TIMEOUT


def sweep_dask(chapter: Chapter, combos: list[dict[str, Any]], scale: str | None, scheduler: str,
               base: Path, root: Path, timeout: float | None = None,
               on_done: Any = None) -> list[dict[str, Any]]:
    """Run ``combos`` on a Dask cluster; every run's folder comes back under ``base``.

    ``scheduler`` is ``tcp://HOST:PORT`` (a running ``dask scheduler``; its workers
    use their own install of the book) or ``local:N`` (a ``LocalCluster`` of N worker
    processes on 127.0.0.1, using this book). A worker that dies mid-run has its run
    re-scheduled on another worker by the Dask scheduler (up to its
    ``allowed-failures``); a run that is still lost, or not done within ``timeout``
    seconds, is reported FAILED with a local folder saying why, never dropped.
    ``on_done(record)`` is called as each run comes back.

    Raises:
        ChapterError: the scheduler cannot be reached within :func:`connect_timeout`
            (one line; nothing was submitted or written).
    """
    try:
        from distributed import Client, as_completed
    except ImportError as exc:
        raise ChapterError("--scheduler needs the cluster extra: pip install 'minirepro[cluster]'") from exc

    cluster, address, worker_root = _dask_scheduler(scheduler, root)
    local_sha = hashlib.sha256(chapter.path.read_bytes()).hexdigest()[:12]
    rows: list[dict[str, Any] | None] = [None] * len(combos)
    try:
        client = _connect(Client, address, scheduler)
        with client:
            futures = {client.submit(_remote_one, chapter.name, combo, scale, worker_root,
                                     pure=False, key=f"{chapter.name}-{i}-{make_run_id(combo)}"): i
                       for i, combo in enumerate(combos)}
            done = as_completed(list(futures), with_results=False, timeout=timeout)
            try:
                for fut in done:
                    rows[futures[fut]] = _dask_row(fut, combos[futures[fut]], base, local_sha)
                    if on_done is not None:
                        on_done(rows[futures[fut]])
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


def _connect(client_class: Any, address: str, scheduler: str) -> Any:
    """A connected ``Client``, or one line saying the scheduler could not be reached."""
    import logging

    wait = connect_timeout()
    _probe(address, scheduler, wait)
    quiet = [logging.getLogger(n) for n in ("distributed.client", "distributed.comm", "distributed.core")]
    levels = [lg.level for lg in quiet]
    for lg in quiet:  # the retries' log lines and tracebacks are not for the terminal
        lg.setLevel(logging.CRITICAL)
    try:
        return client_class(address, timeout=wait)
    except (OSError, TimeoutError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ChapterError(f"cannot reach the Dask scheduler at {scheduler} within {wait} "
                           f"({type(exc).__name__}: {why[:120]}); is `dask scheduler` running there?"
                           ) from None
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)


def _probe(address: str, scheduler: str, wait: str) -> None:
    """Open and close a TCP connection to ``address`` first: a refused port or an unknown
    host fails at once (dask would retry it until its timeout)."""
    import socket
    from urllib.parse import urlsplit

    from dask.utils import parse_timedelta

    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or not port:
        raise ChapterError(f"--scheduler {scheduler!r} has no host and port (expected tcp://HOST:PORT)")
    try:
        with socket.create_connection((host, port), timeout=parse_timedelta(wait)):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise ChapterError(f"cannot reach the Dask scheduler at {scheduler}: {why}; "
                           "is `dask scheduler` running there?") from None


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

