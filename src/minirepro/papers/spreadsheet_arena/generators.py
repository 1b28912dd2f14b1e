"""Workbook generators: programmatic openpyxl writers standing in for the arena's LLMs.

A generator maps a prompt to the bytes of an .xlsx file. The stand-ins here are
one writer with different *latent habits*: each profile gives the probability
that a workbook uses formulas rather than hard-coded numbers, puts literal
constants inside formulas, styles its header, applies number formats,
conditional formats, a chart, frozen panes, several sheets, the finance
convention of blue inputs and black formulas, named ranges, or carries a broken
formula. Habits are drawn per workbook, so features vary within a generator
(otherwise generator identity and features would be collinear and a
feature-controlled model could not separate them).

A real model plugs in through :class:`CallableGenerator`: any function from the
prompt text to workbook bytes.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
from openpyxl import Workbook
from openpyxl.chart import BarChart, LineChart, Reference
from openpyxl.formatting.rule import CellIsRule, ColorScaleRule, DataBarRule
from openpyxl.styles import Font, PatternFill
from openpyxl.utils import get_column_letter
from openpyxl.workbook.defined_name import DefinedName

from minirepro.papers.spreadsheet_arena.prompts import Prompt

HABITS: tuple[str, ...] = ("formulas", "literals", "header_style", "number_formats", "cond_format",
                           "chart", "freeze", "multi_sheet", "blue_inputs", "error", "named_ranges",
                           "col_widths")
FORMATS = {"money": '"$"#,##0', "pct": "0.0%", "int": "0", "date": "yyyy-mm-dd", "num": "#,##0.00"}
BLUE, BLACK = "FF0000FF", "FF000000"


@runtime_checkable
class WorkbookGenerator(Protocol):
    """What the arena needs of a model: a name and ``generate(prompt, seed) -> xlsx bytes``."""

    name: str

    def generate(self, prompt: Prompt, seed: int = 0) -> bytes: ...


@dataclass(frozen=True)
class Habits:
    """The habits one workbook was written with (a draw from a :class:`Profile`)."""

    formulas: bool = True
    literals: bool = False
    header_style: bool = False
    number_formats: bool = False
    cond_format: bool = False
    chart: bool = False
    freeze: bool = False
    multi_sheet: bool = False
    blue_inputs: bool = False
    error: bool = False
    named_ranges: bool = False
    col_widths: bool = False


@dataclass(frozen=True)
class Profile:
    """A generator's propensities: ``probs[h]`` is P(habit ``h``) per workbook, in [0, 1]."""

    name: str
    probs: dict[str, float] = field(default_factory=dict)
    header_fill: str = "FF1F4E79"

    def __post_init__(self) -> None:
        bad = {k: v for k, v in self.probs.items() if k not in HABITS or not 0.0 <= float(v) <= 1.0}
        if bad:
            raise ValueError(f"profile {self.name!r}: unknown habits or probabilities outside [0, 1]: "
                             f"{bad}; habits are {HABITS}")

    def draw(self, rng: np.random.Generator) -> Habits:
        """One workbook's habits, each an independent Bernoulli(``probs[h]``) draw."""
        u = rng.random(len(HABITS))
        return Habits(**{h: bool(u[k] < self.probs.get(h, 0.0)) for k, h in enumerate(HABITS)})


def _p(formulas, literals, header, numfmt, cond, chart, freeze, multi, blue, error, names, widths):
    return dict(zip(HABITS, (formulas, literals, header, numfmt, cond, chart, freeze, multi, blue,
                             error, names, widths)))


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("gen-formulaic", _p(.95, .05, .3, .4, .05, .05, .2, .3, .6, .03, .2, .3), "FF404040"),
    Profile("gen-stylish", _p(.25, .5, .95, .9, .7, .7, .8, .2, .05, .08, 0, .95), "FF7030A0"),
    Profile("gen-balanced", _p(.6, .3, .7, .7, .4, .4, .5, .4, .3, .05, .1, .7), "FF2E75B6"),
    Profile("gen-minimal", _p(.3, .3, .1, .15, .02, .02, .05, .05, .02, .05, 0, .1), "FFA6A6A6"),
    Profile("gen-analyst", _p(.9, .1, .6, .85, .2, .3, .6, .8, .9, .02, .7, .8), "FF375623"),
    Profile("gen-sloppy", _p(.6, .7, .6, .5, .5, .5, .3, .3, .1, .4, 0, .5), "FFC55A11"),
)}


@dataclass
class _Cell:
    value: object = None
    formula: str | None = None
    literal: str | None = None  # the same formula with an input hard-coded as a number
    role: str = "label"  # title | header | label | input | calc
    fmt: str | None = None


@dataclass
class _Sheet:
    name: str
    cells: dict[tuple[int, int], _Cell] = field(default_factory=dict)
    header_row: int = 1
    chart: tuple[int, int, int, int, int] | None = None  # data col, first row, last row, cat col, hdr
    cond: tuple[str, str] | None = None  # (range, kind)

    def put(self, r: int, c: int, value=None, role="label", fmt=None, formula=None, literal=None):
        self.cells[(r, c)] = _Cell(value, formula, literal, role, fmt)


def _a(r: int, c: int, absolute: bool = False) -> str:
    col = get_column_letter(c)
    return f"${col}${r}" if absolute else f"{col}{r}"


def _finance(p: dict, h: Habits) -> list[_Sheet]:
    inp = _Sheet("Assumptions") if h.multi_sheet else None
    mdl = _Sheet("P&L" if h.multi_sheet else "Model")
    home = inp or mdl
    pre = "Assumptions!" if h.multi_sheet else ""
    home.put(1, 1, "Assumptions", "title")
    names = [("Starting revenue", "revenue", "money"), ("Revenue growth", "growth", "pct"),
             ("Cost of sales (% of revenue)", "cogs", "pct"), ("Operating costs", "opex", "money"),
             ("Tax rate", "tax", "pct")]
    ref = {}
    for k, (label, key, fmt) in enumerate(names):
        home.put(2 + k, 1, label)
        home.put(2 + k, 2, p[key], "input", fmt)
        ref[key] = pre + _a(2 + k, 2, absolute=True)
    top = 1 if h.multi_sheet else 8
    mdl.header_row = top
    mdl.put(top, 1, "Line item", "header")
    lines = ["Revenue", "Cost of sales", "Gross profit", "Operating costs", "EBIT", "Tax",
             "Net income", "Net margin"]
    row = {name: top + 1 + k for k, name in enumerate(lines)}
    for name in lines:
        mdl.put(row[name], 1, name)
    rev = p["revenue"]
    for y in range(p["years"]):
        c = 2 + y
        mdl.put(top, c, f"Year {y + 1}", "header")
        A = {name: _a(r, c) for name, r in row.items()}
        if y == 0:
            mdl.put(row["Revenue"], c, rev, "calc", "money", f"={ref['revenue']}", f"={p['revenue']:g}")
        else:
            prev = _a(row["Revenue"], c - 1)
            rev = rev * (1 + p["growth"])
            mdl.put(row["Revenue"], c, rev, "calc", "money", f"={prev}*(1+{ref['growth']})",
                    f"={prev}*{1 + p['growth']:g}")
        cogs, gp = rev * p["cogs"], rev * (1 - p["cogs"])
        ebit = gp - p["opex"]
        tax = max(0.0, ebit * p["tax"])
        mdl.put(row["Cost of sales"], c, cogs, "calc", "money", f"={A['Revenue']}*{ref['cogs']}",
                f"={A['Revenue']}*{p['cogs']:g}")
        mdl.put(row["Gross profit"], c, gp, "calc", "money", f"={A['Revenue']}-{A['Cost of sales']}")
        mdl.put(row["Operating costs"], c, p["opex"], "calc", "money", f"={ref['opex']}",
                f"={p['opex']:g}")
        mdl.put(row["EBIT"], c, ebit, "calc", "money", f"={A['Gross profit']}-{A['Operating costs']}")
        mdl.put(row["Tax"], c, tax, "calc", "money", f"=MAX(0,{A['EBIT']}*{ref['tax']})",
                f"=MAX(0,{A['EBIT']}*{p['tax']:g})")
        mdl.put(row["Net income"], c, ebit - tax, "calc", "money", f"={A['EBIT']}-{A['Tax']}")
        mdl.put(row["Net margin"], c, (ebit - tax) / rev, "calc", "pct",
                f"={A['Net income']}/{A['Revenue']}")
    mdl.chart = (row["Revenue"], 2, 1 + p["years"], 0, row["Net income"])  # row-wise series
    mdl.cond = (f"B{row['Net income']}:{get_column_letter(1 + p['years'])}{row['Net income']}", "neg")
    return [s for s in (inp, mdl) if s is not None]


def _budget(p: dict, h: Habits) -> list[_Sheet]:
    sh = _Sheet("Budget")
    m, items = p["months"], p["items"]
    sh.put(1, 1, "Item", "header")
    for j in range(m):
        sh.put(1, 2 + j, f"Month {j + 1}", "header")
    tc = 2 + m
    sh.put(1, tc, "Total", "header")
    last = 1 + len(items)
    for i, item in enumerate(items):
        r = 2 + i
        sh.put(r, 1, item)
        for j in range(m):
            sh.put(r, 2 + j, p["amounts"][i][j], "input", "money")
        sh.put(r, tc, sum(p["amounts"][i]), "calc", "money", f"=SUM(B{r}:{_a(r, tc - 1)})")
    tot, inc, sav, left, rate = last + 1, last + 2, last + 3, last + 4, last + 6
    for r, label in ((tot, "Total spending"), (inc, "Income"), (sav, "Savings target"),
                     (left, "Left over"), (rate, "Savings rate")):
        sh.put(r, 1, label)
    sh.put(rate, 2, p["save_rate"], "input", "pct")
    for j in range(m + 1):
        c = 2 + j
        col = get_column_letter(c)
        spend = sum(a[j] for a in p["amounts"]) if j < m else sum(map(sum, p["amounts"]))
        income = p["income"] * (m if j == m else 1)
        sh.put(tot, c, spend, "calc", "money", f"=SUM({col}2:{col}{last})")
        if j < m:
            sh.put(inc, c, p["income"], "input", "money")
        else:
            sh.put(inc, c, income, "calc", "money", f"=SUM(B{inc}:{_a(inc, c - 1)})")
        sh.put(sav, c, income * p["save_rate"], "calc", "money", f"={col}{inc}*$B${rate}",
               f"={col}{inc}*{p['save_rate']:g}")
        sh.put(left, c, income * (1 - p["save_rate"]) - spend, "calc", "money",
               f"={col}{inc}-{col}{tot}-{col}{sav}")
    sh.chart = (tc, 2, last, 1, 0)
    sh.cond = (f"B2:{_a(last, tc - 1)}", "scale")
    out = [sh]
    if h.multi_sheet:
        s2 = _Sheet("Summary")
        s2.put(1, 1, "Item", "header")
        s2.put(1, 2, "Total", "header")
        for i, item in enumerate(items):
            s2.put(2 + i, 1, item)
            s2.put(2 + i, 2, sum(p["amounts"][i]), "calc", "money", f"=Budget!{_a(2 + i, tc)}")
        out.append(s2)
    return out


def _tracker(p: dict, h: Habits) -> list[_Sheet]:
    sh = _Sheet("Tasks")
    for c, name in enumerate(("Task", "Owner", "Due", "Status", "% done"), start=1):
        sh.put(1, c, name, "header")
    n = len(p["tasks"])
    base = dt.date(2026, 1, 5)
    for i in range(n):
        r = 2 + i
        sh.put(r, 1, p["tasks"][i])
        sh.put(r, 2, p["owners"][i])
        sh.put(r, 3, base + dt.timedelta(days=p["due"][i]), "input", "date")
        sh.put(r, 4, p["status"][i])
        sh.put(r, 5, p["done"][i], "input", "pct")
    last = 1 + n
    summ = _Sheet("Summary") if h.multi_sheet else sh
    pre = "Tasks!" if h.multi_sheet else ""
    r0 = 1 if h.multi_sheet else last + 2
    n_done = sum(s == "Done" for s in p["status"])
    summ.put(r0, 1, "Tasks done")
    summ.put(r0, 2, n_done, "calc", "int", f'=COUNTIF({pre}D2:D{last},"Done")')
    summ.put(r0 + 1, 1, "Average completion")
    summ.put(r0 + 1, 2, float(np.mean(p["done"])), "calc", "pct", f"=AVERAGE({pre}E2:E{last})")
    summ.put(r0 + 2, 1, "Share of tasks done")
    summ.put(r0 + 2, 2, n_done / n, "calc", "pct", f"=B{r0}/COUNTA({pre}A2:A{last})",
             f"=B{r0}/{n}")
    sh.chart = (5, 2, last, 1, 0)
    sh.cond = (f"D2:D{last}", "done")
    return [sh] + ([summ] if h.multi_sheet else [])


def _table(p: dict, h: Habits) -> list[_Sheet]:
    sh = _Sheet("Data")
    for c, name in enumerate(("Product", "Region", "Units", "Unit price", "Revenue"), start=1):
        sh.put(1, c, name, "header")
    d = p["discount"]
    sh.put(1, 7, "Discount")
    sh.put(1, 8, d, "input", "pct")
    rows = p["rows"]
    for i, (prod, region, units, price) in enumerate(rows):
        r = 2 + i
        sh.put(r, 1, prod)
        sh.put(r, 2, region)
        sh.put(r, 3, units, "input", "int")
        sh.put(r, 4, price, "input", "num")
        sh.put(r, 5, units * price * (1 - d), "calc", "num", f"=C{r}*D{r}*(1-$H$1)",
               f"=C{r}*D{r}*{1 - d:g}")
    last = 1 + len(rows)
    sh.put(last + 1, 1, "Total")
    sh.put(last + 1, 3, sum(r[2] for r in rows), "calc", "int", f"=SUM(C2:C{last})")
    sh.put(last + 1, 5, sum(r[2] * r[3] * (1 - d) for r in rows), "calc", "num", f"=SUM(E2:E{last})")
    sh.chart = (5, 2, last, 1, 0)
    sh.cond = (f"E2:E{last}", "bar")
    out = [sh]
    if h.multi_sheet:
        s2 = _Sheet("Summary")
        s2.put(1, 1, "Total revenue")
        s2.put(1, 2, sum(r[2] * r[3] * (1 - d) for r in rows), "calc", "num", f"=Data!E{last + 1}")
        out.append(s2)
    return out


_BUILDERS = {"finance": _finance, "budget": _budget, "tracker": _tracker, "table": _table}


def _write_sheet(ws, spec: _Sheet, h: Habits, fill: str, rng: np.random.Generator) -> None:
    calc = [k for k, c in spec.cells.items() if c.role == "calc"]
    broken = calc[int(rng.integers(len(calc)))] if (h.error and calc) else None
    for (r, c), cell in spec.cells.items():
        out = ws.cell(row=r, column=c)
        if (r, c) == broken:
            out.value = f"={_a(r, c - 1) if c > 1 else 'A1'}/Z99"  # Z99 is empty: #DIV/0!
        elif cell.role == "calc" and h.formulas:
            out.value = cell.literal if (h.literals and cell.literal) else cell.formula
        elif cell.role == "calc":
            out.value = round(cell.value, 2) if isinstance(cell.value, float) else cell.value
        else:
            out.value = cell.value
        if cell.role in ("header", "title"):
            if h.header_style and cell.role == "header":
                out.font = Font(bold=True, color="FFFFFFFF")
                out.fill = PatternFill("solid", start_color=fill, end_color=fill)
            elif cell.role == "title":
                out.font = Font(bold=h.header_style)
        if h.blue_inputs and cell.role == "input":
            out.font = Font(color=BLUE)
        elif h.blue_inputs and cell.role == "calc":
            out.font = Font(color=BLACK)
        if cell.fmt and (h.number_formats or cell.fmt == "date"):
            out.number_format = FORMATS[cell.fmt]
    if h.freeze:
        ws.freeze_panes = ws.cell(row=spec.header_row + 1, column=2)
    if h.col_widths:
        ws.column_dimensions["A"].width = 28
        for c in range(2, 1 + max(c for _, c in spec.cells)):
            ws.column_dimensions[get_column_letter(c)].width = 14
    if h.cond_format and spec.cond:
        rng_ref, kind = spec.cond
        red = PatternFill("solid", start_color="FFFFC7CE", end_color="FFFFC7CE")
        green = PatternFill("solid", start_color="FFC6EFCE", end_color="FFC6EFCE")
        rule = {"neg": CellIsRule(operator="lessThan", formula=["0"], fill=red),
                "done": CellIsRule(operator="equal", formula=['"Done"'], fill=green),
                "scale": ColorScaleRule(start_type="min", start_color="FFFFFFFF",
                                        end_type="max", end_color="FFF8696B"),
                "bar": DataBarRule(start_type="min", end_type="max", color="FF638EC6")}[kind]
        ws.conditional_formatting.add(rng_ref, rule)
    if h.chart and spec.chart:
        _add_chart(ws, spec)


def _add_chart(ws, spec: _Sheet) -> None:
    a, lo, hi, cat, extra = spec.chart
    if cat == 0:  # finance: series are rows a and extra across columns lo..hi
        ch = LineChart()
        for r in (a, extra):
            ch.add_data(Reference(ws, min_col=lo - 1, max_col=hi, min_row=r, max_row=r),
                        from_rows=True, titles_from_data=True)
        ch.set_categories(Reference(ws, min_col=lo, max_col=hi, min_row=spec.header_row))
    else:
        ch = BarChart()
        ch.add_data(Reference(ws, min_col=a, min_row=lo - 1, max_row=hi), titles_from_data=True)
        ch.set_categories(Reference(ws, min_col=cat, min_row=lo, max_row=hi))
    ch.title = "Overview"
    ws.add_chart(ch, "J2")


def write_workbook(prompt: Prompt, habits: Habits, header_fill: str = "FF1F4E79",
                   seed: int = 0) -> bytes:
    """The .xlsx bytes answering ``prompt`` with the given ``habits`` (deterministic in ``seed``)."""
    if prompt.category not in _BUILDERS:
        raise ValueError(f"no builder for category {prompt.category!r}; expected one of "
                         f"{sorted(_BUILDERS)}")
    rng = np.random.default_rng([seed, 17])
    wb = Workbook()
    wb.remove(wb.active)
    wb.properties.creator = "arena"  # identical for every generator: the file must not name its maker
    specs = _BUILDERS[prompt.category](prompt.params, habits)
    for spec in specs:
        _write_sheet(wb.create_sheet(spec.name), spec, habits, header_fill, rng)
    if habits.named_ranges:
        for spec in specs:
            for (r, c), cell in spec.cells.items():
                if cell.role == "input" and c == 2 and isinstance(spec.cells.get((r, 1)), _Cell):
                    label = str(spec.cells[(r, 1)].value)
                    nm = "".join(ch for ch in label.title() if ch.isalnum())[:30] or f"Input{r}"
                    ref = f"'{spec.name}'!{_a(r, c, absolute=True)}"
                    if nm not in wb.defined_names:
                        wb.defined_names[nm] = DefinedName(nm, attr_text=ref)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


@dataclass(frozen=True)
class ProgrammaticGenerator:
    """A stand-in model: draws habits from its :class:`Profile` per (prompt, seed) and writes."""

    profile: Profile

    @property
    def name(self) -> str:
        return self.profile.name

    def habits(self, prompt: Prompt, seed: int = 0) -> Habits:
        """The habits this generator uses for ``prompt`` (a deterministic draw)."""
        key = [seed, sum(map(ord, self.name)), sum(ord(ch) * (k + 1) for k, ch in enumerate(prompt.id))]
        return self.profile.draw(np.random.default_rng(key))

    def generate(self, prompt: Prompt, seed: int = 0) -> bytes:
        return write_workbook(prompt, self.habits(prompt, seed), self.profile.header_fill, seed)


@dataclass(frozen=True)
class CallableGenerator:
    """Adapter for a real model: ``fn(prompt_text) -> xlsx bytes`` under ``name``."""

    name: str
    fn: Callable[[str], bytes]

    def generate(self, prompt: Prompt, seed: int = 0) -> bytes:
        out = self.fn(prompt.text)
        if not isinstance(out, (bytes, bytearray)):
            raise TypeError(f"generator {self.name!r} returned {type(out).__name__}; expected the "
                            "bytes of an .xlsx file")
        return bytes(out)


def default_generators() -> list[ProgrammaticGenerator]:
    """The six stand-in models, in a fixed order."""
    return [ProgrammaticGenerator(p) for p in PROFILES.values()]
