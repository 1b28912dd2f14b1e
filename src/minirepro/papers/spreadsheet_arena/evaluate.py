"""Formula evaluation with the ``formulas`` library, guarded for untrusted workbooks.

``formulas.ExcelModel`` evaluates a whole workbook but costs about a second per
file. Here each formula is compiled once by ``formulas.Parser`` (cached on the
formula text, so a template's repeated formulas compile once across the whole
run) and the cells are resolved by a small depth-first walk over references,
with a cycle check, a cap on the number of formulas and a wall-clock deadline.
Excel semantics (``#DIV/0!`` from an empty divisor, ``#VALUE!`` from text in
arithmetic, ``SUM`` skipping blanks) come from ``formulas`` itself.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
import threading
import time
from dataclasses import dataclass

import numpy as np
import schedula as sh
from formulas import Parser
from formulas.tokens.operand import XlError
from openpyxl.utils.cell import range_boundaries

# schedula logs a traceback for every formula that fails; here a failure is a cell error.
logging.getLogger("schedula").setLevel(logging.CRITICAL)

# Compiled ``formulas`` functions are shared through the cache; one evaluation runs at a time
# (the arena's web server is threaded), which costs little since a workbook takes milliseconds.
_LOCK = threading.Lock()

ERROR_TEXTS = ("#DIV/0!", "#VALUE!", "#REF!", "#NAME?", "#N/A", "#NUM!", "#NULL!")
_EXCEL_EPOCH = dt.datetime(1899, 12, 30)


class EvaluationError(RuntimeError):
    """A workbook's formulas could not be evaluated within the limits."""


@dataclass
class Evaluation:
    """Values of every formula cell: ``values[(SHEET, row, col)]``; errors as their text."""

    values: dict[tuple[str, int, int], object]
    errors: dict[tuple[str, int, int], str]
    complete: bool
    reason: str = ""


@functools.lru_cache(maxsize=4096)
def _compile(formula: str):
    fn = Parser().ast(formula)[1].compile()
    return fn, tuple(fn.inputs)


def _to_input(v: object) -> object:
    if v is None:
        return sh.EMPTY
    if isinstance(v, dt.datetime):
        return (v - _EXCEL_EPOCH).total_seconds() / 86400.0
    if isinstance(v, dt.date):
        return float((dt.datetime(v.year, v.month, v.day) - _EXCEL_EPOCH).days)
    return v


def _scalar(r: object) -> object:
    if isinstance(r, np.ndarray):
        r = r.ravel()[0] if r.size else sh.EMPTY
    if isinstance(r, np.generic):
        r = r.item()
    return r


_REF = re.compile(r"^(?:(?P<sheet>'[^']+'|[^!]+)!)?(?P<rng>[A-Z]+\d+(?::[A-Z]+\d+)?)$")


def evaluate(cells: dict[tuple[str, int, int], object], max_formulas: int = 5000,
             timeout_s: float = 5.0) -> Evaluation:
    """Evaluate every formula in ``cells`` (``{(SHEET_UPPER, row, col): value or "=formula"}``).

    A formula ``formulas`` cannot parse or run counts as a ``#NAME?`` error (as in
    Excel for an unknown function); a reference cycle is a ``#REF!`` error here.
    Stops with ``complete=False`` past ``max_formulas`` formulas or ``timeout_s`` seconds.
    """
    if max_formulas < 1 or timeout_s <= 0:
        raise ValueError(f"max_formulas must be >= 1 and timeout_s > 0, got {max_formulas}, {timeout_s}")
    formulas_at = [k for k, v in cells.items() if isinstance(v, str) and v.startswith("=") and len(v) > 1]
    if len(formulas_at) > max_formulas:
        return Evaluation({}, {}, False, f"{len(formulas_at)} formulas exceed the limit of {max_formulas}")
    with _LOCK:
        return _evaluate_locked(cells, formulas_at, timeout_s)


def _evaluate_locked(cells: dict, formulas_at: list, timeout_s: float) -> Evaluation:
    deadline = time.monotonic() + timeout_s
    values: dict[tuple[str, int, int], object] = {}
    active: set[tuple[str, int, int]] = set()

    def value_of(key: tuple[str, int, int]) -> object:
        v = cells.get(key)
        if isinstance(v, str) and v.startswith("=") and len(v) > 1:
            return cell(key)
        return _to_input(v)

    def fetch(name: str, sheet: str) -> object:
        m = _REF.match(name.replace("$", ""))
        if not m:
            raise KeyError(name)
        sheet = (m.group("sheet") or sheet).strip("'").upper()
        c1, r1, c2, r2 = range_boundaries(m.group("rng"))
        if (r2 - r1 + 1) * (c2 - c1 + 1) > 100_000:
            raise KeyError(f"range {name} too large")
        if (r1, c1) == (r2, c2):
            return value_of((sheet, r1, c1))
        return np.array([[value_of((sheet, r, c)) for c in range(c1, c2 + 1)]
                         for r in range(r1, r2 + 1)], dtype=object)

    def cell(key: tuple[str, int, int]) -> object:
        if key in values:
            return values[key]
        if time.monotonic() > deadline:
            raise TimeoutError
        if key in active:
            values[key] = XlError("#REF!")
            return values[key]
        active.add(key)
        try:
            fn, inputs = _compile(cells[key])
            args = [fetch(name, key[0]) for name in inputs]
            out = _scalar(fn(*args))
        except TimeoutError:
            raise
        except Exception:  # noqa: BLE001 - any failure of an untrusted formula is a cell error
            out = XlError("#NAME?")
        finally:
            active.discard(key)
        values[key] = out
        return out

    try:
        for key in formulas_at:
            cell(key)
    except TimeoutError:
        return Evaluation(values, _errors(values), False, f"evaluation exceeded {timeout_s} s")
    except RecursionError:
        return Evaluation(values, _errors(values), False, "reference chain too deep")
    return Evaluation(values, _errors(values), True)


def _errors(values: dict) -> dict:
    return {k: str(v) for k, v in values.items()
            if isinstance(v, XlError) or (isinstance(v, str) and v in ERROR_TEXTS)}

