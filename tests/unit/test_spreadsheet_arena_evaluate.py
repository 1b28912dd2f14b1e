"""SpreadsheetArena's evaluator on workbooks from two writers (openpyxl and xlsxwriter):
defined names (workbook- and sheet-scoped), whole-column and whole-row ranges, missing sheets."""

from __future__ import annotations

import io

import openpyxl
import pytest
import xlsxwriter
from openpyxl.workbook.defined_name import DefinedName

from minirepro.papers.spreadsheet_arena.evaluate import MAX_RANGE_CELLS, evaluate
from minirepro.papers.spreadsheet_arena.features import analyze, defined_names, open_workbook

# Inputs: A1:A3 = 1, 2, 3; B1 = 10; B2 = 0.1 (Rate); B3 = 7 (workbook-scoped Scale).
# Calc: A1 = 5 (Calc-scoped Scale, which wins on Calc), formulas in column B.
FORMULAS = {
    1: ("=Rate*100", 10.0),  # workbook-scoped name
    2: ("=Scale*2", 10.0),  # the sheet-scoped Scale (Calc!A1 = 5) wins over the workbook's (7)
    3: ("=SUM(Inputs!A:A)", 6.0 + 0.0),  # whole column: A1:A3
    4: ("=SUM(Inputs!1:1)", 19.0),  # whole row: A1 + B1 + C1 (= Scale + 1 on Inputs)
    5: ("=SUM(Block)", 6.0),  # a name for a range
    6: ("=Nowhere!A1+1", "#REF!"),  # a sheet that does not exist
    7: ("=SUM(Nowhere!A:A)", "#REF!"),
    8: ("=Undefined*2", "#NAME?"),  # a name that is not defined
}
INPUTS_FORMULA = ("=Scale+1", 8.0)  # on Inputs the workbook-scoped Scale (7) applies


def _xlsxwriter_book() -> bytes:
    buf = io.BytesIO()
    wb = xlsxwriter.Workbook(buf, {"in_memory": True})
    inp, calc = wb.add_worksheet("Inputs"), wb.add_worksheet("Calc")
    inp.write_column("A1", [1, 2, 3])
    inp.write("B1", 10)
    inp.write("B2", 0.1)
    inp.write("B3", 7)
    inp.write_formula("C1", INPUTS_FORMULA[0])
    calc.write("A1", 5)
    for r, (f, _) in FORMULAS.items():
        calc.write_formula(r - 1, 1, f)
    wb.define_name("Rate", "=Inputs!$B$2")
    wb.define_name("Scale", "=Inputs!$B$3")
    wb.define_name("Calc!Scale", "=Calc!$A$1")
    wb.define_name("Block", "=Inputs!$A$1:$A$3")
    wb.close()
    return buf.getvalue()


def _openpyxl_book() -> bytes:
    wb = openpyxl.Workbook()
    inp = wb.active
    inp.title = "Inputs"
    calc = wb.create_sheet("Calc")
    for r, v in enumerate([1, 2, 3], start=1):
        inp.cell(r, 1, v)
    inp["B1"], inp["B2"], inp["B3"], inp["C1"] = 10, 0.1, 7, INPUTS_FORMULA[0]
    calc["A1"] = 5
    for r, (f, _) in FORMULAS.items():
        calc.cell(r, 2, f)
    for name, ref in [("Rate", "Inputs!$B$2"), ("Scale", "Inputs!$B$3"), ("Block", "Inputs!$A$1:$A$3")]:
        wb.defined_names[name] = DefinedName(name, attr_text=ref)
    calc.defined_names["Scale"] = DefinedName("Scale", attr_text="Calc!$A$1")
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


@pytest.mark.parametrize("writer", [_xlsxwriter_book, _openpyxl_book], ids=["xlsxwriter", "openpyxl"])
def test_names_whole_ranges_and_missing_sheets(writer):
    data = writer()
    wb, _ = open_workbook(data)
    names = defined_names(wb)
    assert names[("CALC", "SCALE")].endswith("$A$1") and ("", "SCALE") in names
    feats, ev = analyze(data)
    assert ev.complete
    for r, (_, want) in FORMULAS.items():
        got = ev.values[("CALC", r, 2)]
        if isinstance(want, str):
            assert str(got) == want, (r, got)
            assert ("CALC", r, 2) in ev.errors
        else:
            assert got == pytest.approx(want), (r, got)
    assert ev.values[("INPUTS", 1, 3)] == pytest.approx(INPUTS_FORMULA[1])
    assert feats["n_errors"] == 3  # the two missing-sheet references and the undefined name


def test_whole_ranges_stay_within_the_size_limit():
    """A whole column reads the sheet's used rows only; a used extent beyond the per-reference
    limit makes the reference an error instead of a long walk."""
    rows = MAX_RANGE_CELLS + 10
    cells = {("S", 1, 1): 2, ("S", rows, 1): 3, ("T", 1, 1): "=SUM(S!A:A)",
             ("T", 2, 1): "=SUM(S!1:1)", ("T", 3, 1): "=SUM(S!A1:A5)"}
    ev = evaluate(cells, isolate=False)
    assert ev.complete
    assert str(ev.values[("T", 1, 1)]) == "#NAME?"  # 100,010 used rows: over the limit
    assert ev.values[("T", 2, 1)] == 2 and ev.values[("T", 3, 1)] == 2
    small = {("S", 1, 1): 2, ("S", 3, 1): 3, ("S", 1, 2): "=SUM(A:A)"}
    assert evaluate(small, isolate=False).values[("S", 1, 2)] == 5
    assert str(evaluate({("S", 1, 1): "=Gone!A1"}, isolate=False, sheets=("S",)).values[("S", 1, 1)]) \
        == "#REF!"
    # a sheet that exists but is empty is not missing: its cells are blank
    assert evaluate({("S", 1, 1): "=Empty!A1+1"}, isolate=False, sheets=("S", "EMPTY")).values[
        ("S", 1, 1)] == 1
