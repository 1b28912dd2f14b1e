"""Course labs end to end (the integration stage): the course pack built by the CLI
(``minirepro lab --all``) once for the module, searched and graded by the real otter-grader.

No student edition holds a line of any solution (the chapter's or the lab's) or of a hidden
test. Three chapters are graded end to end with ``otter run``: the instructor's notebook
passes, a wrong submission fails with the question's hint. A class folder of seven
submissions (six graded) is built and graded once (the module fixture ``graded_class``) and
read by three tests. The specs, the checks the tests call and bad input are unit tests
(tests/unit/test_labs.py).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml

from minirepro import labs
from minirepro.chapters import get, repo_root

pytestmark = pytest.mark.integration

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


# ------------------------------------------------------------------ the course pack
def test_lab_all_builds_every_chapter_within_a_minute(pack):
    out, seconds = pack
    # wall time: 19-25 s in 3 runs beside a CPU hog at load 9.3-9.6 on 2 cores, for 2.9-3.2 s of
    # CPU (the child's, from RUSAGE_CHILDREN): 60 s holds there; the load-free measure would be
    # that CPU time, which the `pack` fixture would have to record
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
    ch = get(chapter, ROOT)
    ledger = json.loads((ROOT / "book" / "claims" / f"{ch.slug}.json").read_text())
    defaults = {k: p.default for k, p in ch.parameters.items()}  # as `minirepro run` records them
    params = {**defaults, **run.get("params", {}), "scale": run.get("scale", raw.get("scale", "smoke")),
              **override}
    d = folder / "runs" / chapter / "2026-12-03-120000"
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps({
        "chapter": chapter, "params": params, "metrics": ledger["metrics"], "claims": ledger["claims"]}))


WRONG = {  # a wrong answer per graded chapter, and a hint its report must show
    "spreadsheetarena": ("elo_gap = ...", "elo_gap = 200.0",
                         "elo_gap disagrees with the Bradley-Terry fit"),
    "debate2create": ("agent_calls = ...", "agent_calls = 5 * 2",
                      "Count every call of one round - per thesis and once per round"),
    "conservationbench": ("answer_ex2 = ...", "answer_ex2 = 0.8 * 0.2",
                          "strict paired accuracy"),
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


# ------------------------------------------------------------------ issue 47: a class graded right
CLASS_CHAPTER = "caffnet"  # the example: 495 instead of 793 earned half the points


def _student_nb(out: Path, chapter: str, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The student edition with ``answers`` (``"name = ..."`` -> ``"name = value"``) filled in."""
    nb = nbformat.read(out / "student" / chapter / f"{chapter}.ipynb", as_version=4)
    for cell in nb.cells:
        for old, new in answers.items():
            cell.source = cell.source.replace(old, new)
    return nb


def _execute(nb: nbformat.NotebookNode, folder: Path, name: str) -> nbformat.NotebookNode:
    """Run a notebook top to bottom in ``folder`` as a student would (saved as ``name`` first:
    otter's grader reads its tests from the saved notebook)."""
    from nbclient import NotebookClient

    from minirepro.kernels import AsyncIPCKernelManager

    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}},
                   kernel_manager_class=AsyncIPCKernelManager).execute()
    return nb


def _outputs_of(nb: nbformat.NotebookNode, needle: str) -> str:
    cell = next(c for c in nb.cells if c.cell_type == "code" and needle in c.source)
    return "\n".join(str(o.get("text", "")) + json.dumps(o.get("data", {})) for o in cell.outputs)


@pytest.fixture(scope="module")
def graded_class(pack, tmp_path_factory):
    """A class folder for the caffnet lab, graded by the real otter with ``minirepro lab grade``:

    - ada/: the instructor's answers and her run (a folder: notebook + runs/);
    - bob.ipynb: a wrong answer (495 for 793) and a run folder outside his submission;
    - carol/lab3/: nested one level deeper; right answer, a run with an extra ``-p opt_steps 1``;
    - dave/: the student edition untouched (empty answers);
    - erin.ipynb beside dave/ (the issue's case): right answer, a run folder that is not there;
    - frank/: an empty folder; hana.zip: the zip the student edition's last cell wrote;
    - notes.txt and .DS_Store: not submissions.
    """
    out, _ = pack
    chapter = CLASS_CHAPTER
    spec = labs.load_spec(chapter, ROOT)
    run_q = next(q.name for q in spec.questions if any("check_run" in t["test"] for t in q.hidden))
    tmp = tmp_path_factory.mktemp("class")
    klass = tmp / "class"
    (klass / "ada").mkdir(parents=True)
    shutil.copy(out / "autograder" / chapter / f"{chapter}.ipynb", klass / "ada")
    _fake_run(klass / "ada", chapter, spec.path, run_q)
    _fake_run(tmp / "elsewhere", chapter, spec.path, run_q)  # a good run, outside bob's submission
    elsewhere = next((tmp / "elsewhere" / "runs" / chapter).iterdir())
    nbformat.write(_student_nb(out, chapter, {"n_subsets_12 = ...": "n_subsets_12 = 495",
                                              "run_folder = ...": f"run_folder = {str(elsewhere)!r}"}),
                   klass / "bob.ipynb")
    carol = klass / "carol" / "lab3"
    carol.mkdir(parents=True)
    nbformat.write(_student_nb(out, chapter, {"n_subsets_12 = ...": "n_subsets_12 = 793",
                                              "run_folder = ...": "run_folder = lab_checks.latest_run('caffnet')"}),
                   carol / f"{chapter}.ipynb")
    _fake_run(carol, chapter, spec.path, run_q, opt_steps=1)
    (klass / "dave").mkdir()
    shutil.copy(out / "student" / chapter / f"{chapter}.ipynb", klass / "dave")
    nbformat.write(_student_nb(out, chapter, {"n_subsets_12 = ...": "n_subsets_12 = 793",
                                              "run_folder = ...": "run_folder = 'runs/caffnet/my-run'"}),
                   klass / "erin.ipynb")
    (klass / "frank").mkdir()
    (klass / "notes.txt").write_text("grade by Friday\n")
    (klass / ".DS_Store").write_bytes(b"\0")
    # hana works through the student edition top to bottom; its last cell writes her zip
    hana = tmp / "hana"
    _fake_run(hana, chapter, spec.path, run_q)
    executed = _execute(_student_nb(out, chapter, {"n_subsets_12 = ...": "n_subsets_12 = 793",
                                                   "run_folder = ...": "run_folder = lab_checks.latest_run('caffnet')"}),
                        hana, f"{chapter}.ipynb")
    (zipped,) = hana.glob(f"{chapter}_*.zip")
    shutil.copy(zipped, klass / "hana.zip")
    wrong = _execute(_student_nb(out, chapter, {"n_subsets_12 = ...": "n_subsets_12 = 495"}),
                     tmp / "bob-working", f"{chapter}.ipynb")
    t0 = time.perf_counter()
    proc = _cli("lab", "grade", chapter, str(klass), "--out", str(tmp / "grades"), "-j", "2",
                "--autograder", str(out / "autograder" / chapter / "autograder.zip"))
    seconds = time.perf_counter() - t0
    rows = {r["student"]: r for r in csv.DictReader(open(tmp / "grades" / "grades.csv"))}
    return {"proc": proc, "rows": rows, "seconds": seconds, "hana": executed, "bob": wrong,
            "zip": zipped, "report": (tmp / "grades" / "report.md").read_text()}


def test_every_student_of_a_class_folder_is_graded_with_the_right_points(graded_class):
    rows, report = graded_class["rows"], graded_class["report"]
    print(f"graded 7 submissions in {graded_class['seconds']:.1f} s")
    assert graded_class["proc"].returncode == 1, graded_class["proc"].stderr  # frank: nothing to grade
    points = {name: (float(r["subsets"]), float(r["run_more_rows"]), float(r["possible"]))
              for name, r in rows.items()}
    assert points == {
        "ada": (2, 1, 3),      # right, her own run
        "bob": (0, 0, 3),      # 495 is wrong; a run outside the submission counts for nothing
        "carol": (2, 0, 3),    # right; the run changed opt_steps, which the exercise does not ask
        "dave": (0, 0, 3),     # nothing answered
        "erin": (2, 0, 3),     # right; the run folder she named is not there
        "frank": (0, 0, 3),    # an empty folder: listed, with why
        "hana": (2, 1, 3),     # the zip of the student edition's last cell: notebook and runs/
    }, report
    assert rows["frank"]["error"].startswith("not graded: frank/ holds no notebook")
    assert all(not rows[s]["error"] for s in rows if s != "frank")
    bob = report.split("\nbob:")[1].split("\ncarol:")[0]
    assert "the recorded run does not match the exercise" in bob
    carol = report.split("\ncarol:")[1].split("\ndave:")[0]
    assert "run exactly the command it gives" in carol and "FAILED" in carol
    skipped = report.split("Skipped (")[1]
    assert "notes.txt: not a notebook, an otter zip or a student's folder" in skipped
    assert "1 hidden entry" in skipped and "frank" not in skipped


def test_a_format_check_says_format_only_and_never_all_passed(graded_class):
    for nb in (graded_class["hana"], graded_class["bob"]):  # right (793) and wrong (495) alike
        shown = _outputs_of(nb, 'grader.check("subsets")')
        assert "format only: the answer is graded later" in shown, shown
        assert "All test cases passed" not in shown and "passed!" not in shown, shown
    # a format test that fails still says what is wrong with the form
    out = _outputs_of(graded_class["bob"], 'grader.check("run_more_rows")')
    assert "run_folder must name the folder of a finished" in out, out


def test_the_student_editions_last_cell_zips_the_notebook_with_its_runs(graded_class, pack):
    with zipfile.ZipFile(graded_class["zip"]) as zf:
        names = zf.namelist()
    assert f"{CLASS_CHAPTER}.ipynb" in names
    assert any(n.startswith(f"runs/{CLASS_CHAPTER}/") and n.endswith("results.json") for n in names)
    out, _ = pack
    for name in REGISTERED:
        nb = nbformat.read(out / "student" / name / f"{name}.ipynb", as_version=4)
        last = [c for c in nb.cells if c.cell_type == "code"][-1]
        assert last.source == "grader.export(pdf=False, files=lab_checks.hand_in_files())", name


def test_points_go_to_correctness_and_public_tests_say_format_only(pack):
    out, _ = pack
    for name in REGISTERED:
        nb = nbformat.read(out / "student" / name / f"{name}.ipynb", as_version=4)
        for q, src in nb.metadata["otter"]["tests"].items():
            cases = src.split("@test_case(")[1:]
            assert cases and all("points=0" in c and "format only: the answer is graded later" in c
                                 for c in cases), (name, q)
    with zipfile.ZipFile(out / "autograder" / "caffnet" / "autograder.zip") as zf:
        test = zf.read(next(n for n in zf.namelist() if n.endswith("subsets.py"))).decode()
    assert test.count("hidden=True") >= 1 and "points=0, hidden=False" in test


OTTER_MARKUP = re.compile(r"#\s*(BEGIN|END)\s+(SOLUTION|PROMPT|QUESTION|TESTS|TEST CONFIG)|#\s*SOLUTION\b"
                          r"|\bNO PROMPT\b|# (ASSIGNMENT CONFIG|IGNORE)")


def test_the_autograders_solutions_notebook_holds_no_otter_markup(pack):
    out, _ = pack
    for name in REGISTERED:
        nb = nbformat.read(out / "autograder" / name / f"{name}.ipynb", as_version=4)
        marked = [c.source for c in nb.cells if OTTER_MARKUP.search(c.source)]
        assert not marked, f"{name}: {marked[0][:200]}"
        spec = labs.load_spec(name, ROOT)
        source = "\n".join(c.source for c in nb.cells)
        for q in spec.questions:  # the solutions are there, whole
            assert q.solution.strip() in source, (name, q.name)


def test_every_command_of_a_lab_runs_at_the_labs_scale(pack):
    out, _ = pack
    for name in REGISTERED:
        spec = labs.load_spec(name, ROOT)
        nb = nbformat.read(out / "student" / name / f"{name}.ipynb", as_version=4)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        commands = re.findall(r"minirepro (?:run|sweep) [^`\n]*", text)
        assert commands, name
        for cmd in commands:
            assert re.findall(r"--scale (\S+)", cmd) == [spec.scale], (name, cmd)
    caffnet = nbformat.read(out / "student" / "caffnet" / "caffnet.ipynb", as_version=4)
    assert "minirepro sweep caffnet -p seed 0 1 2 -j 2 --scale smoke" in "\n".join(c.source for c in caffnet.cells)

