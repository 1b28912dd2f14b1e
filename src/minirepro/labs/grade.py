"""Grading with ``otter run`` (no Docker): per student and question, passed or failed with
the question's hint, a report and ``grades.csv``."""

from __future__ import annotations

import contextlib
import csv
import json
import multiprocessing
import os
import tempfile
import zipfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from minirepro.chapters import repo_root
from minirepro.labs.assign import assign, default_out, quiet
from minirepro.labs.spec import LabError, load_spec

NOT_ATTEMPTED = "not attempted: its answer cell is as the student edition handed it out"


@dataclass
class QuestionGrade:
    name: str
    score: float
    possible: float
    hints: list[str]
    exercise: str = ""  # the chapter's exercise label
    attempted: bool = True  # False: no points, and the scaffold cell unchanged

    @property
    def passed(self) -> bool:
        return self.score >= self.possible


@dataclass
class Grade:
    student: str
    questions: list[QuestionGrade]
    error: str = ""

    @property
    def score(self) -> float:
        return sum(q.score for q in self.questions)

    @property
    def possible(self) -> float:
        return sum(q.possible for q in self.questions)


class Grades(list):
    """The grades of a class (a list of :class:`Grade`, in name order), and what was skipped:
    ``skipped`` holds ``(entry, why)`` for every entry of the class folder not graded."""

    def __init__(self, grades=(), skipped=()):
        super().__init__(grades)
        self.skipped: list[tuple[str, str]] = list(skipped)


@dataclass
class Submission:
    """One student's hand-in: a notebook (graded with the ``runs/`` beside it) or an otter
    zip; ``error`` says why a student's folder could not be graded."""

    student: str
    path: Path | None
    error: str = ""


IGNORED_DIRS = {"runs", ".ipynb_checkpoints", "__MACOSX", "__pycache__"}


def _hidden(p: Path) -> bool:
    return p.name.startswith(".") or p.name in ("__MACOSX", "__pycache__")


def _notebooks_in(folder: Path) -> list[Path]:
    """The notebooks of a student's folder, at any depth, outside ``runs/`` and checkpoints."""
    out = []
    for nb in sorted(folder.rglob("*.ipynb")):
        parts = nb.relative_to(folder).parts[:-1]
        if not any(part in IGNORED_DIRS or part.startswith(".") for part in parts) and not _hidden(nb):
            out.append(nb)
    return out


def _zips_in(folder: Path) -> list[Path]:
    return [z for z in sorted(folder.rglob("*.zip"))
            if not any(part in IGNORED_DIRS or part.startswith(".") for part in z.relative_to(folder).parts)]


def _is_one_students_folder(path: Path) -> bool:
    """A folder holding exactly one notebook at its top, no zip, and no other folder than
    ``runs/`` (and hidden ones): one student's hand-in, not a class."""
    top = [p for p in path.iterdir() if not _hidden(p)]
    notebooks = [p for p in top if p.is_file() and p.suffix == ".ipynb"]
    folders = [p for p in top if p.is_dir() and p.name not in IGNORED_DIRS]
    zips = [p for p in top if p.is_file() and p.suffix == ".zip"]
    return len(notebooks) == 1 and not folders and not zips


def _students_folder(name: str, folder: Path, chapter: str) -> tuple[Submission, list[tuple[str, str]]]:
    """One student's folder, at any depth: its one notebook (or the one named after the lab),
    else its one otter zip; what else it holds is reported as skipped."""
    notebooks = _notebooks_in(folder)
    skipped: list[tuple[str, str]] = []
    if len(notebooks) > 1:
        named = [nb for nb in notebooks if nb.name == f"{chapter}.ipynb"]
        if len(named) == 1:
            skipped += [(f"{nb.relative_to(folder.parent)}", f"{name} hands in {named[0].name}; "
                         "another notebook in the folder") for nb in notebooks if nb != named[0]]
            notebooks = named
        else:
            shown = ", ".join(str(nb.relative_to(folder)) for nb in notebooks[:4])
            return Submission(name, None, f"not graded: {len(notebooks)} notebooks in {folder.name}/ "
                              f"({shown}); hand in one, or name it {chapter}.ipynb"), skipped
    if notebooks:
        return Submission(name, notebooks[0]), skipped
    zips = _zips_in(folder)
    if len(zips) == 1:
        return Submission(name, zips[0]), skipped
    if zips:
        return Submission(name, None, f"not graded: {len(zips)} zips in {folder.name}/ and no notebook; "
                          "hand in one"), skipped
    return Submission(name, None, f"not graded: {folder.name}/ holds no notebook and no otter zip"), skipped


def _submissions(path: Path, chapter: str) -> tuple[list[Submission], list[tuple[str, str]]]:
    """The students of ``path`` and the entries skipped, with why.

    ``path`` is one submission (a notebook, an otter zip, or one student's folder: one
    notebook and its ``runs/``), or a class folder in which every notebook, every otter zip
    and every folder is one student (a student's folder may nest its notebook deeper, as an
    unzipped hand-in does). Other files are skipped and reported; hidden files are ignored.
    """
    if path.is_file():
        return [Submission(path.stem, path)], []
    if _is_one_students_folder(path):
        return [Submission(path.name, _notebooks_in(path)[0])], []
    subs: list[Submission] = []
    skipped: list[tuple[str, str]] = []
    hidden = 0
    for entry in sorted(path.iterdir()):
        if _hidden(entry):
            hidden += 1
        elif entry.is_dir() and entry.name == "runs":
            skipped.append((f"{entry.name}/", "a runs folder beside the submissions, not a student's"))
        elif entry.is_dir():
            sub, more = _students_folder(entry.name, entry, chapter)
            subs.append(sub)
            skipped += more
        elif entry.suffix in (".ipynb", ".zip"):
            subs.append(Submission(entry.stem, entry))
        else:
            skipped.append((entry.name, "not a notebook, an otter zip or a student's folder"))
    names = [s.student for s in subs]
    for s in subs:  # erin.ipynb and erin/ are two hand-ins: keep both, named apart
        if names.count(s.student) > 1 and s.path is not None:
            s.student = f"{s.student} ({s.path.relative_to(path)})"
    if hidden:
        skipped.append((f"{hidden} hidden entr{'y' if hidden == 1 else 'ies'}",
                        "names starting with a dot (.DS_Store, checkpoints) are ignored"))
    return subs, skipped


def _as_zip(sub: Path, tmp: Path) -> Path:
    """A notebook submission as a zip otter can grade: the notebook and the JSON files of the
    ``runs/`` beside it (a zip is graded as it is)."""
    if sub.suffix == ".zip":
        return sub
    dest = Path(tempfile.mkdtemp(prefix="sub-", dir=tmp)) / f"{sub.stem}.zip"
    with zipfile.ZipFile(dest, "w") as zf:
        zf.write(sub, sub.name)
        for p in sorted(sub.parent.glob("runs/**/*.json")):
            zf.write(p, p.relative_to(sub.parent).as_posix())
    return dest


@contextlib.contextmanager
def _ipc_kernels():
    """otter's kernels on private Unix sockets (:mod:`minirepro.kernels`): with TCP, two
    kernels started at once by parallel grading can race for a port."""
    import nbconvert.preprocessors as pre
    from traitlets import default

    from minirepro.kernels import AsyncIPCKernelManager

    original = pre.ExecutePreprocessor

    class IPCExecutePreprocessor(original):
        @default("kernel_manager_class")
        def _kernel_manager_class_default(self):
            return AsyncIPCKernelManager

    pre.ExecutePreprocessor = IPCExecutePreprocessor  # otter imports it at call time
    try:
        yield
    finally:
        pre.ExecutePreprocessor = original


def _normalized(source: str) -> str:
    """A cell's code without blank lines and trailing spaces (an untouched cell re-saved by
    another editor compares equal)."""
    return "\n".join(ln.rstrip() for ln in source.splitlines() if ln.strip())


def _submitted_notebook(sub: Path) -> dict | None:
    """The submission's notebook as JSON: the notebook itself, or the one notebook of an otter
    zip outside its ``runs/`` (``None`` if there is not exactly one, or it cannot be read)."""
    try:
        if sub.suffix != ".zip":
            return json.loads(sub.read_text(encoding="utf-8"))
        with zipfile.ZipFile(sub) as zf:
            names = [n for n in zf.namelist() if n.endswith(".ipynb") and not n.startswith("runs/")
                     and "/." not in f"/{n}" and "__MACOSX" not in n]
            return json.loads(zf.read(names[0]).decode("utf-8")) if len(names) == 1 else None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None


def unchanged_scaffolds(sub: Path, scaffolds: dict[str, str]) -> set[str]:
    """The questions (of ``scaffolds``: name -> the student edition's answer cell) whose answer
    cell the submission still holds as handed out."""
    nb = _submitted_notebook(sub)
    if not isinstance(nb, dict):
        return set()
    sources = set()
    for cell in nb.get("cells") or []:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            src = cell.get("source", "")
            sources.add(_normalized("".join(src) if isinstance(src, list) else str(src)))
    return {name for name, scaffold in scaffolds.items() if _normalized(scaffold) in sources}


def _grade_one(student: str, sub: Path, autograder: Path, tmp: Path,
               scaffolds: dict[str, str] | None = None) -> Grade:
    from otter.run import main as otter_run

    try:
        with quiet(), _ipc_kernels():
            results = otter_run(str(_as_zip(sub, tmp)), autograder=str(autograder),
                                output_dir=None, no_logo=True)
    except Exception as exc:  # a notebook of another lab, an unreadable file
        return Grade(student, [], error=f"not graded: {str(exc).splitlines()[0][:200]}")
    questions = []
    for name, res in results.results.items():
        hints = []
        for tcr in res.test_case_results:
            if not tcr.passed:
                hint = tcr.test_case.failure_message or "a test failed"
                if hint not in hints:
                    hints.append(hint)
        questions.append(QuestionGrade(name, float(res.score), float(res.possible), hints))
    # an answer cell left as handed out, with no points: "not attempted", not the hint of a
    # wrong answer ("Your count disagrees ..."), which would tell the student they tried
    unchanged = unchanged_scaffolds(sub, scaffolds or {})
    for q in questions:
        if q.name in unchanged and q.score == 0:
            q.attempted, q.hints = False, [NOT_ATTEMPTED]
    return Grade(student, questions)


def _run_otter(spec, subs: list, autograder: Path | None, jobs: int | None) -> list:
    """``otter run`` on every submission that has a path, ``jobs`` at once (each in its own
    process: otter changes the working directory); the autograder built from the spec when
    none is given."""
    with tempfile.TemporaryDirectory(prefix="minirepro-grade-") as tmp:
        tmp = Path(tmp)
        if autograder is None:
            work = tmp / "assign"
            work.mkdir()
            dist = assign(spec, work)
            autograder = next((dist / "autograder").glob("*-autograder_*.zip"))
        scaffolds = {q.name: q.scaffold for q in spec.questions}
        args = [(s.student, s.path, Path(autograder), tmp, scaffolds) for s in subs if s.path is not None]
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(args) or 1))
        if jobs == 1:
            return [_grade_one(*a) for a in args]
        # otter run changes the working directory: one process per submission at a time
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                          else "spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            return list(pool.map(_grade_one, *zip(*args)))


def _complete_and_order(grades: Grades, spec) -> None:
    """Every question for every student (0 points where nothing was graded), in the spec's
    order (not otter's), each labelled with its exercise."""
    for g in grades:  # a student with nothing graded still has every question, at 0 points
        if not g.questions:
            g.questions = [QuestionGrade(q.name, 0.0, float(q.points), []) for q in spec.questions]
    order = {q.name: i for i, q in enumerate(spec.questions)}
    labels = {q.name: q.exercise for q in spec.questions}
    for g in grades:  # the spec's order, not otter's
        g.questions.sort(key=lambda q: order.get(q.name, len(order)))
        for q in g.questions:
            q.exercise = labels.get(q.name, "")


def _write_grades(out: Path, spec, grades: Grades) -> None:
    """``report.md`` and ``grades.csv`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(report(spec.chapter.name, grades), encoding="utf-8")
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as f:
        names = [q.name for q in spec.questions]
        w = csv.writer(f)
        w.writerow(["student", *names, "score", "possible", "error"])
        for g in grades:
            by = {q.name: q.score for q in g.questions}
            w.writerow([g.student, *[round(by.get(n, 0), 3) for n in names], round(g.score, 3),
                        round(g.possible, 3), g.error])


def grade(chapter_name: str, submission: Path, out: Path | None = None,
          autograder: Path | None = None, root: Path | None = None,
          jobs: int | None = None) -> Grades:
    """Grade one submission or a class folder with ``otter run``; write the report.

    Every notebook, otter zip and student's folder of a class folder is graded (see
    :func:`_submissions`); a student's folder that holds nothing to grade is a student
    with no points and the reason, and every other entry not graded is reported as
    skipped, with why (``Grades.skipped``, and the report). The autograder is built
    fresh from the spec unless ``autograder`` (a zip) is given. Writes ``grades.csv``
    and ``report.md`` into ``out`` (default ``_build/labs/grades/<chapter>/`` in the current folder) and
    returns the grades, in name order. ``jobs`` submissions are graded at once
    (default: the cores), each in its own process.

    Raises:
        LabError: unknown chapter, a missing submission, no notebook in a folder.
    """
    root = root or repo_root()
    submission = Path(submission)
    spec = load_spec(chapter_name, root)
    if not submission.exists():
        raise LabError(f"no such submission: {submission} (give a notebook, an otter zip, "
                       "or a folder of them)")
    if autograder is not None and not Path(autograder).is_file():
        raise LabError(f"no such autograder zip: {autograder}")
    subs, skipped = _submissions(submission, spec.chapter.name)
    if not subs:
        raise LabError(f"{submission} holds no submission (.ipynb, .zip, or folders with a notebook)")
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise LabError(f"--out {out} is a file, not a folder")
    out = Path(out) if out else default_out() / "grades" / spec.chapter.name
    graded = _run_otter(spec, subs, autograder, jobs)
    by_student = {g.student: g for g in graded}
    grades = Grades([by_student.get(s.student) or Grade(s.student, [], error=s.error) for s in subs],
                    skipped)
    _complete_and_order(grades, spec)
    _write_grades(out, spec, grades)
    return grades


def report(chapter_name: str, grades: list[Grade]) -> str:
    """The grade report: per student and question, passed or failed with its hints; then
    what was skipped, and why."""
    lines = [f"Grade report: lab {chapter_name}, {len(grades)} submission(s)", ""]
    for g in grades:
        if g.error:
            lines.append(f"{g.student}: 0 of {g.possible:g} points, {g.error}")
            continue
        lines.append(f"{g.student}: {g.score:.3g} of {g.possible:g} points")
        for q in g.questions:
            state = "passed" if q.passed else ("FAILED" if q.attempted else "not attempted")
            points = f"{q.score:.3g}/{q.possible:g}"
            lines.append(f"  {q.name:<20} {state:<7} {points:<9}"
                         + (f" ({q.exercise})" if q.exercise else "").rstrip())
            lines.extend(f"      hint: {h}" for h in q.hints if q.attempted)
    skipped = getattr(grades, "skipped", [])
    if skipped:
        lines += ["", f"Skipped ({len(skipped)}):"]
        lines += [f"  {entry}: {why}" for entry, why in skipped]
    return "\n".join(lines) + "\n"


def write_json_summary(grades: list[Grade]) -> str:
    """The grades as JSON, one object per student (what was skipped is in the report)."""
    return json.dumps([{"student": g.student, "score": g.score, "possible": g.possible,
                        "error": g.error,
                        "questions": {q.name: {"exercise": q.exercise, "score": q.score,
                                               "possible": q.possible,
                                               "passed": q.passed, "attempted": q.attempted,
                                               "hints": q.hints}
                                      for q in g.questions}} for g in grades], indent=1)


