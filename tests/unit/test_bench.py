"""``minirepro bench``: time and peak memory (the kernel's included) per chapter and scale."""

from __future__ import annotations

import json

from minirepro import bench
from minirepro.cli import main


def _big_chapter(root) -> None:
    """A toy variant whose kernel holds a 320 MB array: the peak must include the kernel."""
    src = (root / "notebooks" / "01-toy" / "toy.md").read_text()
    (root / "notebooks" / "02-big").mkdir()
    (root / "notebooks" / "02-big" / "big.md").write_text(src.replace("n = 5  #", "n = 40_000_000  #"))


def test_bench_measures_time_and_the_kernels_memory(toy_book, tmp_path):
    _big_chapter(toy_book)
    out = tmp_path / "cost.json"
    bench.bench(["smoke"], ["toy", "big"], root=toy_book, out=out)
    cells = {c["chapter"]: c for c in json.loads(out.read_text())["cells"]}
    small, big = cells["toy"], cells["big"]
    for c in (small, big):
        assert c["status"] == "ok" and 0 < c["seconds"] <= c["wall_seconds"]
        assert c["budget"] == 20 and c["cpu"] and c["date"]
        # the kernel's CPU time is counted (a parent-only count would be about zero)
        assert 0.5 < c["cpu_seconds"] < 4 * c["wall_seconds"] + 5
    # 40e6 float64 = 305 MiB live in the kernel: a measure of the parent alone would miss it
    assert big["peak_rss_mb"] >= 305 and big["peak_rss_mb"] > small["peak_rss_mb"] + 250
    assert 20 < small["peak_rss_mb"] < 1000
    table = out.with_suffix(".md").read_text()
    assert "| big |" in table and "| toy |" in table and "MB" in table and bench.cpu_model() in table

    # a later partial bench adds to the table; a full run over its cap is a lower bound
    bench.bench(["full"], ["toy"], root=toy_book, out=out, cap=0.5)
    cells = json.loads(out.read_text())["cells"]
    assert {(c["chapter"], c["scale"]) for c in cells} == {("toy", "smoke"), ("big", "smoke"), ("toy", "full")}
    full = next(c for c in cells if c["scale"] == "full")
    assert full["status"] == "stopped" and full["seconds"] is None
    assert "more than 0 s (stopped)" in out.with_suffix(".md").read_text() or \
        "more than 1 s (stopped)" in out.with_suffix(".md").read_text()


def test_over_budget_cells_are_marked():
    cell = {"chapter": "c", "scale": "book", "seconds": 130.0, "over": True, "peak_rss_mb": 100,
            "status": "ok", "date": "d", "cpu": "x", "cores": 2, "load_before": 1.0}
    ok = dict(cell, scale="smoke", seconds=10.0, over=False)
    md = bench.cost_markdown({"cells": [cell, ok], "budgets": bench.BUDGETS})
    row = next(line for line in md.splitlines() if line.startswith("| c |"))
    assert row.count("**over**") == 1 and "130 s **over**" in row and "10 s |" in row
    assert bench.cost_markdown({"cells": []}).startswith("No chapter")


def test_under_load_a_cell_is_judged_by_its_cpu_time():
    slow = {"chapter": "c", "scale": "book", "seconds": 200.0, "cpu_seconds": 90.0, "peak_rss_mb": 1,
            "status": "ok", "date": "d", "cpu": "x", "cores": 2, "load_before": 5.0, "budget": 120.0}
    assert bench.contended(slow) and not bench.is_over(slow)
    assert bench.is_over(dict(slow, cpu_seconds=130.0))
    quiet = dict(slow, load_before=1.0)  # quiet: the wall time decides
    assert not bench.contended(quiet) and bench.is_over(quiet)
    row = next(line for line in bench.cost_markdown({"cells": [slow]}).splitlines() if line.startswith("| c |"))
    assert "200 s (CPU 90 s, load 5)" in row and "**over**" not in row


def test_bench_cli_refuses_bad_input(toy_book, capsys):
    assert main(["bench", "--scales", "huge"]) == 2
    assert "unknown scale" in capsys.readouterr().err
    assert main(["bench", "--chapters", "nope"]) == 2
