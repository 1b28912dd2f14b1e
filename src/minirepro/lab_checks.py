"""Checks that the labs' autograder tests call (``labs/<chapter>.yml``).

They recompute a reference from the package or check an invariant at grading time;
none holds an answer typed in. Each raises ``AssertionError`` on a wrong answer; the
grade report shows the question's hint, never this module's messages.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def run_results(run_folder: Any, chapter: str) -> dict | None:
    """The ``results.json`` of a finished ``minirepro run`` of ``chapter`` in ``run_folder``
    (a path relative to the submission), or ``None`` when there is none."""
    if not isinstance(run_folder, str | Path):
        return None
    path = Path(run_folder) / "results.json"
    if not path.is_file() or Path(run_folder).name.endswith("-FAILED"):
        return None
    try:
        res = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return res if isinstance(res, dict) and res.get("chapter") == chapter else None


def check_run(run_folder: Any, chapter: str, params: dict, scale: str | None,
              metrics: list[str]) -> None:
    """The recorded run is of ``chapter`` with ``params`` at ``scale``, has the named
    metrics as finite numbers, and settled every claim it declared."""
    res = run_results(run_folder, chapter)
    assert res is not None, "no finished run"
    ran = res.get("params") or {}
    for key, want in params.items():
        assert key in ran and close(ran[key], want), f"parameter {key}"
    if scale is not None:
        assert ran.get("scale") == scale, "scale"
    got = res.get("metrics") or {}
    for name in metrics:
        value = got.get(name)
        assert isinstance(value, int | float) and math.isfinite(value), f"metric {name}"
    claims = res.get("claims") or []
    assert claims, "no claims"
    for claim in claims:
        assert claim.get("verdict"), "a claim without a verdict"


def close(a: Any, b: Any, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    """``a == b``, with a tolerance for floats; lists and tuples elementwise."""
    if isinstance(b, list | tuple):
        return isinstance(a, list | tuple) and len(a) == len(b) and all(
            close(x, y, rel, abs_) for x, y in zip(a, b))
    if isinstance(b, bool) or isinstance(a, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(b, int | float) and isinstance(a, int | float):
        return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=abs_)
    return a == b


def is_number(x: Any) -> bool:
    """A finite real number (a Python or NumPy scalar), not a bool."""
    try:
        import numpy as np

        if isinstance(x, np.generic):
            x = x.item()
    except ImportError:  # pragma: no cover
        pass
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def is_int(x: Any) -> bool:
    """An integer (Python or NumPy), not a bool."""
    try:
        import numpy as np

        if isinstance(x, np.integer):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(x, int) and not isinstance(x, bool)


def latest_run(chapter: str, runs: str | Path = "runs") -> str | None:
    """The newest finished run folder of ``chapter`` under ``runs`` (relative path), if any."""
    folders = [p for p in Path(runs, chapter).glob("*") if (p / "results.json").is_file()
               and not p.name.endswith("-FAILED")]
    if not folders:
        return None
    return str(max(folders, key=lambda p: (p / "results.json").stat().st_mtime))
