"""Workbooks as HTML tables with their formatting, every cell's content escaped.

Formula cells show the value the ``formulas`` evaluation gives (an error shows
as its error text, e.g. ``#DIV/0!``); the formula itself goes in the cell's
tooltip. Bold, font colour, solid fills and number formats are rendered; charts,
conditional formats and frozen panes are listed under the sheet, since a table
cannot show them faithfully.
"""

from __future__ import annotations

import datetime as dt
import html
import re

from openpyxl.utils import get_column_letter

from minirepro.papers.spreadsheet_arena.features import (
    DEFAULT_LIMITS,
    Limits,
    analyze,
    open_workbook,
)

_HEX = re.compile(r"^[0-9A-Fa-f]{6,8}$")
MAX_ROWS, MAX_COLS = 40, 14


def _css_color(rgb: object) -> str | None:
    if isinstance(rgb, str) and _HEX.match(rgb):
        return "#" + rgb[-6:]
    return None


def format_value(v: object, number_format: str = "General") -> str:
    """A cell value as display text under (an approximation of) its Excel number format."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (dt.datetime, dt.date)):
        return v.strftime("%Y-%m-%d")
    if isinstance(v, (int, float)):
        fmt = number_format or "General"
        if "%" in fmt:
            dec = len(fmt.split(".")[1].rstrip("%")) if "." in fmt else 0
            return f"{v * 100:.{dec}f}%"
        dec = len(re.sub(r"[^0#]", "", fmt.split(".")[1])) if "." in fmt else 0
        if fmt == "General":
            return f"{v:.6g}" if isinstance(v, float) else str(v)
        text = f"{v:,.{dec}f}" if "," in fmt else f"{v:.{dec}f}"
        return ("$" + text) if "$" in fmt else text
    return str(v)


def workbook_html(data: bytes, title: str = "Workbook", limits: Limits = DEFAULT_LIMITS) -> str:
    """An HTML fragment (one table per sheet) for the workbook bytes ``data``.

    Raises:
        WorkbookError: the file fails the limits or is malformed.
    """
    feats, ev = analyze(data, limits)
    wb, n_charts = open_workbook(data, limits)
    out = [f'<div class="workbook"><h3>{html.escape(title)}</h3>']
    for ws in wb.worksheets:
        out.extend(_sheet_html(ws, ev))
    if n_charts:
        out.append(f'<p class="notes">{n_charts} chart(s) in the workbook (not drawn here)</p>')
    if feats["n_errors"]:
        out.append(f'<p class="notes">{int(feats["n_errors"])} cell(s) evaluate to an error</p>')
    out.append("</div>")
    return "\n".join(out)


def _sheet_html(ws, ev) -> list[str]:
    """One sheet's lines: its table (at most MAX_ROWS x MAX_COLS) and the notes under it."""
    out = [f'<table class="sheet"><caption>{html.escape(ws.title)}</caption>']
    max_r, max_c = min(ws.max_row, MAX_ROWS), min(ws.max_column, MAX_COLS)
    out.append("<tr><th></th>" + "".join(f"<th>{get_column_letter(c)}</th>"
                                         for c in range(1, max_c + 1)) + "</tr>")
    for r in range(1, max_r + 1):
        cells = [f"<th>{r}</th>"] + [_cell_html(ws, ev, r, c) for c in range(1, max_c + 1)]
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    notes = _sheet_notes(ws, max_r, max_c)
    if notes:
        out.append(f'<p class="notes">{html.escape("; ".join(notes))}</p>')
    return out


def _cell_html(ws, ev, r: int, c: int) -> str:
    """Cell (r, c) as a ``<td>``: its value (a formula's evaluated value), style and formula tooltip."""
    cell = ws._cells.get((r, c))
    if cell is None or cell.value is None:
        return "<td></td>"
    v, tip = cell.value, ""
    if isinstance(v, str) and v.startswith("=") and len(v) > 1:
        tip = v
        v = ev.values.get((ws.title.upper(), r, c), v)
        v = str(v) if not isinstance(v, (int, float, bool, str)) else v
    style = []
    if cell.font is not None and cell.font.b:
        style.append("font-weight:bold")
    fc = _css_color(getattr(getattr(cell.font, "color", None), "rgb", None))
    if fc:
        style.append(f"color:{fc}")
    if cell.fill is not None and cell.fill.fill_type == "solid":
        bg = _css_color(getattr(cell.fill.start_color, "rgb", None))
        if bg:
            style.append(f"background:{bg}")
    text = format_value(v, cell.number_format)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        style.append("text-align:right")
    attrs = f' style="{";".join(style)}"' if style else ""
    if tip:
        attrs += f' title="{html.escape(tip, quote=True)}"'
    return f"<td{attrs}>{html.escape(text)}</td>"


def _sheet_notes(ws, max_r: int, max_c: int) -> list[str]:
    """What the table cannot show: frozen panes, conditional formats, rows and columns cut off."""
    notes = []
    if ws.freeze_panes:
        notes.append(f"frozen panes at {html.escape(str(ws.freeze_panes))}")
    n_cf = sum(len(x.rules) for x in ws.conditional_formatting)
    if n_cf:
        notes.append(f"{n_cf} conditional format rule(s)")
    if ws.max_row > MAX_ROWS or ws.max_column > MAX_COLS:
        notes.append(f"showing {max_r} of {ws.max_row} rows, {max_c} of {ws.max_column} columns")
    return notes


CSS = """
.pair{display:flex;gap:1.5em;align-items:flex-start;flex-wrap:wrap}
.workbook{flex:1;min-width:22em;overflow-x:auto}
table.sheet{border-collapse:collapse;font:12px/1.3 sans-serif;margin-bottom:.4em}
table.sheet td,table.sheet th{border:1px solid #d0d0d0;padding:2px 6px;white-space:nowrap}
table.sheet th{background:#f3f3f3;color:#666;font-weight:normal}
table.sheet caption{text-align:left;font-weight:bold;padding:2px 0}
p.notes{font:11px sans-serif;color:#555;margin:.2em 0 .8em}
"""


def pair_html(data_a: bytes, data_b: bytes, prompt_text: str, labels: tuple[str, str] = ("A", "B")
              ) -> str:
    """Two workbooks side by side under their prompt, as a self-contained HTML fragment."""
    return (f"<style>{CSS}</style><p><b>Prompt:</b> {html.escape(prompt_text)}</p>"
            f'<div class="pair">{workbook_html(data_a, f"Workbook {labels[0]}")}'
            f'{workbook_html(data_b, f"Workbook {labels[1]}")}</div>')
