"""Course labs (minirepro.labs): student editions built and graded by otter-grader.

The course pack is built once per session by the CLI (``minirepro lab --all``), timed,
and searched: no student edition holds a line of any solution (the chapter's or the
lab's) or of a hidden test. Three chapters are graded end to end with ``otter run``:
the instructor's notebook passes, a wrong submission fails with the question's hint.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml

from minirepro import lab_checks, labs
from minirepro.chapters import repo_root

ROOT = repo_root()
CLI = [sys.executable, "-m", "minirepro.cli"]
REGISTERED = labs.registered_chapters(ROOT)
GRADED = ["spreadsheetarena", "debate2create", "conservationbench"]  # end to end (no torch)


def _cli(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TQDM_DISABLE": "1", **(env or {})})


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> tuple[Path, float]:
    """The course pack, built by ``minirepro lab --all`` (and how long that took)."""
    out = tmp_path_factory.mktemp("labs")
    start = time.perf_counter()
    proc = _cli("lab", "--all", "--out", str(out))
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    return out, seconds


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def _text(folder: Path) -> str:
    """Every string in a folder, decoded: notebooks' cells and metadata (JSON strings
    unescaped), the members of zips, and plain files."""
    parts = []
    for p in sorted(folder.rglob("*")):
        if p.suffix == ".ipynb":
            parts += _strings(json.loads(p.read_text(encoding="utf-8")))
        elif p.suffix == ".zip":
            with zipfile.ZipFile(p) as zf:
                parts += [zf.read(n).decode("utf-8", "replace") for n in zf.namelist()]
        elif p.is_file():
            parts.append(p.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


def _lines(text: str, min_len: int) -> set[str]:
    return {ln.strip() for ln in text.splitlines() if len(ln.strip()) >= min_len}


# ------------------------------------------------------------------ specs
def test_every_registered_chapter_has_a_lab_spec():
    assert len(REGISTERED) >= 17
    missing = [n for n in REGISTERED if not (ROOT / "labs" / f"{n}.yml").is_file()]
    assert not missing, f"chapters in _toc.yml without labs/<chapter>.yml: {missing}"
    for name in REGISTERED:
        spec = labs.load_spec(name, ROOT)
        assert spec.questions, name
        assert all(q.hidden for q in spec.questions), name


def test_specs_ask_for_runs_where_the_chapter_does():
    """Every chapter has a graded question that checks a recorded run's results.json."""
    for name in REGISTERED:
        spec = labs.load_spec(name, ROOT)
        assert any("check_run" in t["test"] for q in spec.questions for t in q.hidden), name


def test_exercise_parser_finds_every_exercise_and_solution():
    for name in REGISTERED:
        chapter = labs.get(name, ROOT)
        exercises = labs.chapter_exercises(chapter)
        text = chapter.path.read_text(encoding="utf-8")
        assert len(exercises) == text.count("{exercise}") >= 2, name
        assert all(ex.label and ex.prompt and ex.solution for ex in exercises), name


def test_bad_specs_are_refused(tmp_path):
    root = tmp_path / "book"
    shutil.copytree(ROOT / "notebooks" / "07-caffnet", root / "notebooks" / "07-caffnet")
    (root / "_toc.yml").write_text("root: x\nchapters:\n  - file: notebooks/07-caffnet/caffnet\n")
    (root / "labs").mkdir()
    with pytest.raises(labs.LabError, match="no lab spec"):
        labs.load_spec("caffnet", root)
    good = yaml.safe_load((ROOT / "labs" / "caffnet.yml").read_text())
    bad_cases = {
        "unknown keys": {**good, "solutions": 1},
        "exercise must be one of": {**good, "questions": [{**good["questions"][0], "exercise": "nope"}]},
        "at least one hidden test": {**good, "questions": [{**good["questions"][0], "hidden": []}]},
        "needs `scaffold`": {**good, "questions": [{**good["questions"][0], "scaffold": ""}]},
        "chapter must be": {**good, "chapter": "ssa"},
        "has no parameter 'opt_inq'": {**good, "questions": [
            {**good["questions"][1], "run": {"params": {"opt_inq": 8}}}]},
    }
    for message, raw in bad_cases.items():
        (root / "labs" / "caffnet.yml").write_text(yaml.safe_dump(raw))
        with pytest.raises(labs.LabError, match=message):
            labs.load_spec("caffnet", root)


# ------------------------------------------------------------------ the course pack
def test_lab_all_builds_every_chapter_within_a_minute(pack):
    out, seconds = pack
    assert seconds < 60, f"lab --all took {seconds:.1f} s"
    for name in REGISTERED:
        assert (out / "student" / name / f"{name}.ipynb").is_file(), name
        assert (out / "autograder" / name / "autograder.zip").is_file(), name
    assert not list(out.glob(".lab-*")), "a staging folder was left behind"


def test_student_editions_hold_no_solution_text(pack):
    out, _ = pack
    for name in REGISTERED:
        spec = labs.load_spec(name, ROOT)
        student = _text(out / "student" / name)
        given = _lines(spec.setup, 1) | set().union(*(_lines(q.scaffold, 1) for q in spec.questions))
        exercises = labs.chapter_exercises(spec.chapter)
        prompts = set().union(*(_lines(ex.prompt, 1) for ex in exercises))
        # the chapter's own solutions: prose and code, every distinctive line
        distinctive = set().union(*(_lines(ex.solution, 25) for ex in exercises)) - prompts - given
        assert distinctive, name  # the search has something to find
        leaked = sorted(ln for ln in distinctive if ln in student)
        assert not leaked, f"{name}: solution lines in the student edition: {leaked[:3]}"
        # the lab's reference solutions and hidden tests
        for q in spec.questions:
            for ln in _lines(q.solution, 12) - given:
                assert ln not in student, f"{name}/{q.name}: solution line {ln!r} in the student edition"
            public = set().union(set(), *(_lines(t["test"], 1) for t in q.public))
            for t in q.hidden:
                for ln in _lines(t["test"], 12) - public - given:
                    assert ln not in student, f"{name}/{q.name}: hidden test line {ln!r} leaked"
                assert t["hint"] not in student or any(t["hint"] == p["hint"] for p in q.public)
        # positive control: the autograder does hold them (so the search above can fail)
        autograder = _text(out / "autograder" / name)
        assert any(ln in autograder for q in spec.questions for ln in _lines(q.solution, 12))


def test_student_edition_has_scaffolds_parameters_and_public_tests_only(pack):
    out, _ = pack
    for name in REGISTERED:
        spec = labs.load_spec(name, ROOT)
        nb = nbformat.read(out / "student" / name / f"{name}.ipynb", as_version=4)
        params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(params) == 1 and f"scale = {spec.scale!r}" in params[0].source, name
        source = "\n".join(c.source for c in nb.cells)
        assert source.count("# TODO") >= len(spec.questions), name
        tests = nb.metadata["otter"]["tests"]
        assert set(tests) == {q.name for q in spec.questions if q.public}, name
        for q in spec.questions:
            assert "hidden=True" not in tests.get(q.name, ""), (name, q.name)


# ------------------------------------------------------------------ grading
def _fake_run(folder: Path, chapter: str, spec_path: Path, question: str, **override) -> None:
    """A recorded run's results.json, as `minirepro run` writes it (the chapter's ledger
    entry with the parameters the exercise asks for)."""
    raw = yaml.safe_load(spec_path.read_text())
    run = next(q["run"] for q in raw["questions"] if q["name"] == question)
    slug = labs.get(chapter, ROOT).slug
    ledger = json.loads((ROOT / "book" / "claims" / f"{slug}.json").read_text())
    params = {**ledger["params"], **run.get("params", {}), "scale": run.get("scale", "book"), **override}
    d = folder / "runs" / chapter / "2026-12-03-120000"
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps({
        "chapter": chapter, "params": params, "metrics": ledger["metrics"], "claims": ledger["claims"]}))


WRONG = {  # a wrong answer per graded chapter, and a hint its report must show
    "spreadsheetarena": ("elo_gap = ...", "elo_gap = 200.0",
                         "Odds of 10 to 1 fix the gap of the two strengths"),
    "debate2create": ("agent_calls = ...", "agent_calls = 5 * 2",
                      "Count every call of one round - per thesis and once per round"),
    "conservationbench": ("answer_ex2 = ...", "answer_ex2 = 0.8 * 0.2",
                          "The two answers of a pair are independent"),
}


@pytest.mark.parametrize("chapter", GRADED)
def test_grading_passes_the_solution_and_fails_a_wrong_answer(pack, chapter, tmp_path):
    out, _ = pack
    spec = labs.load_spec(chapter, ROOT)
    run_q = next(q.name for q in spec.questions if any("check_run" in t["test"] for t in q.hidden))
    klass = tmp_path / "class"
    good, wrong = klass / "ada", klass / "bob"
    good.mkdir(parents=True)
    wrong.mkdir()
    shutil.copy(out / "autograder" / chapter / f"{chapter}.ipynb", good)  # the instructor's answers
    _fake_run(good, chapter, spec.path, run_q)
    nb_path = out / "student" / chapter / f"{chapter}.ipynb"
    nb = nbformat.read(nb_path, as_version=4)
    old, new, hint = WRONG[chapter]
    for cell in nb.cells:  # bob answers one question wrongly and records a run at the wrong scale
        cell.source = cell.source.replace(old, new).replace(
            "run_folder = ...", "run_folder = lab_checks.latest_run(" + repr(chapter) + ")")
    nbformat.write(nb, wrong / nb_path.name)
    _fake_run(wrong, chapter, spec.path, run_q, scale="full")

    proc = _cli("lab", "grade", chapter, str(klass), "--out", str(tmp_path / "grades"),
                "--autograder", str(out / "autograder" / chapter / "autograder.zip"))
    assert proc.returncode == 0, proc.stderr
    report = proc.stdout
    rows = {r["student"]: r for r in csv.DictReader(open(tmp_path / "grades" / "grades.csv"))}
    assert float(rows["ada"]["score"]) == float(rows["ada"]["possible"]) > 0, report
    assert float(rows["bob"]["score"]) < float(rows["bob"]["possible"]), report
    bob = report.split("bob:")[1]  # students in name order: ada, then bob
    assert hint in bob and "FAILED" in bob, report
    assert "the recorded run does not match the exercise" in bob, report
    assert (tmp_path / "grades" / "report.md").read_text() == report
    # no message reveals a solution or a hidden test
    for q in spec.questions:
        for ln in _lines(q.solution, 12) | set().union(*(_lines(t["test"], 12) for t in q.hidden)):
            assert ln not in report, ln


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("args, expect", [
    (["lab", "nosuch"], "unknown chapter 'nosuch'; chapters: "),
    (["lab"], "give one chapter or --all"),
    (["lab", "caffnet", "--all"], "give one chapter or --all"),
    (["lab", "grade", "nosuch", "x.ipynb"], "unknown chapter 'nosuch'; chapters: "),
    (["lab", "grade", "caffnet", "missing.ipynb"], "no such submission: missing.ipynb"),
    (["lab", "grade", "caffnet"], "usage: minirepro lab grade CHAPTER SUBMISSION"),
    (["lab", "grade", "caffnet", "."], "no such autograder zip"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys, args, expect):
    from minirepro.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINIREPRO_ROOT", str(ROOT))
    extra = ["--autograder", str(tmp_path / "none.zip")] if args[-1] == "." else []
    out = tmp_path / "out"
    assert main([*args, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert expect in err and err.count("\n") == 1, err
    assert not out.exists() and not (ROOT / "_build" / "labs" / "grades" / "nosuch").exists()


def test_a_registered_chapter_without_a_spec_stops_lab_all(tmp_path):
    root = tmp_path / "book"
    shutil.copytree(ROOT / "notebooks" / "07-caffnet", root / "notebooks" / "07-caffnet")
    shutil.copytree(ROOT / "notebooks" / "09-ssa", root / "notebooks" / "09-ssa")
    (root / "_toc.yml").write_text("chapters:\n  - file: notebooks/07-caffnet/caffnet\n"
                                   "  - file: notebooks/09-ssa/ssa\n")
    (root / "labs").mkdir()
    shutil.copy(ROOT / "labs" / "caffnet.yml", root / "labs")
    proc = _cli("lab", "--all", cwd=root, env={"MINIREPRO_ROOT": str(root)})
    assert proc.returncode == 2 and "chapter 'ssa' has no lab spec labs/ssa.yml" in proc.stderr
    assert not (root / "_build").exists()


# ------------------------------------------------------------------ the checks the tests call
def test_check_run_reads_the_recorded_run(tmp_path):
    d = tmp_path / "runs" / "caffnet" / "r1"
    d.mkdir(parents=True)
    res = {"chapter": "caffnet", "params": {"scale": "smoke", "opt_ineq": 8},
           "metrics": {"m": 0.5}, "claims": [{"id": "c", "verdict": "reproduced"}]}
    (d / "results.json").write_text(json.dumps(res))
    lab_checks.check_run(str(d), "caffnet", {"opt_ineq": 8}, "smoke", ["m"])
    assert lab_checks.latest_run("caffnet", tmp_path / "runs") == str(d)
    for params, scale, metrics in (({"opt_ineq": 6}, "smoke", ["m"]), ({"opt_ineq": 8}, "book", ["m"]),
                                   ({"opt_ineq": 8}, "smoke", ["absent"]), ({"other": 1}, None, [])):
        with pytest.raises(AssertionError):
            lab_checks.check_run(str(d), "caffnet", params, scale, metrics)
    assert lab_checks.run_results(str(d), "ssa") is None  # a run of another chapter
    assert lab_checks.run_results(None, "caffnet") is None
    failed = d.with_name("r2-FAILED")
    shutil.copytree(d, failed)
    assert lab_checks.run_results(str(failed), "caffnet") is None
    res["claims"] = [{"id": "c", "verdict": None}]
    (d / "results.json").write_text(json.dumps(res))
    with pytest.raises(AssertionError):
        lab_checks.check_run(str(d), "caffnet", {}, None, [])


def test_value_checks():
    import numpy as np

    assert lab_checks.is_int(3) and lab_checks.is_int(np.int64(3))
    assert not lab_checks.is_int(True) and not lab_checks.is_int(3.0) and not lab_checks.is_int(...)
    assert lab_checks.is_number(np.float32(0.5)) and not lab_checks.is_number(float("nan"))
    assert not lab_checks.is_number(...) and not lab_checks.is_number("1")
    assert lab_checks.close([1, 2.0], (1, 2.0 + 1e-12)) and not lab_checks.close(1, 1.1)
    assert lab_checks.close(True, True) and not lab_checks.close(0, False)


def test_the_guides_sample_report_is_current():
    """book/lab-report.txt (made by `python -m minirepro.labs`) shows a pass and a fail,
    with hints that are the current spec's."""
    text = (ROOT / labs.SAMPLE_REPORT).read_text()
    spec = labs.load_spec(labs.SAMPLE_CHAPTER, ROOT)
    hints = {t["hint"] for q in spec.questions for t in q.public + q.hidden}
    shown = [ln.split("hint: ", 1)[1] for ln in text.splitlines() if "hint: " in ln]
    assert shown and set(shown) <= hints
    assert "passed" in text and "FAILED" in text
    for q in spec.questions:
        assert q.name in text
        for ln in _lines(q.solution, 12):
            assert ln not in text
