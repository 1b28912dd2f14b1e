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

import threading

from minirepro.papers.spreadsheet_arena.engine import (  # noqa: F401 - the public names, re-exported
    ERROR_TEXTS,
    MAX_FORMULA_CHARS,
    MAX_NESTING,
    MAX_RANGE_CELLS,
    Evaluation,
    Names,
    evaluate_cells,
    formula_problem,
    is_formula,
    nesting_depth,
)
from minirepro.papers.spreadsheet_arena.isolate import run_isolated

MEMORY_MB = 512  # address space an evaluation worker may add to what it starts with

# Compiled ``formulas`` functions are shared through the cache, so in-process evaluations
# (``isolate=False``, trusted cells only) run one at a time; isolated ones each have a process.
_INPROCESS_LOCK = threading.Lock()


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
    return run_isolated(cells, formulas_at, timeout_s, memory_mb, names, sheets)


