"""Golden records: metrics within declared tolerances, verdicts exact; a moved number fails."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minirepro import goldens
from minirepro.goldens import make_golden

ROOT = Path(__file__).resolve().parents[2]

REC = {"metrics": {"loss": 1.00, "count": 7, "name": "rq", "exact": 0.5},
       "tolerances": {"loss": {"rtol": 0.05, "atol": 0.0}},
       "claims": [{"id": "a", "verdict": "reproduced", "machine_dependent": False},
                  {"id": "speed", "verdict": "partly", "machine_dependent": True}]}


def _fresh(**metrics):
    rec = json.loads(json.dumps(REC))
    rec["metrics"].update(metrics)
    return rec


def test_within_tolerance_passes_and_beyond_fails():
    assert goldens.compare(REC, _fresh(loss=1.04)) == []
    problems = goldens.compare(REC, _fresh(loss=1.06))
    assert len(problems) == 1 and "'loss'" in problems[0] and "rtol 0.05" in problems[0]


def test_untoleranced_numbers_are_near_exact_and_ints_strings_exact():
    assert goldens.compare(REC, _fresh(exact=0.5 + 1e-9)) == []
    assert goldens.compare(REC, _fresh(exact=0.5001))
    assert goldens.compare(REC, _fresh(count=8))
    assert goldens.compare(REC, _fresh(name="qinco"))


def test_missing_new_metric_and_changed_tolerance_are_stale():
    fresh = _fresh()
    del fresh["metrics"]["count"]
    fresh["metrics"]["extra"] = 1
    fresh["tolerances"]["loss"] = {"rtol": 0.5, "atol": 0.0}
    text = "\n".join(goldens.compare(REC, fresh))
    assert "'count' is missing" in text and "'extra' is new" in text and "tolerance changed" in text


def test_verdicts_exact_except_machine_dependent():
    fresh = _fresh()
    fresh["claims"][1]["verdict"] = "reproduced"
    assert goldens.compare(REC, fresh) == []
    fresh["claims"][0]["verdict"] = "partly"
    assert "golden verdict 'reproduced', fresh 'partly'" in goldens.compare(REC, fresh)[0]


def _pytest_goldens(folder: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-q", "--nbval-lax", "--nbval-current-env", "-p",
           "no:cacheprovider", str(folder)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=folder, timeout=300)


@pytest.mark.slow
def test_a_golden_fails_when_a_headline_number_moves_beyond_its_tolerance(toy_book):
    """End to end: make a golden, check it passes, move the stored number, see it fail."""
    golden = make_golden("toy", toy_book)
    record_path = goldens.results_path(golden)
    record = json.loads(record_path.read_text())
    assert record["tolerances"] == {"stat": {"rtol": 0.0, "atol": 0.01}}
    assert record["claims"][0]["verdict"] in ("reproduced", "not reproduced")
    shutil.copy(ROOT / "tests" / "goldens" / "conftest.py", golden.parent / "conftest.py")
    ok = _pytest_goldens(golden.parent)
    assert ok.returncode == 0, ok.stdout[-2000:]
    assert "passed" in ok.stdout
    record["metrics"]["stat"] += 0.005  # inside the declared atol: still passes
    record_path.write_text(json.dumps(record))
    assert _pytest_goldens(golden.parent).returncode == 0
    record["metrics"]["stat"] += 0.02  # beyond it: fails, naming the metric
    record_path.write_text(json.dumps(record))
    bad = _pytest_goldens(golden.parent)
    assert bad.returncode == 1 and "metric 'stat'" in bad.stdout, bad.stdout[-2000:]


def test_compare_notebooks_reads_checked_cells_as_nbval_does():
    """A checked cell whose output differs is reported; sanitized timings and unchecked cells are not."""
    import nbformat

    from minirepro.goldens import compare_notebooks

    def nb(text_checked: str, text_free: str):
        book = nbformat.v4.new_notebook()
        a = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(x)")
        a.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text_checked)]
        b = nbformat.v4.new_code_cell("print(y)")
        b.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text_free)]
        book.cells = [nbformat.v4.new_code_cell("scale = 'smoke'"), a, b]
        return book

    rules = [(r"\d+(\.\d+)?\s?s\b", "TIME")]
    assert compare_notebooks(nb("ok in 1.2 s\n", "a"), nb("ok in 3.4 s\n", "b"), rules) == []
    diff = compare_notebooks(nb("verdict: reproduced\n", "a"), nb("verdict: partly\n", "a"), rules)
    assert len(diff) == 1 and "partly" in diff[0]
    missing = nbformat.v4.new_notebook()
    assert "not found" in compare_notebooks(nb("x", "y"), missing, rules)[0]
