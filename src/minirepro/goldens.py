"""Golden results that hold on any processor: metrics compared within declared tolerances.

A chapter's golden is two files in ``tests/goldens/``:

``NN-slug.ipynb``
    the chapter executed at smoke scale. nbval re-executes it and compares, as exact
    text, the cells marked ``# NBVAL_CHECK_OUTPUT``. Those print only what no processor
    can change: verdicts, counts, shapes.
``NN-slug.results.json``
    the ``results.json`` of that execution: metrics, their declared tolerances
    (``results.record_metric(name, value, rtol=..., atol=...)``) and the claims. While
    nbval re-executes the notebook, the kernel writes a fresh ``results.json``; the
    golden test compares the two with :func:`compare`.

Numbers that training computes differ in their last digits between processors (torch
picks other kernels), so they are compared within the tolerance the chapter declared
beside them, never as text.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

DEFAULT_RTOL = 1e-6  # a float recorded without a tolerance must agree to this


def results_path(golden_ipynb: Path) -> Path:
    """``tests/goldens/NN-slug.results.json`` beside ``NN-slug.ipynb``."""
    return golden_ipynb.with_name(golden_ipynb.stem + ".results.json")


def _close(expected: Any, actual: Any, tol: dict[str, float] | None) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool) or isinstance(expected, str) \
            or isinstance(actual, str):
        return expected == actual
    if isinstance(expected, int) and isinstance(actual, int) and tol is None:
        return expected == actual
    e, a = float(expected), float(actual)
    if math.isnan(e) or math.isnan(a):
        return math.isnan(e) and math.isnan(a)
    rtol = tol["rtol"] if tol else DEFAULT_RTOL
    atol = tol["atol"] if tol else 0.0
    return abs(a - e) <= atol + rtol * abs(e)


def compare(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Differences between a stored golden record and a fresh one, as readable lines.

    Metrics: every stored metric must be present and within the stored tolerance (or
    exact for ints, strings and bools without one); a metric that only the fresh run
    has, or a tolerance that changed, means the golden is stale. Claims: the same ids,
    and the same verdict for every claim not declared ``machine_dependent``.
    """
    problems: list[str] = []
    em, am = expected.get("metrics", {}), actual.get("metrics", {})
    et, at = expected.get("tolerances", {}), actual.get("tolerances", {})
    for name, value in em.items():
        if name not in am:
            problems.append(f"metric {name!r} is missing from the fresh run")
            continue
        tol = et.get(name)
        if not _close(value, am[name], tol):
            bound = (f"rtol {tol['rtol']:g}, atol {tol['atol']:g}" if tol
                     else f"rtol {DEFAULT_RTOL:g}" if isinstance(value, float) else "exact")
            problems.append(f"metric {name!r}: golden {value!r}, fresh {am[name]!r} (tolerance {bound})")
    for name in am:
        if name not in em:
            problems.append(f"metric {name!r} is new (not in the golden): re-make the golden")
    for name in set(et) | set(at):
        if name in em and name in am and et.get(name) != at.get(name):
            problems.append(f"metric {name!r}: tolerance changed from {et.get(name)} to {at.get(name)}")
    ec = {c["id"]: c for c in expected.get("claims", [])}
    ac = {c["id"]: c for c in actual.get("claims", [])}
    if set(ec) != set(ac):
        problems.append(f"claims differ: golden {sorted(ec)}, fresh {sorted(ac)}")
    for cid in sorted(set(ec) & set(ac)):
        if ec[cid].get("machine_dependent") or ac[cid].get("machine_dependent"):
            continue
        if ec[cid].get("verdict") != ac[cid].get("verdict"):
            problems.append(f"claim {cid!r}: golden verdict {ec[cid].get('verdict')!r}, "
                            f"fresh {ac[cid].get('verdict')!r}")
    return problems


def load(path: Path) -> dict[str, Any]:
    """Read a results record, with a clear error when it is missing or unreadable."""
    if not path.is_file():
        raise FileNotFoundError(f"no results record at {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
