"""A chapter's course lab, specified in ``labs/<chapter>.yml``: its questions, scaffolds,
tests and run questions, with the chapter's ``{exercise}`` blocks (see :func:`load_spec`)."""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from minirepro import chapters
from minirepro.chapters import Chapter, ChapterError, discover, repo_root

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


_COMMAND = re.compile(r"(minirepro (?:run|sweep) [^`\n]*?)(\s*)(?=`|\n|$)")


def at_scale(text: str, scale: str) -> str:
    """Every ``minirepro run`` / ``sweep`` command in ``text`` at the lab's ``scale``: a
    ``--scale`` added where there is none, and another scale replaced (a smoke lab never
    sends a student to a book-scale sweep)."""
    def fix(m: re.Match) -> str:
        cmd = m.group(1)
        if re.search(r"--scale(?:\s+|=)\S+", cmd):
            cmd = re.sub(r"--scale(?:\s+|=)\S+", f"--scale {scale}", cmd)
        else:
            cmd = f"{cmd} --scale {scale}"
        return cmd + m.group(2)
    return _COMMAND.sub(fix, text)


def plain(myst: str) -> str:
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
                       "(it holds results.json) inside this notebook's folder, e.g. runs/"
                       f"{chapter}/<run-id>; run the command in a terminal there"}]
    hidden = [{"test": f"lab_checks.check_run({args}, params={params!r}, scale={scale!r}, "
                       f"metrics={metrics!r})",
               "hint": "the recorded run does not match the exercise: run exactly the command it "
                       "gives (those parameters, that scale, no others) and let it finish"}]
    return public, hidden


def load_spec(chapter_name: str, root: Path | None = None) -> LabSpec:
    """Read and check ``labs/<chapter>.yml``.

    Raises:
        LabError: unknown chapter (lists the chapters), no spec, or a malformed spec.
    """
    root = root or repo_root()
    chapter = chapters.get(chapter_name, root)
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
            run = {**run, "scale": run.get("scale", scale)}  # the lab's scale unless it says
            try:  # the run the exercise asks for must be one `minirepro run` accepts
                chapter.validate({**(run.get("params") or {}), "scale": run["scale"]})
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

def all_chapters(root: Path | None = None) -> list[str]:
    """The chapters of a course pack: those registered in ``_toc.yml``."""
    root = root or repo_root()
    known = {c.name for c in discover(root)}
    return [n for n in registered_chapters(root) if n in known]


# --------------------------------------------------------------------------- the guide's sample
