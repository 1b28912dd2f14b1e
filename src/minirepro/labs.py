"""Course labs: student editions and grading, built and graded by otter-grader.

A chapter's lab is specified in ``labs/<chapter>.yml`` (see :func:`load_spec` and the
teacher's guide, ``book/teaching.md``), never in the chapter notebook, so the book's
goldens and ledger do not move. From the spec and the chapter's ``{exercise}`` blocks
this module writes an otter-assign *master notebook* (questions, solutions, public and
hidden tests in otter's own format) and runs ``otter assign`` on it: the student
edition (``student/<chapter>/``: no solutions, scaffold cells with TODOs, public tests
only) and the autograder (``autograder/<chapter>/autograder.zip`` with every test).
``otter run`` grades a submission without Docker; :func:`grade` wraps it and reports,
per question, passed or failed with the question's hint (never the test's code, an
expected value or the solution).

Nothing here executes a chapter: an edition holds the chapter's exercises, the lab's
parameters and the few lines of setup the exercises need, so the course pack builds
in seconds.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import keyword
import multiprocessing
import os
import re
import shutil
import tempfile
import zipfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import yaml

from minirepro.chapters import Chapter, ChapterError, discover, get, repo_root

OTTER_VERSION_RANGE = ">=5.7,<5.8"
SPEC_KEYS = {"chapter", "scale", "params", "setup", "questions"}
QUESTION_KEYS = {"exercise", "name", "points", "prompt", "scaffold", "solution", "hint",
                 "public", "hidden", "run"}
TEST_KEYS = {"test", "hint"}
RUN_KEYS = {"command", "params", "scale", "metrics"}

_FENCE = re.compile(r"^(`{3,}|~{3,})\{(exercise|solution-start|solution-end|solution)\}\s*(\S*)\s*$")


class LabError(ChapterError):
    """Bad lab input (unknown chapter, missing spec or submission, a malformed spec)."""


# --------------------------------------------------------------------------- chapter text
@dataclass
class Exercise:
    """One ``{exercise}`` block of a chapter and its solution (prose and code)."""

    label: str
    prompt: str  # the exercise's text (MyST), options removed
    solution: str = ""  # the whole solution block, prose and code cells
    solution_code: list[str] = field(default_factory=list)  # its ``{code-cell}`` sources


def chapter_exercises(chapter: Chapter) -> list[Exercise]:
    """The chapter's exercises in page order, each with its gated or plain solution."""
    lines = chapter.path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, kind, arg = m.groups()
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        blocks.append((kind, arg, i, j))
        i = j + 1
    out: list[Exercise] = []
    for k, (kind, arg, i, j) in enumerate(blocks):
        body = lines[i + 1:j]
        if kind == "exercise":
            label = next((ln.split(":", 2)[2].strip() for ln in body if ln.startswith(":label:")), "")
            prompt = "\n".join(ln for ln in body if not re.match(r"^:\w[\w-]*:", ln)).strip()
            out.append(Exercise(label, prompt))
        elif kind == "solution":
            _attach(out, arg, "\n".join(ln for ln in body if not re.match(r"^:\w[\w-]*:", ln)))
        elif kind == "solution-start":
            end = next(b for b in blocks[k + 1:] if b[0] == "solution-end")
            _attach(out, arg, "\n".join(lines[j + 1:end[2]]))
    return out


def _attach(exercises: list[Exercise], label: str, text: str) -> None:
    for ex in exercises:
        if ex.label == label:
            ex.solution = text.strip()
            ex.solution_code = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)\n```", text, flags=re.S)
            return


def _plain(myst: str) -> str:
    """MyST roles that Jupyter does not render, as plain text."""
    myst = re.sub(r"\{eq\}`([^`]+)`", r"the chapter's equation (\1)", myst)
    return re.sub(r"\{(?:cite|cite:p|cite:t|ref|numref|doc)\}`([^`]+)`", r"\1", myst)


# --------------------------------------------------------------------------- the spec
@dataclass
class Question:
    """A graded question: one exercise's computable part (see the teacher's guide)."""

    exercise: str
    name: str
    points: int
    prompt: str
    scaffold: str
    solution: str
    hint: str
    public: list[dict]
    hidden: list[dict]


@dataclass
class LabSpec:
    chapter: Chapter
    scale: str
    params: dict[str, Any]
    setup: str
    questions: list[Question]
    path: Path


def spec_dir(root: Path | None = None) -> Path:
    return (root or repo_root()) / "labs"


def registered_chapters(root: Path | None = None) -> list[str]:
    """The chapters that ``_toc.yml`` registers (folder names without the number)."""
    root = root or repo_root()
    text = (root / "_toc.yml").read_text(encoding="utf-8")
    return re.findall(r"file:\s*notebooks/\d{2}-([a-z0-9-]+)/", text)


def _need(cond: bool, where: Path, message: str) -> None:
    if not cond:
        raise LabError(f"{where}: {message}")


def _run_tests(name: str, run: dict, chapter: str, where: Path) -> tuple[list[dict], list[dict]]:
    """The tests of a question that checks a student's recorded ``minirepro run``."""
    _need(set(run) <= RUN_KEYS, where, f"run of {name} has unknown keys "
          f"{sorted(set(run) - RUN_KEYS)}; allowed: {', '.join(sorted(RUN_KEYS))}")
    params = dict(run.get("params") or {})
    scale = run.get("scale")
    metrics = list(run.get("metrics") or [])
    args = f"run_folder, {chapter!r}"
    public = [{"test": f"assert lab_checks.run_results({args}) is not None",
               "hint": f"run_folder must name the folder of a finished `minirepro run {chapter}` "
                       "(it holds results.json) inside your submission folder"}]
    hidden = [{"test": f"lab_checks.check_run({args}, params={params!r}, scale={scale!r}, "
                       f"metrics={metrics!r})",
               "hint": "the recorded run does not match the exercise: check the command "
                       "(parameters and scale) and that the run finished with every metric"}]
    return public, hidden


def load_spec(chapter_name: str, root: Path | None = None) -> LabSpec:
    """Read and check ``labs/<chapter>.yml``.

    Raises:
        LabError: unknown chapter (lists the chapters), no spec, or a malformed spec.
    """
    root = root or repo_root()
    chapter = get(chapter_name, root)
    path = spec_dir(root) / f"{chapter.name}.yml"
    if not path.is_file():
        raise LabError(f"chapter {chapter.name!r} has no lab spec {path.relative_to(root)}; "
                       f"write one (see book/teaching.md)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise LabError(f"{path}: not valid YAML ({exc})".splitlines()[0]) from None
    _need(isinstance(raw, dict), path, "must be a mapping")
    _need(set(raw) <= SPEC_KEYS, path, f"unknown keys {sorted(set(raw) - SPEC_KEYS)}; "
          f"allowed: {', '.join(sorted(SPEC_KEYS))}")
    _need(raw.get("chapter") == chapter.name, path, f"chapter must be {chapter.name!r}")
    scale = raw.get("scale", "smoke")
    _need(scale in ("smoke", "book", "full"), path, "scale must be smoke, book or full")
    params = chapter.validate(raw.get("params") or {})
    exercises = {ex.label: ex for ex in chapter_exercises(chapter)}
    questions, names = [], set()
    for q in raw.get("questions") or []:
        _need(isinstance(q, dict) and set(q) <= QUESTION_KEYS, path,
              f"a question has unknown keys; allowed: {', '.join(sorted(QUESTION_KEYS))}")
        name = str(q.get("name", ""))
        _need(name.isidentifier() and not keyword.iskeyword(name) and name not in names, path,
              f"question name {name!r} must be a new Python identifier")
        names.add(name)
        _need(q.get("exercise") in exercises, path, f"question {name}: exercise must be one of "
              f"{', '.join(exercises)}")
        public, hidden = list(q.get("public") or []), list(q.get("hidden") or [])
        if "run" in q:
            run = q["run"] or {}
            try:  # the run the exercise asks for must be one `minirepro run` accepts
                chapter.validate({**(run.get("params") or {}), "scale": run.get("scale", "book")})
            except ChapterError as exc:
                raise LabError(f"{path}: question {name}: run: {exc}") from None
            p, h = _run_tests(name, run, chapter.name, path)
            public, hidden = p + public, h + hidden
        for t in public + hidden:
            _need(isinstance(t, dict) and set(t) <= TEST_KEYS and t.get("test") and t.get("hint"),
                  path, f"question {name}: every test needs `test` and `hint` (and nothing else)")
            _need('"' not in t["hint"] and "\n" not in t["hint"].strip(), path,
                  f"question {name}: a hint is one line without double quotes")
        _need(bool(hidden), path, f"question {name}: needs at least one hidden test")
        for key in ("scaffold", "solution"):
            _need(bool(str(q.get(key, "")).strip()), path, f"question {name}: needs `{key}`")
        questions.append(Question(
            exercise=q["exercise"], name=name, points=int(q.get("points", 1)),
            prompt=str(q.get("prompt", "")).strip(), scaffold=str(q["scaffold"]).rstrip(),
            solution=str(q["solution"]).rstrip(), hint=str(q.get("hint", "")).strip(),
            public=public, hidden=hidden))
    _need(bool(questions), path, "needs at least one question (an autogradable exercise)")
    return LabSpec(chapter, scale, params, str(raw.get("setup") or "").rstrip(), questions, path)


# --------------------------------------------------------------------------- master notebook
def _md(text: str):
    return nbformat.v4.new_markdown_cell(text)


def _raw(text: str):
    return nbformat.v4.new_raw_cell(text)


def _code(text: str, tags: list[str] | None = None):
    cell = nbformat.v4.new_code_cell(text)
    if tags:
        cell.metadata["tags"] = tags
    return cell


def _test_cell(name: str, k: int, test: dict, hidden: bool):
    args = "env"
    body = "\n".join("    " + ln if ln.strip() else "" for ln in test["test"].rstrip().splitlines())
    config = yaml.safe_dump({"hidden": hidden, "failure_message": test["hint"].strip()},
                            sort_keys=False, width=1000).rstrip()
    src = (f'""" # BEGIN TEST CONFIG\n{config}\n""" # END TEST CONFIG\n'
           f"def test_{name}_{k}({args}):\n"
           f"    globals().update(env)\n"
           f"    from minirepro import lab_checks  # noqa: F401\n{body}\n")
    return _code(src)


def master_notebook(spec: LabSpec) -> nbformat.NotebookNode:
    """The otter-assign master notebook of a lab (questions, solutions, all tests)."""
    ch = spec.chapter
    config = {
        "name": ch.name, "init_cell": True, "check_all_cell": False, "export_cell": False,
        "run_tests": False, "solutions_pdf": False, "template_pdf": False,
        "generate": {"pdf": False, "filtering": False},
        "tests": {"files": False, "ok_format": False},
    }
    cells = [_raw("# ASSIGNMENT CONFIG\n" + yaml.safe_dump(config, sort_keys=False))]
    cells.append(_md(
        f"# Lab: {ch.title}\n\n"
        f"The exercises of the chapter `{ch.slug}` (read it in the book first: "
        f"`notebooks/{ch.slug}/{ch.name}.md`). Run the cells from the top. Questions "
        "marked *graded* have a scaffold cell: replace every `...` and each `# TODO`, then "
        "run the `grader.check(...)` cell below it, which runs the public tests (the grader "
        "runs hidden ones too). Exercises that ask for `minirepro run` or `sweep` are done in a "
        "terminal in the folder of this notebook; hand in this notebook together with the "
        "`runs/` folder it names."))
    lab_params = {"seed": 0, **spec.params}
    params = "\n".join([f"scale = {spec.scale!r}  # the lab's scale: smoke, book or full"]
                       + [f"{k} = {v!r}" for k, v in lab_params.items() if k != "scale"])
    cells.append(_code(params, tags=["parameters"]))
    cells.append(_code("from minirepro import lab_checks  # helpers the graded questions may use\n"
                       + spec.setup))
    graded = {}
    for q in spec.questions:
        graded.setdefault(q.exercise, []).append(q)
    for n, ex in enumerate(chapter_exercises(ch), 1):
        mark = " (graded)" if ex.label in graded else ""
        cells.append(_md(f"## Exercise {n}{mark}\n\n{_plain(ex.prompt)}"))
        if ex.label not in graded:
            cells.append(_md("*Your answer (not graded):*"))
            cells.append(_code("# your code here"))
            continue
        for q in graded[ex.label]:
            cells.append(_raw(f"# BEGIN QUESTION\nname: {q.name}\npoints: {q.points}"))
            cells.append(_md(f"**Graded question `{q.name}`** ({q.points} point"
                             f"{'s' if q.points != 1 else ''}). {_plain(q.prompt)}"))
            cells.append(_raw("# BEGIN SOLUTION"))
            cells.append(_code("# BEGIN SOLUTION NO PROMPT\n" + q.solution + "\n# END SOLUTION\n"
                               '""" # BEGIN PROMPT\n' + q.scaffold + '\n""" # END PROMPT'))
            cells.append(_raw("# END SOLUTION"))
            cells.append(_raw("# BEGIN TESTS"))
            for k, t in enumerate(q.public):
                cells.append(_test_cell(q.name, k, t, hidden=False))
            for k, t in enumerate(q.hidden, len(q.public)):
                cells.append(_test_cell(q.name, k, t, hidden=True))
            cells.append(_raw("# END TESTS"))
            cells.append(_raw("# END QUESTION"))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


# --------------------------------------------------------------------------- build
def default_out(root: Path | None = None) -> Path:
    return (root or repo_root()) / "_build" / "labs"


@contextlib.contextmanager
def _quiet():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        yield buf


def _assign(spec: LabSpec, work: Path) -> Path:
    """``otter assign`` of the spec's master notebook into ``work/dist``."""
    from otter.assign import main as otter_assign

    master = work / f"{spec.chapter.name}.ipynb"
    nbformat.write(master_notebook(spec), master)
    dist = work / "dist"
    with _quiet() as log:
        try:
            otter_assign(str(master), str(dist), no_pdfs=True, no_run_tests=True)
        except Exception as exc:  # otter's own error, with its log, in one line
            raise LabError(f"otter assign failed for {spec.chapter.name}: {exc}; "
                           f"{log.getvalue().strip()[-300:]}") from exc
    master.unlink()
    return dist


def build_lab(chapter_name: str, out: Path | None = None, root: Path | None = None) -> dict[str, Path]:
    """Write ``out/student/<chapter>/`` and ``out/autograder/<chapter>/`` for one chapter.

    Built in a temporary folder and moved into place at the end, so a failure leaves
    nothing half-written. Returns the two folders.
    """
    return build_labs([chapter_name], out, root)[chapter_name]


def build_labs(chapter_names: list[str], out: Path | None = None,
               root: Path | None = None) -> dict[str, dict[str, Path]]:
    """Several labs (``lab --all``: every registered chapter); all specs are checked first."""
    root = root or repo_root()
    out = Path(out) if out else default_out(root)
    specs = [load_spec(name, root) for name in chapter_names]  # all bad input before any work
    if out.exists() and not out.is_dir():
        raise LabError(f"--out {out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    done: dict[str, dict[str, Path]] = {}
    with tempfile.TemporaryDirectory(prefix=".lab-", dir=out) as tmp:
        staged = {}
        for spec in specs:
            work = Path(tmp) / spec.chapter.name
            work.mkdir()
            staged[spec.chapter.name] = _assign(spec, work)
        for name, dist in staged.items():
            for z in (dist / "autograder").glob(f"{name}-autograder_*.zip"):
                z.rename(z.with_name("autograder.zip"))  # a stable name, not a timestamp
            done[name] = {}
            for part in ("student", "autograder"):
                dest = out / part / name
                if dest.exists():
                    shutil.rmtree(dest)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(dist / part), dest)
                done[name][part] = dest
    return done


# --------------------------------------------------------------------------- grading
@dataclass
class QuestionGrade:
    name: str
    score: float
    possible: float
    hints: list[str]
    exercise: str = ""  # the chapter's exercise label

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


def _submissions(path: Path) -> list[tuple[str, Path]]:
    """(student, file or folder) pairs: a notebook, an otter zip, a folder with one
    notebook (and its ``runs/``), or a class folder of those."""
    if path.is_file():
        return [(path.stem, path)]
    nbs = sorted(path.glob("*.ipynb"))
    if len(nbs) == 1:
        return [(path.name, path)]
    subs = [(p.stem, p) for p in nbs + sorted(path.glob("*.zip"))]
    subs += [(p.name, p) for p in sorted(path.iterdir()) if p.is_dir() and any(p.glob("*.ipynb"))]
    return subs


def _as_zip(sub: Path, tmp: Path) -> Path:
    """A folder submission as a zip otter can grade: its notebook and its runs' JSON files."""
    if sub.is_file():
        return sub
    dest = tmp / f"{sub.name}.zip"
    with zipfile.ZipFile(dest, "w") as zf:
        for p in sorted(sub.glob("*.ipynb")):
            zf.write(p, p.name)
        for p in sorted(sub.glob("runs/**/*.json")):
            zf.write(p, p.relative_to(sub).as_posix())
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


def _grade_one(student: str, sub: Path, autograder: Path, tmp: Path) -> Grade:
    from otter.run import main as otter_run

    try:
        with _quiet(), _ipc_kernels():
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
    return Grade(student, questions)


def grade(chapter_name: str, submission: Path, out: Path | None = None,
          autograder: Path | None = None, root: Path | None = None,
          jobs: int | None = None) -> list[Grade]:
    """Grade one submission or a class folder with ``otter run``; write the report.

    The autograder is built fresh from the spec unless ``autograder`` (a zip) is given.
    Writes ``grades.csv`` and ``report.md`` into ``out`` (default
    ``_build/labs/grades/<chapter>/``) and returns the grades, in name order. ``jobs``
    submissions are graded at once (default: the cores), each in its own process.

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
    subs = _submissions(submission)
    if not subs:
        raise LabError(f"{submission} holds no submission (.ipynb, .zip, or folders with a notebook)")
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise LabError(f"--out {out} is a file, not a folder")
    out = Path(out) if out else default_out(root) / "grades" / spec.chapter.name
    with tempfile.TemporaryDirectory(prefix="minirepro-grade-") as tmp:
        tmp = Path(tmp)
        if autograder is None:
            work = tmp / "assign"
            work.mkdir()
            dist = _assign(spec, work)
            autograder = next((dist / "autograder").glob("*-autograder_*.zip"))
        args = [(student, sub, Path(autograder), tmp) for student, sub in subs]
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(args)))
        if jobs == 1:
            grades = [_grade_one(*a) for a in args]
        else:  # otter run changes the working directory: one process per submission at a time
            ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                              else "spawn")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
                grades = list(pool.map(_grade_one, *zip(*args)))
    order = {q.name: i for i, q in enumerate(spec.questions)}
    labels = {q.name: q.exercise for q in spec.questions}
    for g in grades:  # the spec's order, not otter's
        g.questions.sort(key=lambda q: order.get(q.name, len(order)))
        for q in g.questions:
            q.exercise = labels.get(q.name, "")
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
    return grades


def report(chapter_name: str, grades: list[Grade]) -> str:
    """The grade report: per student and question, passed or failed with its hints."""
    lines = [f"Grade report: lab {chapter_name}, {len(grades)} submission(s)", ""]
    for g in grades:
        if g.error:
            lines.append(f"{g.student}: {g.error}")
            continue
        lines.append(f"{g.student}: {g.score:.3g} of {g.possible:g} points")
        for q in g.questions:
            state = "passed" if q.passed else "FAILED"
            points = f"{q.score:.3g}/{q.possible:g}"
            lines.append(f"  {q.name:<20} {state:<7} {points:<9}"
                         + (f" ({q.exercise})" if q.exercise else "").rstrip())
            lines.extend(f"      hint: {h}" for h in q.hints)
    return "\n".join(lines) + "\n"


def write_json_summary(grades: list[Grade]) -> str:
    return json.dumps([{"student": g.student, "score": g.score, "possible": g.possible,
                        "error": g.error,
                        "questions": {q.name: {"exercise": q.exercise, "score": q.score,
                                               "possible": q.possible,
                                               "passed": q.passed, "hints": q.hints}
                                      for q in g.questions}} for g in grades], indent=1)


def all_chapters(root: Path | None = None) -> list[str]:
    """The chapters of a course pack: those registered in ``_toc.yml``."""
    root = root or repo_root()
    known = {c.name for c in discover(root)}
    return [n for n in registered_chapters(root) if n in known]


# --------------------------------------------------------------------------- the guide's sample
SAMPLE_CHAPTER = "spreadsheetarena"
SAMPLE_REPORT = Path("book") / "lab-report.txt"


def sample_class(folder: Path, root: Path | None = None) -> Path:
    """A class of two for the teacher's guide, made by the tools themselves.

    ``ada`` hands in the instructor's notebook and a real smoke-scale run of the
    exercise's command (``minirepro run``, recorded under her ``runs/``); ``bob`` hands
    in the student edition with one wrong answer and a run folder that does not exist.
    """
    from minirepro.runner import run_chapter

    root = root or repo_root()
    spec = load_spec(SAMPLE_CHAPTER, root)
    built = build_lab(SAMPLE_CHAPTER, folder / "pack", root)
    ada, bob = folder / "class" / "ada", folder / "class" / "bob"
    ada.mkdir(parents=True)
    bob.mkdir(parents=True)
    shutil.copy(built["autograder"] / f"{SAMPLE_CHAPTER}.ipynb", ada)
    run_q = next(yaml.safe_load(spec.path.read_text())["questions"][i]["run"]
                 for i, q in enumerate(spec.questions) if q.name.startswith("run_"))
    run_chapter(SAMPLE_CHAPTER, dict(run_q.get("params") or {}), scale=run_q.get("scale"),
                runs_dir=ada / "runs", root=root, quiet_bars=True)
    nb = nbformat.read(built["student"] / f"{SAMPLE_CHAPTER}.ipynb", as_version=4)
    for cell in nb.cells:
        cell.source = (cell.source.replace("elo_gap = ...", "elo_gap = 200.0")
                       .replace("run_folder = ...", f"run_folder = 'runs/{SAMPLE_CHAPTER}/my-run'"))
    nbformat.write(nb, bob / f"{SAMPLE_CHAPTER}.ipynb")
    return folder / "class"


def write_sample_report(root: Path | None = None) -> Path:
    """``book/lab-report.txt``: the grade report of :func:`sample_class`, with its command."""
    root = root or repo_root()
    with tempfile.TemporaryDirectory(prefix="minirepro-sample-") as tmp:
        klass = sample_class(Path(tmp), root)
        grades = grade(SAMPLE_CHAPTER, klass, out=Path(tmp) / "grades", root=root)
        text = (f"$ minirepro lab grade {SAMPLE_CHAPTER} class/ --out class-grades\n"
                + report(SAMPLE_CHAPTER, grades)
                + "\n$ cat class-grades/grades.csv\n"
                + (Path(tmp) / "grades" / "grades.csv").read_text(encoding="utf-8"))
    dest = root / SAMPLE_REPORT
    dest.write_text(text, encoding="utf-8")
    return dest


if __name__ == "__main__":  # python -m minirepro.labs: re-make the guide's sample report
    print(write_sample_report())
