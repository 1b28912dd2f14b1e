"""A chapter's notebook: MyST -> ``.ipynb`` (jupytext), executed by papermill in a subprocess.

Per scale, a cell may run :data:`CELL_TIMEOUTS` seconds; a failure is reported by one
line (:func:`failure_line`): a timeout said plainly, else the log's last exception.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from minirepro.chapters import Chapter
from minirepro.run.process import signals_ignored, stop_process_tree

CELL_TIMEOUT = 600  # seconds a cell may take under `minirepro run` at smoke and book scale
# Per scale: at smoke and book a cell over 10 minutes is a hang (their budgets are 20 and
# 120 s a chapter); a full-scale cell may legitimately take longer (ALI trains its models),
# so it has no per-cell limit: Ctrl-C, SIGTERM, `sweep --timeout` and `bench --cap` still stop it.
CELL_TIMEOUTS: dict[str, int | None] = {"smoke": CELL_TIMEOUT, "book": CELL_TIMEOUT, "full": None}
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b:?")


def to_ipynb(chapter: Chapter, target: Path) -> Path:
    """Write the chapter's MyST notebook as an ``.ipynb`` (jupytext) at ``target``."""
    import jupytext

    nb = jupytext.read(chapter.path)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    for i, cell in enumerate(nb.cells):  # stable ids, so re-made goldens diff only where outputs moved
        cell["id"] = f"cell-{i:03d}"
    jupytext.write(nb, target, fmt="ipynb")
    return target


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
    # papermill's own command line, less its false "Unable to parse line" (see papermill_main)
    cmd = [sys.executable, "-m", "minirepro.run.papermill_main", str(ipynb), str(output), "-f", str(pfile),
           "-k", "python3", "--engine", "minirepro", "--cwd", str(cwd), "--no-progress-bar",
           *(["--execution-timeout", str(timeout)] if timeout is not None else []),
           "--log-level", "INFO" if log else "ERROR"]
    with open(log or os.devnull, "w", encoding="utf-8") as fh:
        # A session of its own: a Ctrl-C in the terminal reaches this process only, which
        # then stops the whole tree (papermill, the kernel, the kernel's children).
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait()
        except BaseException:
            with signals_ignored():
                stop_process_tree(proc.pid)
                proc.wait()
            raise
    pfile.unlink(missing_ok=True)
    if proc.returncode != 0:
        tail = ""
        if log and log.exists():
            tail = failure_line(log.read_text(encoding="utf-8", errors="replace"), timeout)
        raise RuntimeError(tail or f"papermill exited with status {proc.returncode}")

