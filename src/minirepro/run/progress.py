"""Progress on a terminal: the cells of one run, one line per finished run of a sweep.

Shown only when standard error is a terminal (and ``TQDM_DISABLE`` is not set), so logs
and pipes get the final summary alone. The bars are ``tqdm``'s; a sweep's line per run
is written above its bar (``tqdm.write``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def enabled(stream: Any = None) -> bool:
    """True when progress should be shown: ``stream`` (standard error) is a terminal and
    ``TQDM_DISABLE`` is unset or empty."""
    stream = sys.stderr if stream is None else stream
    if os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _completed_cells(notebook: Path) -> int | None:
    """Code cells papermill marked completed in ``notebook`` (it saves at each cell's start
    and end), or ``None`` while the file is missing or half-written."""
    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return sum(1 for c in nb.get("cells", []) if c.get("cell_type") == "code"
               and (c.get("metadata", {}).get("papermill", {}) or {}).get("status") == "completed")


@contextmanager
def cell_progress(notebook: Path, total: int, desc: str, show: bool) -> Iterator[None]:
    """While inside: a bar of ``notebook``'s completed code cells (of ``total``), read from
    the file papermill writes, every half second. Nothing when ``show`` is false."""
    if not show or total <= 0:
        yield
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit="cell", file=sys.stderr, leave=False,
               dynamic_ncols=True)
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.5):
            done = _completed_cells(notebook)
            if done is not None and done > bar.n:
                bar.update(min(done, total) - bar.n)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(2)
        bar.close()


def grid_label(params: dict[str, Any], width: int = 48) -> str:
    """``name=value`` pairs of a run's swept parameters, cut to ``width`` characters."""
    text = " ".join(f"{k}={_short(v)}" for k, v in params.items()) or "(defaults)"
    return text if len(text) <= width else text[:width - 1] + "…"


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ",".join(_short(v) for v in value) + "]"
    text = str(value)
    return text if len(text) <= 24 else text[:23] + "…"


def run_line(row: dict[str, Any], headline: str | None = None) -> str:
    """One finished run of a sweep, on one line: its parameters, ok or FAILED, the time,
    and its headline metric (the chapter's, else ``headline``)."""
    label = grid_label(row.get("params") or {})
    if not row.get("ok"):
        return f"{label}: FAILED ({row.get('folder', '')})"
    metrics = row.get("metrics") or {}
    metric = row.get("headline") or headline or next(
        (k for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)), None)
    value = metrics.get(metric) if metric else None
    shown = f", {metric} = {value:.4g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
    seconds = row.get("seconds")
    return f"{label}: ok" + (f" in {seconds:.1f} s" if isinstance(seconds, (int, float)) else "") + shown


class SweepProgress:
    """A bar over a sweep's runs with a line per finished run (a terminal only)."""

    def __init__(self, total: int, desc: str, show: bool | None = None, headline: str | None = None):
        self.show = enabled() if show is None else show
        self.headline = headline  # the chapter's declared headline metric, for runs that record none
        self.total = total
        self.bar = None
        if self.show:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="run", file=sys.stderr, leave=False,
                            dynamic_ncols=True)

    def done(self, row: dict[str, Any]) -> None:
        if self.bar is None:
            return
        self.bar.write(f"[{self.bar.n + 1}/{self.total}] {run_line(row, self.headline)}", file=sys.stderr)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
