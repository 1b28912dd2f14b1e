"""minirepro.run: run folders, failed runs, sweeps, goldens (on a toy book)."""

from __future__ import annotations

import json

import nbformat
import pytest

from minirepro.chapters import ChapterError, get
from minirepro.goldens import make_golden
from minirepro.run import RunFailed, expand_grid, run_chapter, sweep


def test_run_writes_a_finished_folder(toy_book):
    run = run_chapter(get("toy"), {"n": "4", "seed": 1}, scale="smoke")
    assert run.folder.parent == toy_book / "runs" / "toy"
    res = json.loads((run.folder / "results.json").read_text())
    assert set(res) >= {"chapter", "params", "metrics", "claims", "seconds", "cpu_seconds", "load"}
    # the kernel's CPU time is counted (papermill and the kernel are waited-for children)
    assert 0 < res["cpu_seconds"] < 10 * res["seconds"] + 5 and res["load"] >= 0
    assert res["params"]["n"] == 4 and res["params"]["scale"] == "smoke"
    assert res["claims"][0]["id"] == "positive"
    assert res["claims"][0]["verdict"] in {"reproduced", "not reproduced"}
    assert json.loads((run.folder / "params.json").read_text())["seed"] == 1
    nb = nbformat.read(run.folder / "toy.ipynb", as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and "n = 4" in injected[0].source
    # same parameters, same numbers
    again = run_chapter(get("toy"), {"n": 4, "seed": 1}, scale="smoke")
    assert again.results["metrics"] == res["metrics"]


def test_bad_input_writes_nothing(toy_book):
    for kwargs in ({"params": {"nope": 1}}, {"params": {"n": "x"}}, {"scale": "huge"}):
        with pytest.raises(ChapterError):
            run_chapter(get("toy"), **kwargs)
    with pytest.raises(ChapterError, match="unknown chapter"):
        run_chapter(get("nope"))
    assert not (toy_book / "runs").exists() or not any((toy_book / "runs").rglob("*.ipynb"))


def test_a_failed_run_says_so_and_keeps_its_partial_notebook(toy_book):
    with pytest.raises(RunFailed, match="failing on purpose") as info:
        run_chapter(get("toy"), {"fail": True}, scale="smoke")
    folder = info.value.folder
    assert folder.name.endswith("-FAILED")
    assert (folder / "toy-FAILED.ipynb").exists() and (folder / "error.txt").exists()
    assert not (folder / "results.json").exists()
    assert not list((toy_book / "runs" / "toy").glob(".incomplete-*"))


def test_cell_timeout_depends_on_the_scale_and_is_reported_plainly(toy_book, monkeypatch):
    """A smoke or book cell over the limit is a hang; a full-scale cell has no limit (ALI's
    full preset trains its models in one cell for more than 10 minutes)."""
    from minirepro.run import notebook as runner

    assert runner.cell_timeout("smoke") == runner.cell_timeout("book") == runner.CELL_TIMEOUT
    assert runner.cell_timeout("full") is None
    src = (toy_book / "notebooks" / "01-toy" / "toy.md").read_text()
    (toy_book / "notebooks" / "01-toy" / "toy.md").write_text(
        src.replace("rng = set_seed(seed)", "import time\ntime.sleep(0.3 * n)\nrng = set_seed(seed)"))
    monkeypatch.setattr(runner, "CELL_TIMEOUTS", {"smoke": 2, "book": 2, "full": None})
    with pytest.raises(RunFailed, match=r"a cell ran longer than 2 s, the per-cell limit") as info:
        run_chapter(get("toy"), {"n": 20}, scale="smoke")  # 6 s in one cell
    assert "-----" not in str(info.value)
    assert run_chapter(get("toy"), {"n": 20}, scale="full").results["seconds"] > 5  # no limit at full


def test_failure_line_is_the_exception_not_a_separator():
    from minirepro.run import failure_line

    log = "Traceback (most recent call last):\n  File x\nValueError: bad n\n-------------------\n"
    assert failure_line(log, 600) == "ValueError: bad n"
    assert failure_line("something odd\n", 600) == "something odd"
    assert failure_line("", 600) == ""


def test_sweep_keeps_finished_runs_when_one_fails(toy_book):
    folder = sweep(get("toy"), {"fail": ["false", "true"], "seed": [0, 1]}, jobs=2, scale="smoke")
    summary = json.loads((folder / "summary.json").read_text())
    assert len(summary) == 4
    assert sorted(r["ok"] for r in summary) == [False, False, True, True]
    assert (folder / "summary.csv").exists() and (folder / "summary.md").exists()
    assert (folder / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ChapterError):
        sweep(get("toy"), {"seed": ["a"]})


def test_expand_grid():
    assert expand_grid({"a": [1, 2], "b": ["x"]}) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
    with pytest.raises(ChapterError):
        expand_grid({"a": []})


def test_make_golden_stores_smoke_outputs_without_timings(toy_book):
    path = make_golden("toy")
    nb = nbformat.read(path, as_version=4)
    assert "papermill" not in nb.metadata
    checked = [c for c in nb.cells if c.cell_type == "code" and "NBVAL_CHECK_OUTPUT" in c.source]
    assert "positive:" in checked[0].outputs[0]["text"]
    assert all("execution" not in c.metadata for c in nb.cells)
