"""The teacher's guide's sample grade report: a class of two students, graded for real.

``python -m minirepro.labs.sample`` re-makes ``book/lab-report.txt``."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat
import yaml

from minirepro.chapters import repo_root
from minirepro.labs.assign import build_lab
from minirepro.labs.grade import grade, report
from minirepro.labs.spec import load_spec

SAMPLE_CHAPTER = "spreadsheetarena"
SAMPLE_REPORT = Path("book") / "lab-report.txt"


def sample_class(folder: Path, root: Path | None = None) -> Path:
    """A class of two for the teacher's guide, made by the tools themselves.

    ``ada`` hands in the instructor's notebook and a real smoke-scale run of the
    exercise's command (``minirepro run``, recorded under her ``runs/``); ``bob`` hands
    in the student edition with one wrong answer and a run folder that does not exist.
    """
    from minirepro.run import run_chapter

    root = root or repo_root()
    spec = load_spec(SAMPLE_CHAPTER, root)
    built = build_lab(SAMPLE_CHAPTER, folder / "pack", root)
    ada, bob = folder / "class" / "ada", folder / "class" / "bob"
    ada.mkdir(parents=True)
    bob.mkdir(parents=True)
    shutil.copy(built["autograder"] / f"{SAMPLE_CHAPTER}.ipynb", ada)
    run_q = next(yaml.safe_load(spec.path.read_text())["questions"][i]["run"]
                 for i, q in enumerate(spec.questions) if q.name.startswith("run_"))
    run_chapter(spec.chapter, dict(run_q.get("params") or {}), scale=run_q.get("scale"),
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


if __name__ == "__main__":  # python -m minirepro.labs.sample: re-make the guide's sample report
    print(write_sample_report())
