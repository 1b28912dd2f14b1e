"""Formula evaluation in worker processes with a hard deadline and a memory cap.

A Python thread cannot be stopped in the middle of a call. One formula with
sixty 100,000-cell ranges holds the interpreter for tens of seconds inside a
single cell, so a deadline checked between cells cannot stop it. Each evaluation
therefore runs in a worker process:

- the worker's address space may grow by at most ``memory_mb`` MB
  (``resource.setrlimit(RLIMIT_AS)``); past that the worker reports that the
  memory ran out and exits;
- the worker keeps the soft deadline itself and returns what it has; if it has
  not answered ``GRACE_FACTOR * timeout_s + GRACE_S`` seconds after the request,
  it is killed (SIGKILL) and the evaluation is reported incomplete;
- workers are pooled, and each evaluation checks one out for itself, so no lock
  is held while a formula runs: a slow workbook occupies one worker, not the
  others. At most ``MAX_WORKERS`` evaluations run at once; more wait for a free
  worker, for at most one hard deadline.

A worker is a fresh ``python -c`` process (not a fork: it inherits none of the
caller's threads, and unlike ``multiprocessing`` it never re-runs the caller's
main script), talking over two pipes. Starting one costs the import of
``formulas`` (about a second), paid once per pool slot and again only after a
worker is killed. A worker exits when its caller does (its pipe closes), so none
is left behind.
"""

from __future__ import annotations

import atexit
import datetime as dt
import os
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path

from minirepro.papers.spreadsheet_arena.engine import (
    Evaluation,
    compile_formula,
    error_texts,
    evaluate_cells,
)

MAX_WORKERS = 4
MAX_IDLE = 2
GRACE_FACTOR, GRACE_S = 1.25, 1.0
STARTUP_S = 120.0
NEAR_CAP = 16 * 2**20  # a peak this close to the memory cap counts as reaching it
_PLAIN = (str, int, float, bool, type(None), dt.datetime, dt.date, dt.time, dt.timedelta)

_lock = threading.Lock()  # guards the idle list only, never an evaluation
_idle: list[_Worker] = []
_slots = threading.BoundedSemaphore(MAX_WORKERS)
_spare = threading.Event()  # set while a spare worker is being started
_WORKER_CODE = "from minirepro.papers.spreadsheet_arena.isolate import worker_main; worker_main()"


def _address_space(field: str = "VmSize") -> int:
    """This process's virtual memory size (``VmSize``) or its peak (``VmPeak``) in bytes; 0 if unknown."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cap_memory(base: int, memory_mb: int) -> int:
    """Cap this process's address space at ``base`` plus ``memory_mb`` MB; returns the cap (0: none)."""
    if not base:  # no /proc (not Linux): the size to add to is unknown; the deadline still holds
        return 0
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return 0
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = base + memory_mb * 2**20
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


class _Special:
    """A value that does not pickle as itself: an Excel error or schedula's EMPTY token."""

    def __init__(self, kind: str, text: str) -> None:
        self.kind, self.text = kind, text


def _encode(values: dict) -> dict:
    import schedula as sh
    from formulas.tokens.operand import XlError

    out = {}
    for k, v in values.items():
        if isinstance(v, XlError):
            v = _Special("error", str(v))
        elif v is sh.EMPTY:
            v = _Special("empty", "")
        elif not isinstance(v, _PLAIN):
            v = str(v)
        out[k] = v
    return out


def _decode(values: dict) -> dict:
    import schedula as sh
    from formulas.tokens.operand import XlError

    return {k: (XlError(v.text) if v.kind == "error" else sh.EMPTY) if isinstance(v, _Special) else v
            for k, v in values.items()}


def _serve(conn_in: Connection, conn_out: Connection) -> None:
    """A worker's loop: evaluate requests until the caller goes away or the memory runs out."""

    compile_formula("=SUM(A1:B2)")  # formulas imports its function modules on first use: not under the cap
    base = _address_space()
    conn_out.send(("ready", None))
    while True:
        try:
            cells, formulas_at, timeout_s, memory_mb, names, sheets = conn_in.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        try:
            cap = _cap_memory(base, memory_mb)
            ev = evaluate_cells(cells, formulas_at, timeout_s, names, sheets)
            if base and cap and _address_space("VmPeak") > cap - NEAR_CAP:
                # The library turns a failed allocation inside a function into #VALUE!; a peak
                # this close to the cap means an allocation was refused, so the values are not
                # to be trusted.
                raise MemoryError
            reply = ("ok", (_encode(ev.values), ev.complete, ev.reason))
        except MemoryError:
            reply = ("memory", None)
        except Exception as exc:  # noqa: BLE001 - reported to the caller as an incomplete evaluation
            reply = ("error", type(exc).__name__)
        try:
            conn_out.send(reply)
        except (OSError, MemoryError):
            return
        if reply[0] != "ok":
            return  # a worker that ran out of memory or failed is not reused


def worker_main() -> None:
    """Entry point of a worker process: ``python -c ... <read fd> <write fd>``."""
    conn_in = Connection(int(sys.argv[1]), writable=False)
    conn_out = Connection(int(sys.argv[2]), readable=False)
    try:
        _serve(conn_in, conn_out)
    except KeyboardInterrupt:
        pass


class _Worker:
    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        package_root = str(Path(__file__).resolve().parents[3])
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
                   [package_root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, close_fds=True)
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.send_conn = Connection(to_child_w, readable=False)
        self.recv_conn = Connection(from_child_r, writable=False)
        try:  # wait for its imports, so that no deadline is spent on them
            ready = self.recv_conn.poll(STARTUP_S) and self.recv_conn.recv()[0] == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.close()
            raise RuntimeError("could not start a formula evaluation worker")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self.send_conn.close()
        self.recv_conn.close()


def _start_spare() -> None:
    try:
        _checkin(_Worker())
    except RuntimeError:
        pass
    finally:
        _spare.clear()


def _checkout() -> _Worker:
    """An idle worker, or a new one; starts a spare in the background when none is left idle."""
    w = None
    with _lock:
        while _idle and w is None:
            w = _idle.pop()
            if not w.alive():
                w.close()
                w = None
        spare = not _idle and not _spare.is_set()
        if spare:
            _spare.set()
    if spare:
        threading.Thread(target=_start_spare, daemon=True, name="formula-worker-spare").start()
    return w if w is not None else _Worker()


def _checkin(w: _Worker) -> None:
    with _lock:
        if len(_idle) < MAX_IDLE and w.alive():
            _idle.append(w)
            return
    w.close()


def warm(n: int = MAX_IDLE) -> None:
    """Start workers until ``n`` (at most ``MAX_IDLE``) are idle, so no evaluation waits for one."""
    with _lock:
        missing = min(n, MAX_IDLE) - len(_idle)
    for _ in range(max(0, missing)):
        _checkin(_Worker())


def run_isolated(cells: dict, formulas_at: list, timeout_s: float, memory_mb: int,
                 names: dict | None = None, sheets: tuple[str, ...] | None = None):
    """Evaluate ``cells`` (with the workbook's defined ``names`` and ``sheets``, see
    :func:`.evaluate.evaluate`) in a worker process; see the module docstring for the guarantees."""

    hard = GRACE_FACTOR * timeout_s + GRACE_S
    if not _slots.acquire(timeout=hard):
        return Evaluation({}, {}, False, f"every evaluation worker stayed busy for {hard:.1f} s")
    try:
        plain = {k: (v if isinstance(v, _PLAIN) else str(v)) for k, v in cells.items()}
        try:
            w = _checkout()
        except RuntimeError as exc:
            return Evaluation({}, {}, False, str(exc))
        try:
            w.send_conn.send((plain, list(formulas_at), float(timeout_s), int(memory_mb),
                              {k: str(v) for k, v in (names or {}).items()},
                              None if sheets is None else tuple(map(str, sheets))))
            if not w.recv_conn.poll(hard):
                w.close()
                return Evaluation({}, {}, False, f"evaluation exceeded {timeout_s} s; its worker "
                                                 "was stopped")
            status, payload = w.recv_conn.recv()
        except (EOFError, OSError):
            w.close()
            return Evaluation({}, {}, False, f"the evaluation worker died (memory cap {memory_mb} MB?)")
        if status != "ok":
            w.close()
            why = (f"evaluation needed more than {memory_mb} MB of memory" if status == "memory"
                   else f"evaluation failed ({payload})")
            return Evaluation({}, {}, False, why)
        _checkin(w)
        values, complete, reason = payload
        values = _decode(values)

        return Evaluation(values, error_texts(values), complete, reason)
    finally:
        _slots.release()


def shutdown() -> None:
    """Stop and reap the idle workers (also run at exit; a worker whose caller dies exits too)."""
    with _lock:
        workers = list(_idle)
        _idle.clear()
    for w in workers:
        w.close()


atexit.register(shutdown)

