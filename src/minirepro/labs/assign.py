"""Student editions and autograders: an otter-assign master notebook per lab, built by
``otter assign`` (nothing executes a chapter, so the course pack builds in seconds)."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import tempfile
from pathlib import Path

import nbformat
import yaml

from minirepro.chapters import repo_root
from minirepro.labs.checks import FORMAT_ONLY
from minirepro.labs.spec import LabError, LabSpec, at_scale, chapter_exercises, load_spec, plain


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
    """One otter test. A public test checks the answer's form only: it carries no points
    and says so when it passes (:data:`FORMAT_ONLY`); the hidden tests share the points."""
    args = "env"
    body = "\n".join("    " + ln if ln.strip() else "" for ln in test["test"].rstrip().splitlines())
    spec = {"hidden": hidden, "failure_message": test["hint"].strip()}
    if not hidden:
        spec.update({"points": 0, "success_message": FORMAT_ONLY})
    config = yaml.safe_dump(spec, sort_keys=False, width=1000).rstrip()
    src = (f'""" # BEGIN TEST CONFIG\n{config}\n""" # END TEST CONFIG\n'
           f"def test_{name}_{k}({args}):\n"
           f"    globals().update(env)\n"
           f"    from minirepro.labs import checks as lab_checks  # noqa: F401\n{body}\n")
    return _code(src)


def _question_cells(q, scale: str) -> list:
    """One graded question in otter-assign's markup: prompt, solution and scaffold, its
    public tests, then its hidden ones."""
    cells = [_raw(f"# BEGIN QUESTION\nname: {q.name}\npoints: {q.points}"),
             _md(f"**Graded question `{q.name}`** ({q.points} point"
                 f"{'s' if q.points != 1 else ''}). {at_scale(plain(q.prompt), scale)}"),
             _raw("# BEGIN SOLUTION"),
             _code("# BEGIN SOLUTION NO PROMPT\n" + q.solution + "\n# END SOLUTION\n"
                   '""" # BEGIN PROMPT\n' + q.scaffold + '\n""" # END PROMPT'),
             _raw("# END SOLUTION"), _raw("# BEGIN TESTS")]
    cells += [_test_cell(q.name, k, t, hidden=False) for k, t in enumerate(q.public)]
    cells += [_test_cell(q.name, k, t, hidden=True) for k, t in enumerate(q.hidden, len(q.public))]
    return cells + [_raw("# END TESTS"), _raw("# END QUESTION")]


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
        "run the `grader.check(...)` cell below it. It checks the *form* of your answer only "
        "(\"format only: the answer is graded later\"); the points go to hidden tests of its "
        "correctness, run by the grader. Exercises that ask for `minirepro run` or `sweep` "
        f"are done in a terminal in the folder of this notebook, at the lab's scale "
        f"(`--scale {spec.scale}`, as every command below says): the run folders then land in "
        "`runs/` beside this notebook, where the grader looks. The last cell zips this "
        "notebook with its `runs/` folder: hand in that zip."))
    lab_params = {"seed": 0, **spec.params}
    params = "\n".join([f"scale = {spec.scale!r}  # the lab's scale: smoke, book or full"]
                       + [f"{k} = {v!r}" for k, v in lab_params.items() if k != "scale"])
    cells.append(_code(params, tags=["parameters"]))
    cells.append(_code("from minirepro.labs import checks as lab_checks  # helpers the graded questions may use\n"
                       "lab_checks.format_only_checks()  # grader.check says when it checked the form only\n"
                       + spec.setup))
    graded = {}
    for q in spec.questions:
        graded.setdefault(q.exercise, []).append(q)
    for n, ex in enumerate(chapter_exercises(ch), 1):
        mark = " (graded)" if ex.label in graded else ""
        cells.append(_md(f"## Exercise {n}{mark}\n\n{at_scale(plain(ex.prompt), spec.scale)}"))
        if ex.label not in graded:
            cells.append(_md("*Your answer (not graded):*"))
            cells.append(_code("# your code here"))
            continue
        for q in graded[ex.label]:
            cells.extend(_question_cells(q, spec.scale))
    cells.append(_md("## Hand in\n\nSave the notebook, then run the cell below: it writes "
                     f"`{ch.name}_<date>.zip` beside this notebook, holding the notebook and the "
                     "records of your runs in `runs/`. Hand in that zip."))
    cells.append(_code("grader.export(pdf=False, files=lab_checks.hand_in_files())"))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def without_markup(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The autograder's solutions notebook without otter-assign markup: each solution cell
    holds the solution's code alone (no ``# BEGIN SOLUTION`` lines, no prompt block)."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines, out, in_prompt = cell.source.splitlines(), [], False
        for line in lines:
            if re.match(r'^\s*""" # BEGIN PROMPT', line):
                in_prompt = True
                continue
            if in_prompt:
                in_prompt = not re.match(r'^\s*""" # END PROMPT', line)
                continue
            if re.match(r"^\s*# (?:BEGIN|END) SOLUTION\b", line):
                continue
            out.append(line)
        cell.source = "\n".join(out).strip("\n")
    return nb


# --------------------------------------------------------------------------- build
def default_out() -> Path:
    """Where ``minirepro lab`` writes when no ``--out`` is given: ``_build/labs`` in the current
    folder (as ``minirepro run`` writes ``runs/`` there), never inside the book's install."""
    return Path.cwd() / "_build" / "labs"


@contextlib.contextmanager
def quiet():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        yield buf


def assign(spec: LabSpec, work: Path) -> Path:
    """``otter assign`` of the spec's master notebook into ``work/dist``."""
    from otter.assign import main as otter_assign

    master = work / f"{spec.chapter.name}.ipynb"
    nbformat.write(master_notebook(spec), master)
    dist = work / "dist"
    with quiet() as log:
        try:
            otter_assign(str(master), str(dist), no_pdfs=True, no_run_tests=True)
        except Exception as exc:  # otter's own error, with its log, in one line
            raise LabError(f"otter assign failed for {spec.chapter.name}: {exc}; "
                           f"{log.getvalue().strip()[-300:]}") from exc
    master.unlink()
    return dist


def build_lab(chapter_name: str, out: Path | None = None, root: Path | None = None) -> dict[str, Path]:
    """Write ``out/student/<chapter>/`` and ``out/autograder/<chapter>/`` for one chapter
    (``out`` by default ``_build/labs`` in the current folder: :func:`default_out`).

    Built in a temporary folder and moved into place at the end, so a failure leaves
    nothing half-written. Returns the two folders.
    """
    return build_labs([chapter_name], out, root)[chapter_name]


def build_labs(chapter_names: list[str], out: Path | None = None,
               root: Path | None = None) -> dict[str, dict[str, Path]]:
    """Several labs (``lab --all``: every registered chapter); all specs are checked first."""
    root = root or repo_root()
    out = Path(out) if out else default_out()
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
            staged[spec.chapter.name] = assign(spec, work)
        for name, dist in staged.items():
            for z in (dist / "autograder").glob(f"{name}-autograder_*.zip"):
                z.rename(z.with_name("autograder.zip"))  # a stable name, not a timestamp
            for solutions in (dist / "autograder").glob("*.ipynb"):
                nbformat.write(without_markup(nbformat.read(solutions, as_version=4)), solutions)
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
