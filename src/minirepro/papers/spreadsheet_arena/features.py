"""Stylistic, structural and functional features of any .xlsx file, read defensively.

The file is untrusted: it is size-checked before opening (compressed and
uncompressed, against zip bombs), refused if it carries VBA macros (nothing is
ever executed), and cell-count limited after parsing. XML entity-expansion attacks are
stopped by the expat parser bundled with Python (2.4 or later); openpyxl also uses
``defusedxml`` when it is installed. Anything malformed raises
:class:`WorkbookError` with the reason, never a crash of the caller's run.

openpyxl drops charts on load and computes no formulas, so charts are counted
from the package's ``xl/charts/chartN.xml`` parts and formulas are evaluated by
:mod:`.evaluate` (the ``formulas`` library) to find error values.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass

import numpy as np
import openpyxl

from minirepro.papers.spreadsheet_arena.evaluate import ERROR_TEXTS, Evaluation, evaluate


class WorkbookError(ValueError):
    """The bytes are not an acceptable .xlsx workbook (the message says why)."""


@dataclass(frozen=True)
class Limits:
    """Guards for untrusted workbooks (bytes, cells, sheets, formulas, evaluation seconds)."""

    max_bytes: int = 2_000_000
    max_uncompressed: int = 30_000_000
    max_cells: int = 50_000
    max_sheets: int = 50
    max_formulas: int = 5_000
    eval_timeout_s: float = 5.0
    evaluate: bool = True


DEFAULT_LIMITS = Limits()

FEATURES: tuple[str, ...] = (
    "n_sheets", "n_cells", "n_formulas", "n_numbers", "formula_share", "literal_formula_share",
    "cross_sheet_refs", "n_charts", "n_cond_formats", "n_named_ranges", "frozen", "header_styled",
    "styled_share", "number_format_share", "custom_widths", "blue_input_share",
    "black_formula_share", "n_errors", "eval_complete", "style_score")

_CHART_PART = re.compile(r"^xl/charts/chart\d+\.xml$")
_STRING_LIT = re.compile(r'"[^"]*"')
_REFS = re.compile(r"(?:'[^']+'|[A-Za-z_][\w.]*)?!?\$?[A-Za-z]{1,3}\$?\d+(?::\$?[A-Za-z]{1,3}\$?\d+)?")
_NUMBER = re.compile(r"(?<![\w.$])(\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)(?![\w(])")


def open_workbook(data: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[openpyxl.Workbook, int]:
    """Check ``data`` against ``limits`` and load it with openpyxl (formulas as text).

    Returns:
        ``(workbook, n_charts)``; charts are counted from the zip parts.

    Raises:
        WorkbookError: not bytes, too large, not a zip/xlsx, macros present, malformed,
            or too many sheets or cells.
    """
    if not isinstance(data, (bytes, bytearray)):
        raise WorkbookError(f"expected the bytes of an .xlsx file, got {type(data).__name__}")
    if len(data) == 0:
        raise WorkbookError("empty file: expected the bytes of an .xlsx file")
    if len(data) > limits.max_bytes:
        raise WorkbookError(f"file is {len(data)} bytes; the limit is {limits.max_bytes}")
    buf = io.BytesIO(bytes(data))
    if not zipfile.is_zipfile(buf):
        raise WorkbookError("not an .xlsx file (an .xlsx is a zip package; this is not one)")
    try:
        with zipfile.ZipFile(buf) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise WorkbookError(f"corrupt zip package: {exc}") from None
    names = {i.filename for i in infos}
    if sum(i.file_size for i in infos) > limits.max_uncompressed:
        raise WorkbookError(f"uncompressed size exceeds {limits.max_uncompressed} bytes (zip bomb guard)")
    if any(n.lower().endswith("vbaproject.bin") for n in names):
        raise WorkbookError("workbook contains VBA macros (vbaProject.bin); macro workbooks are "
                            "refused and nothing in them is executed")
    if "xl/workbook.xml" not in names:
        raise WorkbookError("zip package has no xl/workbook.xml: not a spreadsheet workbook")
    n_charts = sum(bool(_CHART_PART.match(n)) for n in names)
    buf.seek(0)
    try:
        wb = openpyxl.load_workbook(buf, data_only=False, keep_vba=False, keep_links=False)
    except Exception as exc:  # noqa: BLE001 - openpyxl raises many types on malformed XML
        raise WorkbookError(f"malformed workbook ({type(exc).__name__}: {exc})"[:300]) from None
    if len(wb.worksheets) > limits.max_sheets:
        raise WorkbookError(f"{len(wb.worksheets)} sheets; the limit is {limits.max_sheets}")
    n_cells = sum(len(ws._cells) for ws in wb.worksheets)
    if n_cells > limits.max_cells:
        raise WorkbookError(f"{n_cells} cells; the limit is {limits.max_cells}")
    return wb, n_charts


def cell_map(wb: openpyxl.Workbook) -> dict[tuple[str, int, int], object]:
    """``{(SHEET_UPPER, row, col): value}`` for every non-empty cell (formulas as ``"=..."``)."""
    out = {}
    for ws in wb.worksheets:
        title = ws.title.upper()
        for (r, c), cell in ws._cells.items():
            if cell.value is not None:
                out[(title, r, c)] = cell.value
    return out


def _rgb(font) -> str | None:
    rgb = getattr(getattr(font, "color", None), "rgb", None)
    return rgb.upper() if isinstance(rgb, str) else None


def has_literal(formula: str) -> bool:
    """True if ``formula`` holds a numeric constant other than 0 or 1 (a hard-coded input)."""
    body = _REFS.sub(" ", _STRING_LIT.sub(" ", formula))
    return any(float(m) not in (0.0, 1.0) for m in _NUMBER.findall(body))


def _features(wb: openpyxl.Workbook, n_charts: int, ev: Evaluation) -> dict[str, float]:
    n_cells = n_form = n_num = lit = cross = styled = fmt_num = blue = black = const_err = 0
    header_styled = widths = 0
    for ws in wb.worksheets:
        rows: dict[int, list] = {}
        for (r, _c), cell in ws._cells.items():
            v = cell.value
            if v is None:
                continue
            n_cells += 1
            rows.setdefault(r, []).append(cell)
            bold, fill = bool(cell.font and cell.font.b), cell.fill is not None and cell.fill.fill_type == "solid"
            styled += bold or fill
            is_formula = isinstance(v, str) and v.startswith("=") and len(v) > 1
            is_num = isinstance(v, (int, float)) and not isinstance(v, bool)
            if is_formula:
                n_form += 1
                lit += has_literal(v)
                cross += "!" in v
                black += _rgb(cell.font) in (None, "FF000000", "00000000")
            elif is_num:
                n_num += 1
                blue += (_rgb(cell.font) or "").endswith("0000FF")
            elif isinstance(v, str) and v.strip() in ERROR_TEXTS:
                const_err += 1
            if (is_formula or is_num) and cell.number_format != "General":
                fmt_num += 1
        first = next((rows[r] for r in sorted(rows) if len(rows[r]) >= 2), [])
        if first and all((c.font and c.font.b) or c.fill.fill_type == "solid" for c in first):
            header_styled += 1
        widths += any(d.width and d.customWidth for d in ws.column_dimensions.values())
    n_sheets = max(1, len(wb.worksheets))
    n_cf = sum(len(rule.rules) for ws in wb.worksheets for rule in ws.conditional_formatting)
    f = {
        "n_sheets": float(len(wb.worksheets)), "n_cells": float(n_cells), "n_formulas": float(n_form),
        "n_numbers": float(n_num),
        "formula_share": n_form / (n_form + n_num) if n_form + n_num else 0.0,
        "literal_formula_share": lit / n_form if n_form else 0.0,
        "cross_sheet_refs": float(cross), "n_charts": float(n_charts), "n_cond_formats": float(n_cf),
        "n_named_ranges": float(len(wb.defined_names)),
        "frozen": float(any(ws.freeze_panes for ws in wb.worksheets)),
        "header_styled": header_styled / n_sheets, "styled_share": styled / n_cells if n_cells else 0.0,
        "number_format_share": fmt_num / (n_form + n_num) if n_form + n_num else 0.0,
        "custom_widths": widths / n_sheets, "blue_input_share": blue / n_num if n_num else 0.0,
        "black_formula_share": black / n_form if n_form else 0.0,
        "n_errors": float(len(ev.errors) + const_err), "eval_complete": float(ev.complete),
    }
    f["style_score"] = float(np.mean([f["header_styled"], f["number_format_share"], f["frozen"],
                                      f["custom_widths"]]))
    return f


_EVALS: dict[tuple[str, int, float], Evaluation] = {}


def _evaluate_cached(key: str, max_formulas: int, timeout_s: float, cells: dict) -> Evaluation:
    """Evaluate once per distinct cell content: workbooks that differ only in styling share it."""
    k = (key, max_formulas, timeout_s)
    if k not in _EVALS:
        if len(_EVALS) > 8192:
            _EVALS.clear()
        _EVALS[k] = evaluate(cells, max_formulas, timeout_s)
    return _EVALS[k]


@functools.lru_cache(maxsize=8192)
def _cached(digest: str, data: bytes, limits: Limits) -> tuple[dict[str, float], Evaluation]:
    wb, n_charts = open_workbook(data, limits)
    if limits.evaluate:
        cells = cell_map(wb)
        key = hashlib.sha256(repr(sorted(cells.items())).encode()).hexdigest()
        ev = _evaluate_cached(key, limits.max_formulas, limits.eval_timeout_s, cells)
    else:
        ev = Evaluation({}, {}, False, "evaluation switched off")
    return _features(wb, n_charts, ev), ev


def analyze(data: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[dict[str, float], Evaluation]:
    """Features (see ``FEATURES``) and the formula evaluation of one workbook (cached by hash).

    Raises:
        WorkbookError: the file fails a limit or is malformed (see :func:`open_workbook`).
    """
    if not isinstance(data, (bytes, bytearray)):
        raise WorkbookError(f"expected the bytes of an .xlsx file, got {type(data).__name__}")
    data = bytes(data)
    return _cached(hashlib.sha256(data).hexdigest(), data, limits)


def extract_features(data: bytes, limits: Limits = DEFAULT_LIMITS) -> dict[str, float]:
    """The feature dict of one workbook: ``{name: float}`` for every name in ``FEATURES``."""
    return dict(analyze(data, limits)[0])


def safe_features(data: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[dict[str, float] | None, str]:
    """``(features, "")`` or ``(None, reason)``: for batch runs that must not stop on one bad file."""
    try:
        return extract_features(data, limits), ""
    except WorkbookError as exc:
        return None, str(exc)
