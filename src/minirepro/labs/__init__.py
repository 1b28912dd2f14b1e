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

from minirepro.labs.assign import build_lab, build_labs, default_out, master_notebook
from minirepro.labs.grade import Grade, Grades, QuestionGrade, grade, report, write_json_summary
from minirepro.labs.spec import (
           LabError,
           LabSpec,
           Question,
           all_chapters,
           chapter_exercises,
           load_spec,
           registered_chapters,
)

__all__ = ["Grade", "Grades", "LabError", "LabSpec", "Question", "QuestionGrade", "all_chapters", "build_lab",
           "build_labs", "chapter_exercises", "default_out", "grade", "load_spec", "master_notebook",
           "registered_chapters", "report", "write_json_summary"]
