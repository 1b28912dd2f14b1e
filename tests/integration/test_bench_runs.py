"""``minirepro bench`` (integration: each test times real notebook runs in a child process): time, CPU and peak memory (the kernel's included) per chapter and scale."""

from __future__ import annotations

import json

import pytest

from minirepro import bench
from minirepro.cli import main


def _big_chapter(root) -> None:
    """A toy variant whose kernel holds a 320 MB array: the peak must include the kernel.

    The array is written (``np.ones``: every page resident) and held beside the toy's own
    five draws; it is not the draws themselves, since settling the toy's claims over 40e6
    values took minutes of the test's time and measured nothing more.
    """
    src = (root / "notebooks" / "01-toy" / "toy.md").read_text()
    assert "rng = set_seed(seed)" in src
    (root / "notebooks" / "02-big").mkdir()
    (root / "notebooks" / "02-big" / "big.md").write_text(
        src.replace("rng = set_seed(seed)", "rng = set_seed(seed)\nheld = np.ones(40_000_000)"))


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
        # nothing outlives the toy's kernel: the adopted descendants' CPU is not the kernel's
        # (papermill and the kernel are reaped inside the run; measured 0.0 s at load 3 on 2 cores)
        assert 0 <= c["adopted_cpu_seconds"] < 0.5
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
    assert "> 0 s (stopped)" in out.with_suffix(".md").read_text() or \
        "> 1 s (stopped)" in out.with_suffix(".md").read_text()


_ORPHAN = (
    "import subprocess, sys\n"
    "subprocess.Popen([sys.executable, '-c', 'import os, time\\n'\n"
    "                  'if os.fork() == 0:\\n'\n"
    "                  '    os.setsid()\\n'\n"
    "                  '    t = time.process_time()\\n'\n"
    "                  '    while time.process_time() - t < 3.0: pass\\n'\n"
    "                  'os._exit(0)'])\n"
    "rng = set_seed(seed)"
)


def test_cpu_time_of_workers_that_outlive_the_kernel_is_counted(toy_book):
    """A worker orphaned by the kernel (as joblib's pool is) still counts: the child adopts it.

    The toy's grandchild leaves the kernel's session (so the kernel's shutdown, which
    signals its process group, does not stop it), loses its parent at once, and burns
    3 s of CPU while the run ends without it.
    """
    src = (toy_book / "notebooks" / "01-toy" / "toy.md").read_text()
    (toy_book / "notebooks" / "02-orphan").mkdir()
    (toy_book / "notebooks" / "02-orphan" / "orphan.md").write_text(
        src.replace("rng = set_seed(seed)", _ORPHAN))
    cell = bench.measure("orphan", "smoke", root=toy_book)
    assert cell["status"] == "ok"
    # the grandchild burns 3 s of CPU after its parent has exited; re-parented to init, it
    # would be missing here (and the run itself ends long before it does)
    assert cell["subreaper"] and cell["descendants_reaped"] >= 1 and cell["descendants_stopped"] == 0
    # The adopted descendants' CPU on its own, not the difference of two whole runs (the
    # kernel's CPU moves by a second between runs under load). The grandchild stops once its
    # own process_time has advanced 3.0 s, and RUSAGE_CHILDREN adds up that same per-process
    # count when it is reaped (user + system = its scheduled run time), so load stretches its
    # wall time but not this: >= 3.0 s minus microseconds of rounding, whatever the load.
    # Re-parented to init it would add 0 (and its short-lived parent about 0.05 s); the 0.5 s
    # margin is for the accounting's rounding only, never needed on Linux.
    assert 2.5 <= cell["adopted_cpu_seconds"] <= cell["cpu_seconds"]


def test_a_descendant_still_running_after_the_grace_period_is_stopped(toy_book, monkeypatch):
    src = (toy_book / "notebooks" / "01-toy" / "toy.md").read_text()
    (toy_book / "notebooks" / "02-orphan").mkdir()
    (toy_book / "notebooks" / "02-orphan" / "orphan.md").write_text(
        src.replace("rng = set_seed(seed)", _ORPHAN.replace("3.0", "600.0")))
    monkeypatch.setattr(bench, "REAP_SECONDS", 1.0)
    cell = bench.measure("orphan", "smoke", root=toy_book)
    assert cell["status"] == "ok" and cell["descendants_stopped"] == 1
    # a hang guard, not a speed bound: left running, the grandchild would hold the child for
    # its 600 s of CPU; stopped, the run takes its own time plus REAP_SECONDS (13 s at load 3
    # on 2 cores; the toy's runs took 10-13 s there), so 300 s is far above what load can add
    assert cell["wall_seconds"] < 300


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


def _seeded_chapter(root) -> None:
    """A toy variant that works ``4 s`` per seed after the first: its time is a line in ``n_seeds``
    with slope 4 s (the first seed sleeps not at all: the slope, not the intercept, is measured).
    Each seed also holds 64 MB (8e6 float64, every page written): its peak memory is a line in
    ``n_seeds`` too, one that the machine's load does not move."""
    src = (root / "notebooks" / "01-toy" / "toy.md").read_text()
    src = src.replace("n = 5  #", "n_seeds = 3  # seeds, one after another\nn = 5  #")
    src = src.replace("rng = set_seed(seed)", "import time\ntime.sleep(4.0 * (n_seeds - 1))\n"
                      "held = np.ones(8_000_000 * n_seeds)\nrng = set_seed(seed)")
    (root / "notebooks" / "03-seeded").mkdir()
    (root / "notebooks" / "03-seeded" / "seeded.md").write_text(src)


def test_line_through_two_fractions():
    assert bench.line_through(1, 10.0, 2, 13.0, 10) == 37.0  # a = 7, b = 3: 7 + 30
    assert bench.line_through(2, 10.0, 3, 9.0, 10) == 10.0  # noise: slope read as 0, never below a point
    with pytest.raises(ValueError, match="different seed counts"):
        bench.line_through(2, 1.0, 2, 1.0, 5)


def test_full_is_estimated_from_two_measured_fractions(toy_book, tmp_path):
    _seeded_chapter(toy_book)
    assert bench.seed_points("toy", toy_book) is None  # no n_seeds parameter: timed in full
    cell = bench.estimate_full("seeded", 1, 6, root=toy_book)
    assert cell["status"] == "estimated" and cell["seconds"] is None
    (p1, p2) = cell["points"]
    assert p1["params"] == {"n_seeds": 1} and p2["params"] == {"n_seeds": 2}
    # Each fraction ran with its own n_seeds: the second holds one seed's 61 MiB more (peak RSS,
    # which load does not move; the slope of the two runs' times does: 2.3, 2.9, 3.0, 8.5 and
    # 8.8 s for the seed's 4 s in 5 runs beside a CPU hog at load 8-10 on 2 cores, the rest of
    # two whole runs differing by seconds) and its time includes the seed's 4 s sleep (a lower
    # bound that load can only raise).
    assert 45 < p2["peak_rss_mb"] - p1["peak_rss_mb"] < 80
    assert p2["seconds"] >= 4.0 and p1["seconds"] > 0
    slope = p2["seconds"] - p1["seconds"]  # the estimate is the line through the two measured times
    assert cell["estimate_seconds"] == pytest.approx(max(p1["seconds"], p2["seconds"]) + 4 * max(0.0, slope),
                                                     abs=1.0)
    assert cell["peak_rss_mb"] == max(p1["peak_rss_mb"], p2["peak_rss_mb"])
    quiet = dict(cell, date="d", cpu="x", cores=2,  # as if measured on a quiet machine
                 points=[dict(p, load_before=0.5) for p in cell["points"]])
    md = bench.cost_markdown({"cells": [quiet], "budgets": bench.BUDGETS})
    row = next(line for line in md.splitlines() if line.startswith("| seeded |"))
    assert f"≈ {cell['estimate_seconds']:.0f} s est." in row
    assert "**est.**" in md and "at 1 and" in md and "of 6 seeds" in md

    busy = dict(cell, date="d", cpu="x", cores=2, estimate_cpu_seconds=150.0,
                points=[dict(p1, load_before=3.2), dict(p2, load_before=0.5)])  # one run under load
    row = next(line for line in bench.cost_markdown({"cells": [busy]}).splitlines()
               if line.startswith("| seeded |"))
    assert "est. (CPU 2 min, load 3)" in row

    # a fraction that fails leaves no estimate, and says so
    bad = bench.estimate_full("seeded", 1, 6, root=toy_book, cap=0.5)
    assert bad["status"] == "stopped" and "estimate_seconds" not in bad and len(bad["points"]) == 1
    row = next(line for line in bench.cost_markdown({"cells": [dict(bad, date="d", cpu="x", cores=2)]})
               .splitlines() if line.startswith("| seeded |"))
    assert "> 0 s at 1 of 6 seeds" in row or "> 1 s at 1 of 6 seeds" in row


def test_a_second_run_stopped_at_the_cap_still_gives_a_bound():
    cell = {"chapter": "s", "scale": "full", "status": "stopped", "n_seeds_full": 10, "at_least_seconds": 900,
            "points": [{"params": {"n_seeds": 1}, "status": "ok", "seconds": 600.0},
                       {"params": {"n_seeds": 2}, "status": "stopped", "at_least_seconds": 900.0}]}
    bench.stopped_bound(cell, 1)
    assert cell["at_least_seconds"] == 900 + 8 * 300  # slope more than 300 s a seed
    md = bench.cost_markdown({"cells": [dict(cell, date="d", cpu="x", cores=2, load_before=1.0)]})
    assert "> 55 min (bound)" in md and "**(bound)**" in md


def test_estimate_needs_the_full_scale(toy_book, capsys):
    assert main(["bench", "--scales", "smoke", "--estimate"]) == 2
    assert "add full to --scales" in capsys.readouterr().err
