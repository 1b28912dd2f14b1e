"""Stylistic, structural and functional features of any .xlsx file, read defensively.

The file is untrusted. Before openpyxl sees it, it is size-checked (compressed
and uncompressed, against zip bombs) and every part of the package is streamed
once through expat (:func:`scan_package`), which stops at the first of: a DTD
(no entity tricks), VBA macros or macro sheets declared by content type or
relationship (whatever the part is called; nothing is ever executed), more cells
or XML elements than the limits allow, or a formula too long or too deeply
nested to parse safely. So a 60 KiB file holding 1.8 million cells is refused
after reading its first 50,001 cells, not after building all of them. Anything
malformed raises :class:`WorkbookError` with the reason, never a crash of the
caller's run.

openpyxl drops charts on load and computes no formulas, so charts are counted
from the package's ``xl/charts/chartN.xml`` parts and formulas are evaluated by
:mod:`.evaluate` (the ``formulas`` library, in a worker process with a hard
deadline and a memory cap) to find error values.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass
from xml.parsers import expat

import numpy as np
import openpyxl

from minirepro.papers.spreadsheet_arena.evaluate import (
    ERROR_TEXTS,
    MAX_FORMULA_CHARS,
    MAX_NESTING,
    MEMORY_MB,
    Evaluation,
    evaluate,
    formula_problem,
    is_formula,
)


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
    max_formula_chars: int = MAX_FORMULA_CHARS
    max_nesting: int = MAX_NESTING
    max_xml_elements: int = 250_000
    eval_memory_mb: int = MEMORY_MB


DEFAULT_LIMITS = Limits()

FEATURES: tuple[str, ...] = (
    "n_sheets", "n_cells", "n_formulas", "n_numbers", "formula_share", "literal_formula_share",
    "cross_sheet_refs", "n_charts", "n_cond_formats", "n_named_ranges", "frozen", "header_styled",
    "styled_share", "number_format_share", "custom_widths", "blue_input_share",
    "black_formula_share", "n_errors", "eval_complete", "style_score")

_CHART_PART = re.compile(r"^xl/charts/chart\d+\.xml$")
_MAIN_NS = ("http://schemas.openxmlformats.org/spreadsheetml/2006/main",
            "http://purl.oclc.org/ooxml/spreadsheetml/main")
_CELL_TAGS = frozenset(f"{ns} c" for ns in _MAIN_NS)
_FORMULA_TAGS = frozenset(f"{ns} f" for ns in _MAIN_NS)
# Content types and relationship types (their last path segment) of macro-bearing parts.
_MACRO_CONTENT = ("vbaproject", "macroenabled", "macrosheet", "activex")
_MACRO_RELS = {"vbaproject", "vbaprojectsignature", "xlmacrosheet", "xlintlmacrosheet",
               "activexcontrolbinary"}
_STRING_LIT = re.compile(r'"[^"]*"')
_REFS = re.compile(r"(?:'[^']+'|[A-Za-z_][\w.]*)?!?\$?[A-Za-z]{1,3}\$?\d+(?::\$?[A-Za-z]{1,3}\$?\d+)?")
_NUMBER = re.compile(r"(?<![\w.$])(\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)(?![\w(])")


def scan_package(zf: zipfile.ZipFile, limits: Limits = DEFAULT_LIMITS) -> int:
    """Stream every part of the package through expat once, before anything is built from it.

    Refuses DTDs, macros declared by content type (``[Content_Types].xml``) or by
    relationship (any ``.rels`` part), more than ``limits.max_cells`` cells or
    ``limits.max_xml_elements`` elements, and formulas longer than
    ``limits.max_formula_chars`` or nested deeper than ``limits.max_nesting``. Parts
    that are not XML (images, binaries) stop their own scan at the first byte.

    Returns:
        The number of cells (``<c>`` elements) in the package.

    Raises:
        WorkbookError: the first limit crossed, with the part it was found in.
    """
    scan = _Scan(limits)
    for info in zf.infolist():
        scan.part(zf, info)
    return scan.cells


class _Scan:
    """Counters and expat handlers for :func:`scan_package` (one handler call per element)."""

    def __init__(self, limits: Limits) -> None:
        self.limits, self.name = limits, ""
        self.cells = self.elements = 0
        self.formula: list[str] | None = None
        self.n_chars = 0

    def refuse(self, why: str):
        raise WorkbookError(f"{why} (in {self.name[:100]})")

    def start(self, tag: str, attrs: list) -> None:  # the common case first: it runs per element
        self.elements += 1
        if self.elements > self.limits.max_xml_elements:
            n = self.limits.max_xml_elements
            self.refuse(f"more than {n} XML elements; the limit is {n}")
        if tag in _CELL_TAGS:
            self.cells += 1
            if self.cells > self.limits.max_cells:
                n = self.limits.max_cells
                self.refuse(f"more than {n} cells; the limit is {n}")
        elif tag in _FORMULA_TAGS:
            self.formula, self.n_chars = [], 0
        elif attrs:
            self._check_macro(tag.rpartition(" ")[2], dict(zip(attrs[::2], attrs[1::2])))

    def _check_macro(self, local: str, attrs: dict) -> None:
        ctype, rtype = attrs.get("ContentType"), attrs.get("Type")
        if ctype and local in ("Default", "Override") and any(
                m in ctype.lower() for m in _MACRO_CONTENT):
            self.refuse(f"workbook contains macros (content type {ctype[:80]}); macro workbooks "
                        "are refused and nothing in them is executed")
        if rtype and local == "Relationship" and (
                rtype.rstrip("/").rsplit("/", 1)[-1].lower() in _MACRO_RELS):
            self.refuse(f"workbook contains macros (relationship {rtype[:100]}); macro workbooks "
                        "are refused and nothing in them is executed")

    def text(self, data: str) -> None:
        if self.formula is not None:
            self.n_chars += len(data)
            if self.n_chars > self.limits.max_formula_chars:
                n = self.limits.max_formula_chars
                self.refuse(f"a formula of more than {n} characters; the limit is {n}")
            self.formula.append(data)

    def end(self, tag: str) -> None:
        if self.formula is not None and tag in _FORMULA_TAGS:
            why = formula_problem("=" + "".join(self.formula), self.limits.max_formula_chars + 1,
                                  self.limits.max_nesting)
            if why:
                self.refuse(why)
            self.formula = None

    def no_dtd(self, *_) -> None:
        self.refuse("XML with a document type declaration (DTD); workbooks have none")

    def part(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
        self.name, self.formula = info.filename, None
        parser = expat.ParserCreate(namespace_separator=" ")
        parser.ordered_attributes = True
        parser.StartElementHandler, parser.EndElementHandler = self.start, self.end
        parser.CharacterDataHandler = self.text
        parser.StartDoctypeDeclHandler = parser.EntityDeclHandler = self.no_dtd
        try:
            with zf.open(info) as fh:
                while chunk := fh.read(1 << 16):
                    parser.Parse(chunk, False)
                parser.Parse(b"", True)
        except expat.ExpatError:
            return  # not XML, or malformed: openpyxl refuses what it needs and cannot parse
        except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError, RuntimeError) as exc:
            raise WorkbookError(f"corrupt zip package: {exc}"[:300]) from None


def open_workbook(data: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[openpyxl.Workbook, int]:
    """Check ``data`` against ``limits`` and load it with openpyxl (formulas as text).

    Returns:
        ``(workbook, n_charts)``; charts are counted from the zip parts.

    Raises:
        WorkbookError: not bytes, too large, not a zip/xlsx, macros present (by name,
            content type or relationship), a DTD, malformed, too many sheets, cells or
            XML elements, or a formula too long or too deeply nested.
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
    with zipfile.ZipFile(buf) as zf:  # macros, DTDs, cells, elements, formula sizes: streamed
        scan_package(zf, limits)
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


def defined_names(wb: openpyxl.Workbook) -> dict[tuple[str, str], str]:
    """The workbook's defined names, ``{(scope, NAME): target text}``: scope "" for
    workbook-scoped names, the upper-case sheet title for sheet-scoped ones (which openpyxl
    keeps in ``ws.defined_names``)."""
    out = {("", str(n).upper()): str(d.attr_text) for n, d in wb.defined_names.items()
           if d.attr_text is not None}
    for ws in wb.worksheets:
        out.update({(ws.title.upper(), str(n).upper()): str(d.attr_text)
                    for n, d in getattr(ws, "defined_names", {}).items() if d.attr_text is not None})
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
        "n_named_ranges": float(len(defined_names(wb))),  # workbook- and sheet-scoped names
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


_EVALS: dict[tuple, Evaluation] = {}


def _evaluate_cached(key: str, limits: Limits, cells: dict, names: dict | None = None,
                     sheets: tuple[str, ...] | None = None) -> Evaluation:
    """Evaluate once per distinct cell content (with the same defined names and sheets):
    workbooks that differ only in styling share it."""
    k = (key, limits.max_formulas, limits.eval_timeout_s, limits.max_formula_chars,
         limits.max_nesting, limits.eval_memory_mb)
    if k not in _EVALS:
        if len(_EVALS) > 8192:
            _EVALS.clear()
        _EVALS[k] = evaluate(cells, limits.max_formulas, limits.eval_timeout_s,
                             limits.max_formula_chars, limits.max_nesting, limits.eval_memory_mb,
                             names=names, sheets=sheets)
    return _EVALS[k]


@functools.lru_cache(maxsize=8192)
def _cached(digest: str, data: bytes, limits: Limits) -> tuple[dict[str, float], Evaluation]:
    wb, n_charts = open_workbook(data, limits)
    if limits.evaluate:
        cells = cell_map(wb)
        for k, v in cells.items():  # text cells starting with "=" are evaluated as formulas too
            why = is_formula(v) and formula_problem(v, limits.max_formula_chars, limits.max_nesting)
            if why:
                raise WorkbookError(f"{why} (cell {k[0]}!R{k[1]}C{k[2]})"[:300])
        names = defined_names(wb)
        sheets = tuple(ws.title.upper() for ws in wb.worksheets)
        key = hashlib.sha256(repr((sorted(cells.items()), sorted(names.items()), sheets)).encode()
                             ).hexdigest()
        ev = _evaluate_cached(key, limits, cells, names, sheets)
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
