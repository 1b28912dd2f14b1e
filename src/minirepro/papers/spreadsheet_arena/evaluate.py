"""Formula evaluation with the ``formulas`` library, guarded for untrusted workbooks.

``formulas.ExcelModel`` evaluates a whole workbook but costs about a second per
file. Here each formula is compiled once by ``formulas.Parser`` (cached on the
formula text, so a template's repeated formulas compile once across the whole
run) and the cells are resolved by a small depth-first walk over references,
with a cycle check, a cap on the number of formulas and a wall-clock deadline.
Excel semantics (``#DIV/0!`` from an empty divisor, ``#VALUE!`` from text in
arithmetic, ``SUM`` skipping blanks) come from ``formulas`` itself.

Untrusted formulas are bounded three ways. Before anything is parsed, each
formula's length and nesting depth are checked (the parser's time and memory
grow quadratically with length: 30,000 characters cost 15 s and 740 MB).
Evaluation then runs in a worker process (:mod:`.isolate`) with a memory cap,
which is killed if it overruns the deadline, since one slow cell can hold the
interpreter for longer than any deadline checked between cells. Workers are
pooled and each evaluation takes its own, so a hostile workbook never makes an
ordinary one wait behind it.
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

# Limits checked before parsing. Excel allows 8,192 characters and 64 levels; the parser's
# cost grows quadratically with length (8,000 characters take seconds), so the length limit is
# stricter. Generated workbooks use formulas of a few dozen characters.
MAX_FORMULA_CHARS = 1024
MAX_NESTING = 64
MEMORY_MB = 512  # address space an evaluation worker may add to what it starts with

# Compiled ``formulas`` functions are shared through the cache, so in-process evaluations
# (``isolate=False``, trusted cells only) run one at a time; isolated ones each have a process.
_INPROCESS_LOCK = threading.Lock()

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


def evaluate(cells: dict[tuple[str, int, int], object], max_formulas: int = 5000,
             timeout_s: float = 5.0, max_formula_chars: int = MAX_FORMULA_CHARS,
             max_nesting: int = MAX_NESTING, memory_mb: int = MEMORY_MB,
             isolate: bool = True, names: Names | None = None,
             sheets: tuple[str, ...] | None = None) -> Evaluation:
    """Evaluate every formula in ``cells`` (``{(SHEET_UPPER, row, col): value or "=formula"}``).

    A formula ``formulas`` cannot parse or run counts as a ``#NAME?`` error (as in
    Excel for an unknown function); a reference cycle is a ``#REF!`` error here.
    Returns ``complete=False`` with nothing evaluated if there are more than
    ``max_formulas`` formulas or one is longer than ``max_formula_chars`` or nested
    deeper than ``max_nesting`` (checked before parsing). Stops with ``complete=False``
    after ``timeout_s`` seconds, or when the evaluation needs more than ``memory_mb``
    MB. With ``isolate`` (the default) the evaluation runs in a worker process that is
    killed if it overruns; ``isolate=False`` runs it here, for trusted cells only.

    ``names`` are the workbook's defined names (see ``Names``; a sheet-scoped name wins over
    a workbook-scoped one of the same name in formulas on its sheet); a name that is neither
    a reference nor a number gives ``#NAME?``. ``sheets`` are the workbook's sheet titles
    (upper case; default: the sheets that hold cells): a reference to any other sheet gives
    ``#REF!``. Whole columns and rows (``A:A``, ``1:1``) read the sheet's used extent.
    """
    if min(max_formulas, max_formula_chars, max_nesting, memory_mb) < 1 or not timeout_s > 0:
        raise ValueError("max_formulas, max_formula_chars, max_nesting and memory_mb must be >= 1 "
                         f"and timeout_s > 0, got {max_formulas}, {max_formula_chars}, "
                         f"{max_nesting}, {memory_mb}, {timeout_s}")
    formulas_at = [k for k, v in cells.items() if is_formula(v)]
    if len(formulas_at) > max_formulas:
        return Evaluation({}, {}, False, f"{len(formulas_at)} formulas exceed the limit of {max_formulas}")
    for k in formulas_at:
        why = formula_problem(cells[k], max_formula_chars, max_nesting)
        if why:
            return Evaluation({}, {}, False, f"{why} (cell {k[0]}!R{k[1]}C{k[2]}); nothing evaluated")
    names = {(str(sc).upper(), str(n).upper()): str(t) for (sc, n), t in (names or {}).items()}
    for (_, n), target in names.items():
        why = formula_problem(target, max_formula_chars, max_nesting)
        if why:
            return Evaluation({}, {}, False, f"{why} (defined name {n}); nothing evaluated")
    sheets = tuple(s.upper() for s in sheets) if sheets is not None else None
    if not isolate:
        with _INPROCESS_LOCK:
            return evaluate_cells(cells, formulas_at, timeout_s, names, sheets)
    from minirepro.papers.spreadsheet_arena.isolate import run_isolated

    return run_isolated(cells, formulas_at, timeout_s, memory_mb, names, sheets)


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
            fn, inputs = _compile(self.cells[key])
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
        return Evaluation(values, _errors(values), False, f"evaluation exceeded {timeout_s} s")
    except RecursionError:
        return Evaluation(values, _errors(values), False, "reference chain too deep")
    return Evaluation(values, _errors(values), True)


def _out_of_memory(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, MemoryError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _errors(values: dict) -> dict:
    return {k: str(v) for k, v in values.items()
            if isinstance(v, XlError) or (isinstance(v, str) and v in ERROR_TEXTS)}
