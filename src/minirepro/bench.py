"""``minirepro bench``: what each chapter costs, measured, per scale.

Each (chapter, scale) runs in a fresh process (``minirepro run`` in a child
Python: papermill, then a fresh kernel). Recorded per cell:

- ``seconds``: the run's execution time (what ``minirepro run`` reports), and
  ``wall_seconds``: the whole child process, interpreter start included;
- ``peak_rss_mb``: the peak resident memory of the kernel *and its children*,
  the larger of (a) the sum of their RSS polled every ``POLL`` seconds with
  psutil and (b) ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` taken in the child
  after papermill and the kernel were reaped (the largest single process, so a
  peak shorter than the polling interval is still caught);
- ``cpu_seconds``: CPU time (user + system) of the child and everything it started
  (papermill, the kernel, the kernel's workers), from ``getrusage``. The child is a
  subreaper (Linux ``PR_SET_CHILD_SUBREAPER``; ``subreaper`` in the record says whether
  it could be): workers that outlive the kernel (joblib's pool) are re-parented to it
  rather than to init, and it waits for them (up to ``REAP_SECONDS``, then stops them)
  before reading ``getrusage``, so their CPU time counts;
- ``adopted_cpu_seconds``: the part of ``cpu_seconds`` spent by those descendants on
  their own: ``RUSAGE_CHILDREN`` read right after the run returned and again after the
  reap loop; the difference is the CPU time of every process reaped in between (a process's
  own CPU time, whatever the load). The chapters run torch on one
  thread, so on a quiet machine CPU time is close to the wall time; on a
  loaded machine it is the better estimate of the quiet-machine cost, and a cell
  measured under load (load average above the core count) is judged by it;
- the machine's load average before and after, the date and the CPU model.

A cell over its scale's budget (``BUDGETS``: 20 s smoke, 120 s book) is marked
``over``. ``full`` is timed only when asked (``--scales ...,full``), under a cap
(``--cap``): a run stopped at the cap is recorded as "more than cap seconds", a
measured lower bound, never a guess.

``full`` can also be *estimated from measured fractions* (``--estimate``, see
:func:`estimate_full`): the full preset is run with ``n_seeds = n1`` and ``n1 + 1``
(``n1`` = the chapter's smoke seed count, which every notebook accepts), each in a
fresh process, and the time of ``N`` seeds (the full preset's) is read off the line
through the two points, ``t(n) = a + b n``. The two measured runs are kept in the
record beside the estimate, and the table labels it "est.". A chapter whose two
fractions would cost as much as the whole (``2 n1 + 1 >= N``) is timed in full.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from minirepro import chapters as registry  # `chapters` is bench()'s argument
from minirepro.chapters import discover, repo_root

BUDGETS = {"smoke": 20.0, "book": 120.0}  # seconds on a quiet machine (the chapter contract)
POLL = 0.1  # seconds between two memory samples

REAP_SECONDS = 30.0  # how long the child waits for orphaned descendants before stopping them

_CHILD = r"""
import ctypes, json, os, resource, signal, sys, time
from pathlib import Path
from minirepro import chapters
from minirepro.run import RunFailed, run_chapter
chapter, scale, runs, params, reap_seconds = sys.argv[1:6]
# Adopt orphans: a kernel's worker processes (joblib's loky pool) outlive the kernel by
# a moment and would be re-parented to init, so their CPU time would never reach this
# process's RUSAGE_CHILDREN. As a subreaper this process inherits them and waits for them.
try:
    subreaper = ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
except (OSError, AttributeError):
    subreaper = False
out = {"ok": True, "subreaper": subreaper}
try:
    run = run_chapter(chapters.get(chapter), json.loads(params), scale=scale, runs_dir=Path(runs), quiet_bars=True)
    out["seconds"] = run.results["seconds"]
    out["folder"] = str(run.folder)
except RunFailed as exc:
    out.update(ok=False, error=str(exc))
before = resource.getrusage(resource.RUSAGE_CHILDREN)  # papermill and the kernel, reaped by the run
reaped, stopped, deadline = 0, 0, time.monotonic() + float(reap_seconds)
while True:  # wait for every adopted descendant; stop those still running at the deadline
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid:
        reaped += 1
    elif time.monotonic() > deadline:
        import psutil
        for p in psutil.Process().children():
            try:
                p.send_signal(signal.SIGKILL)
                stopped += 1
            except psutil.NoSuchProcess:
                pass
        deadline = float("inf")
    else:
        time.sleep(0.05)
out["descendants_reaped"], out["descendants_stopped"] = reaped, stopped
kids, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
out["children_maxrss_kb"] = kids.ru_maxrss
out["cpu_seconds"] = kids.ru_utime + kids.ru_stime + me.ru_utime + me.ru_stime
out["adopted_cpu_seconds"] = (kids.ru_utime + kids.ru_stime) - (before.ru_utime + before.ru_stime)
print("BENCH " + json.dumps(out))
"""


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _kernel_tree_rss(proc) -> tuple[int, bool]:
    """RSS (bytes) summed over every kernel under ``proc`` and its children; and whether one ran."""
    import psutil

    total, seen = 0, False
    try:
        procs = proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, False
    kernels = []
    for p in procs:
        try:
            if "ipykernel" in " ".join(p.cmdline()):
                kernels.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for k in kernels:
        seen = True
        try:
            for p in [k, *k.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
        except psutil.NoSuchProcess:
            pass
    return total, seen


def measure(chapter: str, scale: str, root: Path | None = None, cap: float | None = None,
            params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one chapter at ``scale`` (with ``params``) in a fresh process; return its time and peak memory."""
    import psutil

    root = (root or repo_root()).resolve()
    ch = registry.get(chapter, root)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="minirepro-bench-") as runs:
        env = dict(os.environ, MINIREPRO_ROOT=str(root), TQDM_DISABLE="1")
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, ch.name, scale, runs,
                                 json.dumps(params or {}), str(REAP_SECONDS)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ps = psutil.Process(proc.pid)
        peak, kernel_seen, stopped = 0, False, False
        while proc.poll() is None:
            rss, seen = _kernel_tree_rss(ps)
            peak, kernel_seen = max(peak, rss), kernel_seen or seen
            if cap is not None and time.perf_counter() - t0 > cap:
                for p in [*ps.children(recursive=True), ps]:
                    try:
                        p.kill()
                    except psutil.NoSuchProcess:
                        pass
                stopped = True
                break
            time.sleep(POLL)
        stdout, _ = proc.communicate()
        wall = time.perf_counter() - t0
    cell: dict[str, Any] = {"chapter": ch.name, "scale": scale, "wall_seconds": round(wall, 1),
                            **({"params": params} if params else {}),
                            "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2),
                            "budget": BUDGETS.get(scale)}
    if stopped:
        cell.update(status="stopped", seconds=None, at_least_seconds=round(cap, 0),
                    peak_rss_mb=round(peak / 2**20, 0) if kernel_seen else None)
        return cell
    line = next((ln for ln in stdout.splitlines() if ln.startswith("BENCH ")), None)
    res = json.loads(line[6:]) if line else {"ok": False, "error": f"exit status {proc.returncode}"}
    maxrss = res.get("children_maxrss_kb", 0) * 1024  # Linux: kilobytes
    cpu = res.get("cpu_seconds")
    cell.update(status="ok" if res["ok"] else "failed", seconds=res.get("seconds"),
                cpu_seconds=round(cpu, 1) if cpu is not None else None,
                peak_rss_mb=round(max(peak, maxrss) / 2**20, 0),
                polled_kernel_rss_mb=round(peak / 2**20, 0), maxrss_mb=round(maxrss / 2**20, 0))
    cell.update({k: res[k] for k in ("subreaper", "descendants_reaped", "descendants_stopped") if k in res})
    if res.get("adopted_cpu_seconds") is not None:
        cell["adopted_cpu_seconds"] = round(res["adopted_cpu_seconds"], 2)
    if not res["ok"]:
        cell["error"] = res.get("error", "")[-300:]
    cell["over"] = is_over(cell)
    return cell


def seed_points(chapter: str, root: Path | None = None) -> tuple[int, int] | None:
    """``(n1, N)`` for :func:`estimate_full`: the smoke and full presets' ``n_seeds``, or ``None``.

    ``None`` when the chapter has no ``n_seeds`` parameter or its fractions would cost as much
    as the whole run (``2 n1 + 1 >= N``): such a chapter is timed in full.
    """
    ch = registry.get(chapter, root)
    if "n_seeds" not in ch.parameters:
        return None
    seeds = ch.presets().get("n_seeds", {})
    n1, n_full = seeds.get("smoke"), seeds.get("full")
    if not n1 or not n_full or 2 * n1 + 1 >= n_full:
        return None
    return int(n1), int(n_full)


def line_through(n1: int, t1: float, n2: int, t2: float, n: int) -> float:
    """``t(n)`` on the line ``t = a + b n`` through ``(n1, t1)`` and ``(n2, t2)``, with ``b >= 0``.

    A negative slope (the second run faster than the first: noise) is read as ``b = 0``,
    so the estimate is never below the larger measured time.
    """
    if n2 == n1:
        raise ValueError("the two fractions need different seed counts")
    b = max(0.0, (t2 - t1) / (n2 - n1))
    return max(t1, t2) + b * (n - max(n1, n2))


def estimate_full(chapter: str, n1: int, n_full: int, root: Path | None = None,
                  cap: float | None = None) -> dict[str, Any]:
    """The full preset's cost, estimated from runs of it at ``n_seeds = n1`` and ``n1 + 1``.

    Each run is a :func:`measure` of the full preset with only ``n_seeds`` changed. The
    time (and the CPU time) of ``n_full`` seeds is read off the line through the two points
    (:func:`line_through`); the peak memory is the larger measured one (seeds run one after
    another, so it does not grow with them). If either run fails or is stopped at ``cap``,
    the cell says so and carries no estimate; a stopped second run still gives a lower
    bound (:func:`stopped_bound`).
    """
    points = []
    for n in (n1, n1 + 1):
        cell = measure(chapter, "full", root, cap=cap, params={"n_seeds": n})
        points.append(cell)
        if cell["status"] != "ok":
            break
    out: dict[str, Any] = {"chapter": points[0]["chapter"], "scale": "full", "n_seeds_full": n_full,
                           "points": [{k: c.get(k) for k in ("params", "status", "seconds", "cpu_seconds",
                                                            "wall_seconds", "peak_rss_mb", "load_before",
                                                            "at_least_seconds")} for c in points],
                           "load_before": points[0]["load_before"], "load_after": points[-1]["load_after"],
                           "budget": None}
    bad = next((c for c in points if c["status"] != "ok"), None)
    if bad is not None:
        out.update(status=bad["status"], seconds=None, peak_rss_mb=bad.get("peak_rss_mb"),
                   at_least_seconds=bad.get("at_least_seconds"), error=bad.get("error", ""))
        return stopped_bound(out, n1)
    return _estimate(out, points, n1, n_full)


def stopped_bound(cell: dict[str, Any], n1: int) -> dict[str, Any]:
    """A lower bound for an estimate whose first run finished and second was stopped at the cap.

    The second run took more than the cap, so the slope is more than ``cap - t1``, and the
    full preset takes more than the line through ``(n1, t1)`` and ``(n1 + 1, cap)`` at ``N``.
    """
    pts = cell.get("points", [])
    if (cell.get("status") == "stopped" and len(pts) == 2 and pts[0]["status"] == "ok"
            and pts[1]["status"] == "stopped"):
        cell["at_least_seconds"] = round(line_through(n1, pts[0]["seconds"], n1 + 1,
                                                      pts[1]["at_least_seconds"], cell["n_seeds_full"]), 0)
        cell["bound"] = (f"{pts[0]['seconds']:.0f} s at {n1} and more than "
                         f"{pts[1]['at_least_seconds']:.0f} s at {n1 + 1}")
    return cell


def _estimate(out: dict[str, Any], points: list[dict[str, Any]], n1: int, n_full: int) -> dict[str, Any]:
    """``out`` with the estimate read off the line through the two finished runs."""
    (a, b) = points
    out.update(status="estimated", seconds=None,
               estimate_seconds=round(line_through(n1, a["seconds"], n1 + 1, b["seconds"], n_full), 0),
               peak_rss_mb=max(a["peak_rss_mb"], b["peak_rss_mb"]),
               method=f"line through runs of the full preset at {n1} and {n1 + 1} of {n_full} seeds")
    if a.get("cpu_seconds") is not None and b.get("cpu_seconds") is not None:
        out["estimate_cpu_seconds"] = round(line_through(n1, a["cpu_seconds"], n1 + 1, b["cpu_seconds"],
                                                         n_full), 0)
    return out


def contended(cell: dict[str, Any]) -> bool:
    """Whether the cell was measured with more runnable processes than cores."""
    return cell.get("load_before", 0) > (cell.get("cores") or os.cpu_count() or 1)


def is_over(cell: dict[str, Any]) -> bool:
    """Over the scale's budget: by wall seconds on a quiet machine, by CPU seconds under load."""
    budget = cell.get("budget") or BUDGETS.get(cell.get("scale", ""))
    if not budget or cell.get("seconds") is None:
        return False
    cost = cell["cpu_seconds"] if contended(cell) and cell.get("cpu_seconds") is not None \
        else cell["seconds"]
    return cost > budget


def bench(scales: list[str], chapters: list[str] | None = None, root: Path | None = None,
          cap: float | None = None, out: Path | None = None, estimate: bool = False) -> Path:
    """Measure every chapter (or ``chapters``) at every scale; merge into ``book/cost.json``.

    With ``estimate``, ``full`` is estimated from two measured fractions
    (:func:`estimate_full`) where the chapter has an ``n_seeds`` parameter and the
    fractions cost less than the whole; otherwise it is timed in full (under ``cap``).

    Cells of an earlier bench that were not re-measured are kept, with their own date,
    so a partial bench adds to the table instead of replacing it. Writes
    ``book/cost.md`` (the table the how-to page includes) beside it.
    """
    root = (root or repo_root()).resolve()
    names = [registry.get(n, root).name for n in chapters] if chapters else [c.name for c in discover(root)]
    out = out or root / "book" / "cost.json"
    old = json.loads(out.read_text()) if out.exists() else {"cells": []}
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}
    cells = {(c["chapter"], c["scale"]): c for c in old.get("cells", [])}
    for name in names:
        for scale in scales:
            pts = seed_points(name, root) if estimate and scale == "full" else None
            if pts is not None:
                cell = estimate_full(name, *pts, root=root, cap=cap)
            else:
                cell = measure(name, scale, root, cap=cap if scale == "full" else None)
            cell.update(date=now, **machine)
            cells[(name, scale)] = cell
            print(f"bench: {name} {scale}: {_cell_text(cell)}, peak {cell.get('peak_rss_mb')} MB "
                  f"(load {cell['load_before']})", flush=True)
            _write(out, cells)  # after every cell: an interrupted bench keeps what it measured
    _write(out, cells)
    return out


def _write(out: Path, cells: dict) -> None:
    record = {"note": "seconds of `minirepro run` per chapter and scale; peak RSS of the kernel "
                      "and its children; load = 1-minute load average when the run started",
              "budgets": BUDGETS, "cells": sorted(cells.values(), key=lambda c: (c["chapter"], c["scale"]))}
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(cost_markdown(record), encoding="utf-8")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _cell_text(cell: dict[str, Any]) -> str:
    if cell.get("status") == "estimated":
        busy = [pt for pt in cell.get("points", []) if contended(dict(pt, cores=cell.get("cores")))]
        if busy and cell.get("estimate_cpu_seconds") is not None:  # as for measured cells: CPU time too
            load = max(pt["load_before"] for pt in busy)
            return (f"≈ {_duration(cell['estimate_seconds'])} est. (CPU "
                    f"{_duration(cell['estimate_cpu_seconds'])}, load {load:.0f})")
        return f"≈ {_duration(cell['estimate_seconds'])} est."
    if cell.get("status") == "stopped":
        if cell.get("bound"):  # one run finished, the next hit the cap: a bound through both
            return f"> {_duration(cell['at_least_seconds'])} (bound)"
        if cell.get("points"):  # an estimate's first fraction hit the cap: the whole takes longer
            n = cell["points"][-1]["params"]["n_seeds"]
            return f"> {_duration(cell['at_least_seconds'])} at {n} of {cell['n_seeds_full']} seeds"
        return f"> {_duration(cell['at_least_seconds'])} (stopped)"
    if cell.get("status") == "failed":
        return "failed"
    text = _duration(cell["seconds"]) if cell["scale"] == "full" else f"{cell['seconds']:.0f} s"
    if contended(cell):  # the wall time says little about the budget; CPU time says more
        cpu = f"CPU {cell['cpu_seconds']:.0f} s, " if cell.get("cpu_seconds") is not None else ""
        text += f" ({cpu}load {cell['load_before']:.0f})"
    if is_over(cell):
        text += " **over**"
    return text


def cost_markdown(record: dict[str, Any]) -> str:
    """The cost table: a row per chapter, time and peak memory per scale, the machine named."""
    cells = record.get("cells", [])
    if not cells:
        return "No chapter has been measured yet: run `minirepro bench`.\n"
    scales = [s for s in ("smoke", "book", "full") if any(c["scale"] == s for c in cells)]
    head = "| chapter | " + " | ".join(f"{s}: time | {s}: peak" for s in scales) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(scales)]
    for name in sorted({c["chapter"] for c in cells}):
        row = [name]
        for s in scales:
            c = next((c for c in cells if c["chapter"] == name and c["scale"] == s), None)
            if c is None:
                row += ["not measured", ""]
            else:
                mem = f"{c['peak_rss_mb']:.0f} MB" if c.get("peak_rss_mb") is not None else ""
                row += [_cell_text(c), mem]
        lines.append("| " + " | ".join(row) + " |")
    dates = sorted({c["date"] for c in cells})
    cpus = sorted({f"{c['cpu']} ({c['cores']} cores)" for c in cells})
    loads = [c["load_before"] for c in cells]
    budgets = ", ".join(f"{s} {b:.0f} s" for s, b in record.get("budgets", BUDGETS).items())
    lines += ["", f"Measured {', '.join(dates)} on {'; '.join(cpus)}, one chapter at a time, each "
              f"in a fresh process; load average {min(loads):.1f} to {max(loads):.1f} when the runs "
              f"started (with other work on the machine, times are inflated; a time followed by "
              f"(CPU C s, load L) was measured with more runnable processes than cores, and C, the "
              f"CPU time of the run's processes, is the better estimate of its quiet-machine cost). "
              f"Time: the run's execution; peak: the peak resident memory of the kernel and its children. **over**: "
              f"more than the scale's budget on a quiet machine ({budgets}), judged by the CPU "
              f"time when the machine was loaded. `full` is timed only on request "
              f"(`minirepro bench --scales full --cap SECONDS`); a run stopped at the cap shows "
              f"\">\" that time (\"at n of N seeds\": the run with only n of the preset's N "
              f"seeds was stopped, so the whole takes longer still)."]
    est = sorted((c for c in cells if c.get("status") == "estimated"), key=lambda c: c["chapter"])
    if est:
        pts = "; ".join(f"{c['chapter']} "
                        + " and ".join(f"{p['seconds']:.0f} s at {p['params']['n_seeds']}" for p in c["points"])
                        + f" of {c['n_seeds_full']}" for c in est)
        lines += ["", f"**est.** (`minirepro bench --scales full --estimate`): an estimate, not a "
                  f"measurement. The full preset was run twice with fewer seeds (everything else at "
                  f"full size), each in a fresh process, and the time of all its seeds read off the "
                  f"straight line through the two runs (seeds run one after another; the line's "
                  f"intercept is the work done once). Peak memory is the larger of the two runs'. "
                  f"Measured: {pts} seeds."]
    bounds = sorted((c for c in cells if c.get("bound")), key=lambda c: c["chapter"])
    if bounds:
        lines += ["", "**(bound)**: the first shorter run finished and the second (one more seed) was "
                  "stopped at the cap, so each seed costs more than their difference and the full preset "
                  "more than the straight line through them: "
                  + "; ".join(f"{c['chapter']} {c['bound']} of {c['n_seeds_full']} seeds" for c in bounds) + "."]
    return "\n".join(lines) + "\n"
