"""The formula engine: compile each formula once with ``formulas`` and resolve cells by a
depth-first walk over references, with a cycle check and a deadline.

This module is below both :mod:`.evaluate` (the guarded entry point) and :mod:`.isolate`
(the worker processes that run it), so neither imports the other's internals.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
import time
from dataclasses import dataclass

import numpy as np
import schedula as sh
from formulas import Parser
from formulas.tokens.operand import XlError
from openpyxl.utils.cell import range_boundaries

# schedula logs a traceback for every formula that fails; here a failure is a cell error.
logging.getLogger("schedula").setLevel(logging.CRITICAL)

# Limits checked before parsing. Excel allows 8,192 characters and 64 levels; the parser's
# cost grows quadratically with length (8,000 characters take seconds), so the length limit is
# stricter. Generated workbooks use formulas of a few dozen characters.
MAX_FORMULA_CHARS = 1024
MAX_NESTING = 64

ERROR_TEXTS = ("#DIV/0!", "#VALUE!", "#REF!", "#NAME?", "#N/A", "#NUM!", "#NULL!")
_EXCEL_EPOCH = dt.datetime(1899, 12, 30)


@dataclass
class Evaluation:
    """Values of every formula cell: ``values[(SHEET, row, col)]``; errors as their text."""

    values: dict[tuple[str, int, int], object]
    errors: dict[tuple[str, int, int], str]
    complete: bool
    reason: str = ""


@functools.lru_cache(maxsize=4096)
def compile_formula(formula: str):
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


def nesting_depth(formula: str) -> int:
    """Deepest nesting of ``(...)`` and ``{...}`` in ``formula``, outside quoted text and sheet names."""
    depth = deepest = 0
    quote = ""
    for ch in formula:
        if quote:
            if ch == quote:  # a doubled quote closes and reopens: still inside
                quote = ""
        elif ch == '"' or ch == "'":
            quote = ch
        elif ch == "(" or ch == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")" or ch == "}":
            depth = max(0, depth - 1)
    return deepest


def formula_problem(formula: str, max_chars: int = MAX_FORMULA_CHARS,
                    max_nesting: int = MAX_NESTING) -> str:
    """Why ``formula`` is too large to parse safely ("" if it is fine); costs one linear scan."""
    if len(formula) > max_chars:
        return f"a formula of {len(formula)} characters; the limit is {max_chars}"
    depth = nesting_depth(formula)
    if depth > max_nesting:
        return f"a formula nested {depth} levels deep; the limit is {max_nesting}"
    return ""


def is_formula(v: object) -> bool:
    """True for a cell value the evaluator treats as a formula (text starting with "=")."""
    return isinstance(v, str) and v.startswith("=") and len(v) > 1


_REF = re.compile(r"^(?:(?P<sheet>'(?:[^']|'')+'|[^!]+)!)?"
                  r"(?P<rng>[A-Z]+\d+(?::[A-Z]+\d+)?|[A-Z]+:[A-Z]+|\d+:\d+)$")
MAX_RANGE_CELLS = 100_000  # cells one reference may read (whole columns/rows: the sheet's used part)

# Defined names: ``{(scope, NAME): "reference or constant"}``; scope "" is the workbook,
# otherwise the upper-case title of the sheet the name is local to.
Names = dict[tuple[str, str], str]


def _extents(cells: dict) -> dict[str, tuple[int, int]]:
    """Per sheet, the largest row and column holding a cell (the used extent)."""
    out: dict[str, tuple[int, int]] = {}
    for sheet, r, c in cells:
        mr, mc = out.get(sheet, (0, 0))
        out[sheet] = (max(mr, r), max(mc, c))
    return out


def _bounds(rng: str, extent: tuple[int, int]) -> tuple[int, int, int, int]:
    """``(c1, r1, c2, r2)`` of ``A1``, ``A1:B2``, ``A:B`` or ``1:2``, whole columns and rows
    clipped to the sheet's used extent (an empty clip reads one blank cell)."""
    c1, r1, c2, r2 = range_boundaries(rng)
    if r1 is None:  # whole columns
        r1, r2 = 1, max(1, extent[0])
    if c1 is None:  # whole rows
        c1, c2 = 1, max(1, extent[1])
    return c1, r1, c2, r2


class _Walk:
    """The state of one evaluation: computed values, the cells on the current path (a
    cycle is ``#REF!``), defined names, known sheets, used extents and the deadline."""

    def __init__(self, cells: dict, deadline: float, names: Names, known: set[str]) -> None:
        self.cells, self.deadline, self.names, self.known = cells, deadline, names, known
        self.values: dict[tuple[str, int, int], object] = {}
        self.active: set[tuple[str, int, int]] = set()
        self.extents = _extents(cells)

    def value_of(self, key: tuple[str, int, int]) -> object:
        """A referenced cell's value: its formula's result, or its input converted."""
        v = self.cells.get(key)
        if isinstance(v, str) and v.startswith("=") and len(v) > 1:
            return self.cell(key)
        return _to_input(v)

    def fetch(self, name: str, sheet: str, depth: int = 0) -> object:
        """A formula input: a cell, a range (an object array) or a defined name."""
        m = _REF.match(name.replace("$", "").upper())
        if not m:
            target = self.names.get((sheet, name.upper()), self.names.get(("", name.upper())))
            if target is None or depth > 0:  # an unknown name, or a name naming a name
                raise KeyError(name)
            return self.fetch_name(target, sheet)
        ref_sheet = m.group("sheet")
        ref_sheet = ref_sheet[1:-1].replace("''", "'") if ref_sheet and ref_sheet[0] == "'" else ref_sheet
        sheet = (ref_sheet or sheet).upper()
        if sheet not in self.known:
            return XlError("#REF!")
        c1, r1, c2, r2 = _bounds(m.group("rng"), self.extents.get(sheet, (0, 0)))
        if (r2 - r1 + 1) * (c2 - c1 + 1) > MAX_RANGE_CELLS:
            raise KeyError(f"range {name} too large")
        if (r1, c1) == (r2, c2):
            return self.value_of((sheet, r1, c1))
        return np.array([[self.value_of((sheet, r, c)) for c in range(c1, c2 + 1)]
                         for r in range(r1, r2 + 1)], dtype=object)

    def fetch_name(self, target: str, sheet: str) -> object:
        """What a defined name stands for: a number, ``#REF!``, or a reference."""
        t = target.strip().lstrip("=").strip()
        try:
            return float(t)
        except ValueError:
            pass
        if t.upper().startswith("#REF!") or "!#REF!" in t.upper():
            return XlError("#REF!")
        return self.fetch(t, sheet, depth=1)

    def cell(self, key: tuple[str, int, int]) -> object:
        """A formula cell's value, computed once; any failure of the formula is ``#NAME?``."""
        if key in self.values:
            return self.values[key]
        if time.monotonic() > self.deadline:
            raise TimeoutError
        if key in self.active:
            self.values[key] = XlError("#REF!")
            return self.values[key]
        self.active.add(key)
        try:
            fn, inputs = compile_formula(self.cells[key])
            args = [self.fetch(name, key[0]) for name in inputs]
            out = _scalar(fn(*args))
        except (TimeoutError, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of an untrusted formula is a cell error
            if _out_of_memory(exc):  # the parser wraps a MemoryError in its own exception
                raise MemoryError from exc
            out = XlError("#NAME?")
        finally:
            self.active.discard(key)
        self.values[key] = out
        return out


def evaluate_cells(cells: dict, formulas_at: list, timeout_s: float, names: Names | None = None,
                   sheets: tuple[str, ...] | None = None) -> Evaluation:
    """The evaluation itself, in this process: a walk over references with a soft deadline."""
    known = set(sheets) if sheets is not None else {k[0] for k in cells}
    walk = _Walk(cells, time.monotonic() + timeout_s, names or {}, known)
    values = walk.values
    try:
        for key in formulas_at:
            walk.cell(key)
    except TimeoutError:
        return Evaluation(values, error_texts(values), False, f"evaluation exceeded {timeout_s} s")
    except RecursionError:
        return Evaluation(values, error_texts(values), False, "reference chain too deep")
    return Evaluation(values, error_texts(values), True)


def _out_of_memory(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, MemoryError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def error_texts(values: dict) -> dict:
    return {k: str(v) for k, v in values.items()
            if isinstance(v, XlError) or (isinstance(v, str) and v in ERROR_TEXTS)}
