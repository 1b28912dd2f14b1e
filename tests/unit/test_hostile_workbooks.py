"""Hostile workbooks (issue 29, items 8-10): each is refused, or stopped, quickly and in bounded memory.

Every file is built here, in memory: a 30,000-character formula, deep nesting, a
1.8-million-cell sheet (small once compressed), a flood of XML elements, a VBA
project renamed to ``xl/project.dat`` but wired up with the VBA content type and
relationship, and formulas of about thirty characters that pass intake yet take
minutes or a gigabyte to evaluate. Each refusal's cost is measured in CPU time (load
stretches wall time, not that) and its Python allocations with ``tracemalloc``. The whole
module must run in under 60 s with a peak memory under 500 MB (measure with ``/usr/bin/time -v``).
"""

from __future__ import annotations

import io
import resource
import threading
import time
import tracemalloc
import zipfile

import openpyxl
import pytest

from minirepro.papers.spreadsheet_arena import features, isolate
from minirepro.papers.spreadsheet_arena.evaluate import evaluate
from minirepro.papers.spreadsheet_arena.features import Limits, WorkbookError, extract_features

MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
VBA_TYPE = "application/vnd.ms-office.vbaProject"
VBA_REL = "http://schemas.microsoft.com/office/2006/relationships/vbaProject"
# Short formulas that pass intake but are hostile to evaluate, over a 1,000 x 10 grid of
# distinct numbers (10,000 cells, well under the 50,000-cell limit). COUNTIF with an array of
# criteria is quadratic inside the library: one cell, 10^8 comparisons, tens of seconds (a
# deadline checked only between cells cannot stop it). REPT over the grid builds about a
# gigabyte of text inside one cell.
SLOW = "=SUM(COUNTIF(B1:K1000,B1:K1000))"
HUNGRY = '=SUM(LEN(REPT("ab",B1:K1000)))'


def _grid(formula: str) -> dict:
    cells = {("S", r, c): r * 100 + c for r in range(1, 1001) for c in range(2, 12)}
    cells[("S", 1, 1)] = formula
    return cells

def _parts(wb: openpyxl.Workbook | None = None) -> dict[str, bytes]:
    if wb is None:
        wb = openpyxl.Workbook()
        wb.active["A1"], wb.active["A2"], wb.active["A3"] = 2, 3, "=A1*A2"
    buf = io.BytesIO()
    wb.save(buf)
    with zipfile.ZipFile(buf) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _zip(parts: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for k, v in parts.items():
            zf.writestr(k, v)
    return buf.getvalue()


def _with_sheet(sheet_data: str) -> bytes:
    """A valid workbook whose first sheet's ``<sheetData>`` is ``sheet_data``."""
    parts = _parts()
    parts["xl/worksheets/sheet1.xml"] = (f'<worksheet xmlns="{MAIN}"><sheetData>{sheet_data}'
                                         "</sheetData></worksheet>").encode()
    return _zip(parts)


def _formula_sheet(formula: str) -> bytes:
    return _with_sheet(f'<row r="1"><c r="A1"><f>{formula}</f></c></row>')


# A wall-clock bound that guards against a hang only: far above what load does to these calls
# (measured beside a CPU hog at load 7.7-8.8 on 2 cores, 5 runs each: the slowest call, the
# memory cap's, took 0.7-5.4 s; a 1 s deadline, a fresh worker's start-up included, 2.3-12.4 s).
HANG_S = 60.0


def _cpu() -> float:
    """CPU seconds of this process and of the children it has reaped (an evaluation worker
    stopped at a limit is reaped, so its CPU time counts here)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _bounded(fn, seconds: float, mb: float):
    """Run ``fn`` twice: once under tracemalloc, asserting it allocated under ``mb`` MB at its
    peak, and once untraced, asserting it cost under ``seconds`` of CPU time (tracemalloc slows
    every allocation several-fold). CPU time, not wall time: the work's own cost, which the
    machine's load does not stretch (a refusal's wall time moved 2.3-3.6 s beside a CPU hog
    while its CPU time stayed 0.47-0.51 s); the wall clock only guards against a hang."""
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    assert peak < mb, f"allocated {peak:.0f} MB at the peak (bound {mb} MB)"
    c0, t0 = _cpu(), time.perf_counter()
    out = fn()
    cpu, elapsed = _cpu() - c0, time.perf_counter() - t0
    assert cpu < seconds, f"cost {cpu:.1f} s of CPU (bound {seconds} s)"
    assert elapsed < HANG_S, f"took {elapsed:.1f} s"
    return out


def _refused(data: bytes, match: str, seconds: float = 5.0, mb: float = 60.0) -> None:
    def go():
        with pytest.raises(WorkbookError, match=match):
            extract_features(data)
    _bounded(go, seconds, mb)


# ---------------------------------------------------------------- item 8: formula size and depth

def test_a_30000_character_formula_is_refused_before_parsing():
    data = _formula_sheet("+".join(["A2"] * 10_000)[:30_000])
    assert len(data) < 8 * 1024  # a few KiB on disk
    _refused(data, "characters")


def test_a_long_formula_hidden_in_a_text_cell_is_refused():
    # Not an <f> element but an inline string starting with "=", which the evaluator would parse.
    text = "=" + "+".join(["A2"] * 10_000)[:30_000]
    _refused(_with_sheet(f'<row r="1"><c r="A1" t="inlineStr"><is><t>{text}</t></is></c></row>'),
             "characters")


@pytest.mark.parametrize("formula", ["(" * 200 + "1" + ")" * 200, "SUM(" * 100 + "1" + ")" * 100,
                                     "{" * 80 + "1" + "}" * 80])
def test_deep_nesting_is_refused_before_parsing(formula):
    _refused(_formula_sheet(formula), "nest")


def test_evaluate_itself_refuses_long_and_deep_formulas_without_parsing():
    long_ = {("S", 1, 1): "=" + "+".join(["A2"] * 10_000)[:30_000]}
    deep = {("S", 1, 1): "=" + "(" * 500 + "1" + ")" * 500}  # 1,002 characters: under the limit
    for cells, word in ((long_, "characters"), (deep, "nest")):
        ev = _bounded(lambda c=cells: evaluate(c), 2.0, 20.0)
        assert not ev.complete and word in ev.reason and not ev.values


def test_formula_limits_leave_ordinary_formulas_alone():
    f = extract_features(_formula_sheet('IF(AND(A2&gt;0,OR(A3&lt;1,A4="a(b")),SUM(A2:A9),0)'))
    assert f["n_formulas"] == 1 and f["eval_complete"] == 1.0
    ok = "=" + "+".join(["A2"] * 300)  # 899 characters: under the default limit of 1,024
    assert evaluate({("S", 1, 1): ok}).complete
    with pytest.raises(ValueError):
        evaluate({("S", 1, 1): ok}, max_formula_chars=0)


# ---------------------------------------------------------------- item 9: cells counted while streaming

def test_a_1_8_million_cell_sheet_is_refused_while_streaming():
    row = "<c/>" * 1000
    data = _with_sheet("".join(f"<row>{row}</row>" for _ in range(1800)))
    assert len(data) < 100 * 1024  # small on disk
    _refused(data, "cells")


def test_a_flood_of_row_elements_is_refused_while_streaming():
    # No cells at all, but a million row records, each of which openpyxl would keep.
    data = _with_sheet('<row ht="2"/>' * 1_200_000)
    assert len(data) < 100 * 1024
    # 250,000 elements go through expat's Python callbacks before the refusal: 0.47-0.51 s of CPU
    # (5 runs beside a CPU hog, load 8; wall 2.3-3.6 s); parsing all 1.2 M would take several times that.
    _refused(data, "XML elements")


def test_cell_limit_counts_every_sheet():
    wb = openpyxl.Workbook()
    for k in range(3):
        ws = wb.active if k == 0 else wb.create_sheet(f"S{k}")
        for r in range(1, 11):
            ws.cell(r, 1, r)
    data = _zip(_parts(wb))
    assert extract_features(data, Limits(max_cells=30))["n_cells"] == 30
    with pytest.raises(WorkbookError, match="more than 29 cells"):
        extract_features(data, Limits(max_cells=29))  # stops at the first cell over the limit


# ---------------------------------------------------------------- item 10: macros by content, not name

def _vba_parts(content_type: bool = True, relationship: bool = True, default: bool = False):
    parts = _parts()
    parts["xl/project.dat"] = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512  # an OLE header
    ct = parts["[Content_Types].xml"].decode()
    if content_type:
        entry = (f'<Default Extension="dat" ContentType="{VBA_TYPE}"/>' if default else
                 f'<Override PartName="/xl/project.dat" ContentType="{VBA_TYPE}"/>')
        parts["[Content_Types].xml"] = ct.replace("</Types>", entry + "</Types>").encode()
    if relationship:
        rels = parts["xl/_rels/workbook.xml.rels"].decode()
        rel = f'<Relationship Id="rIdVba" Type="{VBA_REL}" Target="project.dat"/>'
        parts["xl/_rels/workbook.xml.rels"] = rels.replace("</Relationships>",
                                                           rel + "</Relationships>").encode()
    return parts


@pytest.mark.parametrize("kind", ["both", "content-type", "default-extension", "relationship"])
def test_a_renamed_vba_project_is_refused(kind):
    parts = _vba_parts(content_type=kind != "relationship", relationship=kind in ("both", "relationship"),
                       default=kind == "default-extension")
    assert not any("vbaproject" in n.lower() for n in parts)
    _refused(_zip(parts), "macro")


def test_macro_enabled_main_part_and_excel4_macro_sheets_are_refused():
    parts = _parts()
    ct = parts["[Content_Types].xml"].decode()
    xlsm = ct.replace("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml",
                      "application/vnd.ms-excel.sheet.macroEnabled.main+xml")
    assert "macroEnabled" in xlsm
    _refused(_zip({**parts, "[Content_Types].xml": xlsm.encode()}), "macro")
    rels = parts["xl/_rels/workbook.xml.rels"].decode().replace(
        "</Relationships>", '<Relationship Id="rIdM" Type="http://schemas.microsoft.com/office/2006/'
        'relationships/xlMacrosheet" Target="macrosheets/sheet1.xml"/></Relationships>')
    _refused(_zip({**parts, "xl/_rels/workbook.xml.rels": rels.encode()}), "macro")


def test_an_ordinary_binary_part_is_not_mistaken_for_macros():
    parts = _parts()
    parts["xl/media/image1.dat"] = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    assert extract_features(_zip(parts))["n_formulas"] == 1


# ---------------------------------------------------------------- item 8: a firm deadline, no global lock

def test_evaluation_deadline_is_enforced_inside_a_single_cell():
    evaluate({("S", 1, 1): "=1+1"})  # start the evaluation worker outside the timed part
    t0 = time.perf_counter()
    ev = evaluate({**_grid(SLOW), ("S", 1, 12): "=1+1"}, timeout_s=1.0)
    elapsed = time.perf_counter() - t0
    # stopped inside the cell: the worker was killed when its hard deadline (1.25 x 1.0 s + 1 s
    # after the request, on the parent's clock) passed with no answer. That status, not the
    # elapsed time, says the deadline was enforced: a deadline checked between cells would
    # report "exceeded" without stopping the worker, after tens of seconds.
    assert not ev.complete and "1.0 s" in ev.reason and "its worker was stopped" in ev.reason
    # a hang guard: measured 2.3-12.4 s beside a CPU hog at load 8 on 2 cores (6.0 s failed there)
    assert elapsed < HANG_S, f"a 1 s deadline took {elapsed:.1f} s to enforce"


def test_one_slow_workbook_does_not_block_the_others():
    # Two idle workers, started and ready, so none is started below: a worker's start-up (2-4 s
    # at load 7.5-9.5 on 2 cores) is the only slow part an ordinary evaluation can meet. Two
    # warm-up evaluations in threads, as before, left that to their timing and a background
    # spare (the order below failed once in a full run of this file at load 9). With both ready,
    # beside a CPU hog at load 9.3-9.6 the ordinary one ended 0.51-0.55 s after the slow one
    # started and the slow one at 8.6 s (its 8.5 s hard deadline): 4 runs.
    isolate.warm(2)
    slow_done: list[float] = []
    slow = threading.Thread(target=lambda: (evaluate(_grid(SLOW), timeout_s=6.0),
                                            slow_done.append(time.perf_counter())))
    slow.start()
    try:
        time.sleep(0.5)  # the slow one is evaluating now
        ev = evaluate({("S", 1, 1): "=A2*2", ("S", 2, 1): 21})
        ordinary_done = time.perf_counter()
    finally:
        slow.join(timeout=120)
    assert ev.complete and ev.values[("S", 1, 1)] == 42
    # Blocked behind the slow one, the ordinary evaluation could only end after it (its 6 s
    # deadline); an order, not a time bound, so a loaded machine does not make it flaky.
    assert slow_done and ordinary_done < slow_done[0], "an ordinary evaluation waited behind a slow one"


def test_evaluation_memory_is_capped():
    ev = _bounded(lambda: evaluate(_grid(HUNGRY), timeout_s=30.0, memory_mb=100), 20.0, 30.0)
    assert not ev.complete and "memory" in ev.reason
    assert evaluate({("S", 1, 1): "=2*3"}).values[("S", 1, 1)] == 6  # the next evaluation is fine


def test_slow_workbook_through_intake_is_stopped_on_time(monkeypatch):
    seen = []
    monkeypatch.setattr(features, "evaluate", lambda *a, **k: seen.append(evaluate(*a, **k)) or seen[-1])
    wb = openpyxl.Workbook()
    for (_, r, c), v in _grid(SLOW).items():
        wb.active.cell(r, c, v)
    data = _zip(_parts(wb))
    c0, t0 = _cpu(), time.perf_counter()
    f = extract_features(data, Limits(eval_timeout_s=1.0))
    cpu, elapsed = _cpu() - c0, time.perf_counter() - t0
    assert f["n_cells"] == 10_001 and f["eval_complete"] == 0.0
    # on time: intake's evaluation was stopped at its hard deadline (the status the code
    # reports), not waited for; the elapsed time under load is no measure of that (3.9-10.9 s
    # beside a CPU hog at load 8 on 2 cores, a worker's start-up included: 10 s failed there)
    assert len(seen) == 1 and "its worker was stopped" in seen[0].reason, seen
    # the intake's own cost (reading 10,001 cells) and the stopped worker's: 1.7-2.0 s of CPU there
    assert cpu < 10.0, f"intake with a 1 s evaluation deadline cost {cpu:.1f} s of CPU"
    assert elapsed < HANG_S, f"intake with a 1 s evaluation deadline took {elapsed:.1f} s"
